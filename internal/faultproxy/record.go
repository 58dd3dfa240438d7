package faultproxy

import (
	"context"
	"errors"
	"math"
	"math/bits"
	"net"
	"net/http"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/staggerhq/stagger/internal/labkit"
	"github.com/staggerhq/stagger/internal/timeline"
	"github.com/staggerhq/stagger/retryhttp"
)

// recordHold is how long `stagger proxy --record` waits for the attempts
// of a window to be answered before it writes the window with the ones
// still unanswered counted as timeouts (an answer that comes later is not
// counted again).
const recordHold = 2 * time.Minute

// timelineRecorder writes what the upstream did per window to a timeline file
// (--record): the windows go to a temporary file as they complete, which
// close renames into place, so memory stays bounded by the windows still
// waiting for answers (at most recordHold of them) and a reader never sees
// half a file. Nothing but counts and latencies is written: no URL, header
// or body.
type timelineRecorder struct {
	width int64 // ns
	start time.Time

	mu     sync.Mutex
	file   *timeline.File
	base   int64        // every window before it is written
	wins   []*recWindow // the open windows with arrivals, by index k (>= base)
	latest int64        // latest arrival seen, ns since start
	closed bool
	err    error // the first write error; the file is abandoned
}

// recWindow counts one open window.
type recWindow struct {
	k                                              int64 // the window [k·width, (k+1)·width)
	arrivals, originals, pending                   int64
	status                                         map[int]int64
	refusals, timeouts, resets, refused, abandoned int64
	hist                                           *latencyHist
}

// newTimelineRecorder starts the timeline file at path, windows of width from
// start.
func newTimelineRecorder(path string, width time.Duration, start time.Time) (*timelineRecorder, error) {
	f, err := timeline.Create(path, timeline.Header{Width: width, Origin: start.UTC(), Source: "stagger proxy"})
	if err != nil {
		return nil, err
	}
	return &timelineRecorder{width: int64(width), start: start, file: f}, nil
}

// recAttempt is one attempt on its way through the proxy: what the
// recorder learns of it while it is served.
type recAttempt struct {
	rec     *timelineRecorder
	sw      *labkit.StatusWriter // the status written, a failed write
	r       *http.Request
	k       int64 // its window
	arrived time.Time
	upErr   error // the upstream's error (the reverse proxy's ErrorHandler)
	left    bool  // the client stopped sending its body (abandon)
	now     func() time.Time
}

type recKey struct{}

// arrive counts an attempt arriving now; serve it with the returned
// writer and request, and defer a.done() around the handler.
func (rc *timelineRecorder) arrive(w http.ResponseWriter, r *http.Request, now func() time.Time) (http.ResponseWriter, *http.Request, *recAttempt) {
	at := now()
	a := &recAttempt{rec: rc, sw: &labkit.StatusWriter{ResponseWriter: w}, arrived: at, now: now}
	a.r = r.WithContext(context.WithValue(r.Context(), recKey{}, a))
	first := false
	if v := r.Header.Values(retryhttp.AttemptHeader); len(v) == 1 {
		n, _ := retryhttp.ParseAttempt(v[0])
		first = n == 1
	}
	off := max(int64(at.Sub(rc.start)), 0)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	a.k = max(off/rc.width, rc.base) // an attempt for a window already written counts in the oldest open one
	rc.latest = max(rc.latest, off)
	if !rc.closed {
		win := rc.window(a.k)
		win.arrivals++
		win.pending++
		if first {
			win.originals++
		}
	}
	rc.flush(false)
	return a.sw, a.r, a
}

// window returns open window k (>= base), opening it if need be; rc.mu
// held. Only windows with arrivals are kept, so an idle spell costs
// nothing; the search starts at the newest, where arrivals land.
func (rc *timelineRecorder) window(k int64) *recWindow {
	i := len(rc.wins)
	for i > 0 && rc.wins[i-1].k > k {
		i--
	}
	if i > 0 && rc.wins[i-1].k == k {
		return rc.wins[i-1]
	}
	w := &recWindow{k: k}
	rc.wins = slices.Insert(rc.wins, i, w)
	return w
}

// noteUpstreamErr tells the attempt of r, if it is recorded, that the
// upstream did not answer: err says how.
func noteUpstreamErr(r *http.Request, err error) {
	if a, ok := r.Context().Value(recKey{}).(*recAttempt); ok {
		a.upErr = err
	}
}

// done counts what became of the attempt; deferred around the handler, it
// sees a dropped connection's panic and lets it go on.
// abandon marks the attempt as left by its client before it could be
// answered (its body stopped arriving). a may be nil (no --record).
func (a *recAttempt) abandon() {
	if a != nil {
		a.left = true
	}
}

func (a *recAttempt) done() {
	v := recover()
	gone := a.left || a.r.Context().Err() != nil || a.sw.WriteErr
	// a fault's or the cap's 503 carries the outcome the proxy decided
	refusal := a.sw.Status == http.StatusServiceUnavailable && a.sw.Header().Get(labkit.HeaderOutcome) != ""
	kind := "status"
	switch {
	case a.upErr != nil && gone, v != nil && gone:
		kind = "abandoned"
	case a.upErr != nil:
		kind = errKind(a.upErr)
	case v != nil:
		kind = "reset" // a drop fault, or the upstream broke off its answer
	case a.sw.Status == 0 && gone:
		kind = "abandoned" // the client left while a latency fault held it
	case refusal:
		kind = "refusal"
	case a.sw.Status == 0:
		a.sw.Status = http.StatusOK // the handler wrote nothing: net/http answers 200
	}
	a.rec.finish(a, kind, a.now().Sub(a.arrived))
	if v != nil {
		panic(v)
	}
}

// errKind names an upstream error: "timeout", "refused" (connection
// refused) or "reset" (any other failure to get an answer).
func errKind(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	}
	return "reset"
}

// finish counts attempt a's end: kind "status" (answered a.sw.Status),
// "refusal", "timeout", "reset", "refused" or "abandoned", after lat.
func (rc *timelineRecorder) finish(a *recAttempt, kind string, lat time.Duration) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.closed || a.k < rc.base {
		return // its window was written with the attempt as a timeout
	}
	win := rc.window(a.k)
	win.pending--
	switch kind {
	case "status":
		if win.status == nil {
			win.status = map[int]int64{}
		}
		win.status[a.sw.Status]++
	case "refusal":
		win.refusals++
	case "timeout":
		win.timeouts++
	case "reset":
		win.resets++
	case "refused":
		win.refused++
	default:
		win.abandoned++
	}
	if kind == "status" || kind == "refusal" {
		if win.hist == nil {
			win.hist = &latencyHist{}
		}
		win.hist.add(lat)
	}
	rc.flush(false)
}

// flush writes the open windows that are complete, oldest first: past
// their end with every attempt answered, or past their end by recordHold
// (the unanswered ones then count as timeouts); with all, every open
// window. rc.mu held.
func (rc *timelineRecorder) flush(all bool) {
	for len(rc.wins) > 0 {
		w := rc.wins[0]
		end := (w.k + 1) * rc.width
		switch {
		case all:
		case end > rc.latest:
			return // still open
		case w.pending > 0 && end+int64(recordHold) > rc.latest:
			return // waiting for answers
		}
		rc.write(w)
		rc.wins[0] = nil
		rc.wins = rc.wins[1:]
		rc.base = w.k + 1
	}
}

// write writes window w; rc.mu held.
func (rc *timelineRecorder) write(w *recWindow) {
	if rc.err != nil {
		return
	}
	tw := timeline.Window{Start: time.Duration(w.k * rc.width), Arrivals: w.arrivals, Originals: w.originals,
		Refusals: w.refusals, Timeouts: w.timeouts + w.pending, Resets: w.resets, Refused: w.refused, Abandoned: w.abandoned}
	for code := 100; code < 600 && len(tw.Status) < len(w.status); code++ {
		if n := w.status[code]; n > 0 {
			tw.Status = append(tw.Status, timeline.StatusCount{Status: itoa3(code), N: n})
		}
	}
	if w.hist != nil {
		tw.Latency, tw.HasLatency = timeline.Latency{P50: w.hist.quantile(0.5), P90: w.hist.quantile(0.9), P99: w.hist.quantile(0.99)}, true
	}
	rc.err = rc.file.Add(tw)
}

func itoa3(code int) string {
	return string([]byte{byte('0' + code/100), byte('0' + code/10%10), byte('0' + code%10)})
}

// close writes every open window, counting attempts still unanswered as
// timeouts, and renames the file into place; attempts that end later are
// not counted.
func (rc *timelineRecorder) close() error {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.closed {
		return errors.New("recorder already closed")
	}
	rc.flush(true)
	rc.closed = true
	if rc.err != nil {
		rc.file.Abort()
		return rc.err
	}
	return rc.file.Commit()
}

// latencyHist is a log-linear histogram of latencies: 16 buckets per
// power of two of microseconds (values within 4.5% of each other share a
// bucket), from 1 µs to 2^40 µs; 2.6 KB.
type latencyHist struct {
	n      int64
	counts [41 * 16]uint32
}

func (h *latencyHist) add(d time.Duration) {
	us := max(uint64(d/time.Microsecond), 1)
	e := bits.Len64(us) - 1 // us in [2^e, 2^(e+1))
	if e >= 41 {
		us, e = 1<<41-1, 40
	}
	var sub uint64
	if e >= 4 {
		sub = (us >> (e - 4)) & 15
	} else {
		sub = (us << (4 - e)) & 15
	}
	i := e*16 + int(sub)
	if h.counts[i] < math.MaxUint32 {
		h.counts[i]++
		h.n++
	}
}

// quantile returns the middle of the bucket holding quantile q.
func (h *latencyHist) quantile(q float64) time.Duration {
	rank := int64(math.Ceil(q * float64(h.n)))
	var seen int64
	for i, c := range h.counts {
		seen += int64(c)
		if c > 0 && seen >= rank {
			e, sub := i/16, float64(i%16)
			lo := math.Ldexp(1+sub/16, e)
			hi := math.Ldexp(1+(sub+1)/16, e)
			return time.Duration((lo + hi) / 2 * float64(time.Microsecond))
		}
	}
	return 0
}
