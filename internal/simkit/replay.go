package simkit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/staggerhq/stagger/internal/report"
	"github.com/staggerhq/stagger/internal/timeline"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retry/retrydriver"
)

// Errors of a replayed dependency, classified Retryable once.
var (
	// ErrShed is an attempt refused without being served: over the
	// recorded capacity, or a refusal (a load shedder's or a fault proxy's
	// 503, a 429, a refused connection) as recorded.
	ErrShed = retry.Retryable(errors.New("sim: refused by the dependency"))
	// ErrReset is a connection reset without an answer.
	ErrReset = retry.Retryable(errors.New("sim: connection reset"))
)

// DefaultHang is how long an attempt that gets no answer (a recorded
// timeout) waits when the policy bounds neither the attempt
// (AttemptTimeout) nor the request (Timeout).
const DefaultHang = 30 * time.Second

// MaxReplayInFlight bounds the logical requests in flight at once in a
// replay (their state is about 100 bytes each).
const MaxReplayInFlight = 1 << 24

// Replay is a dependency that follows a recorded [timeline.Timeline]: in
// each recorded window its capacity, error rate and latency are as
// recorded, and the callers follow the recorded arrivals (open loop) while
// the policy under test decides the retries. Make one with
// [ReplayDependency]; [Replay.Run] runs a policy against it in virtual time.
//
// The model, per window of the recording:
//
//   - Arrivals: the window's first attempts (Originals; all its arrivals
//     when the recording does not know which were first) start logical
//     requests at uniformly random instants inside the window — the
//     recorded retries are the old policy's, so they are not replayed.
//   - Capacity: when the recording shed load in the window (refusals, 429
//     or 503 answers, refused connections), the dependency admitted only
//     the rest, and a replay admits at most that many attempts in the
//     window; later ones are shed (ErrShed). A window that shed nothing
//     has no known capacity: every attempt is admitted.
//   - Errors: an admitted attempt fails with the recorded rate of the
//     window's admitted attempts (5xx other than 503, resets, timeouts),
//     the kind drawn in the recorded proportions; a shed one is refused
//     as recorded.
//   - Latency: an answer takes a latency drawn from the window's
//     percentiles ([timeline.Latency.Quantile]; the latest earlier window's
//     when the window has none); a reset or a refused connection answers
//     at once; a timeout never answers and the attempt ends at its bound.
//   - Between recorded windows and after the last one the dependency is
//     healthy: every attempt admitted and served, with the latest
//     latency. Attempts sent after the recording therefore finish.
//
// An attempt is bounded by min(Policy.AttemptTimeout, time left before
// the request's deadline); one whose answer comes later ends at the bound
// with ErrTimeout, and one that gets no answer and has no bound ends after
// [DefaultHang]. Every decision — the budget, the limiter, the deadline,
// the schedule — is the policy's own retrydriver.Step; the network between the
// callers and the dependency takes no time (the latencies are what a
// proxy in front of the dependency measured).
type Replay struct {
	tl   *timeline.Timeline
	wins []replayWindow
}

// replayWindow is one recorded window as the model uses it.
type replayWindow struct {
	start, end time.Duration
	originals  int64
	capacity   int64 // attempts admitted at most; -1: no limit
	// of the admitted attempts: the chance of failing, and how a failure
	// splits into 5xx answers, resets and timeouts (cumulative)
	pFail          float64
	p5xx, pReset   float64
	pConnRefused   float64 // of the shed attempts: refused connections (answered at once)
	latency        timeline.Latency
	hasLatency     bool
	recordedArrive int64
}

// ReplayDependency returns the dependency of tl (which must be valid; see
// [timeline.Timeline.Validate]).
func ReplayDependency(tl *timeline.Timeline) (*Replay, error) {
	if tl == nil {
		return nil, fmt.Errorf("%w: the timeline is nil", ErrInvalid)
	}
	if err := tl.Validate(); err != nil {
		return nil, err
	}
	if len(tl.Windows) == 0 {
		return nil, fmt.Errorf("%w: the timeline has no windows", ErrInvalid)
	}
	r := &Replay{tl: tl, wins: make([]replayWindow, len(tl.Windows))}
	var lat timeline.Latency
	known := false
	for i := range tl.Windows {
		w := &tl.Windows[i]
		rw := replayWindow{start: w.Start, end: w.Start + tl.Width, originals: w.Arrivals, capacity: -1, recordedArrive: w.Arrivals}
		if w.Originals >= 0 {
			rw.originals = w.Originals
		}
		shed := w.Refusals + w.Code("429") + w.Code("503") + w.Refused
		admitted := w.Arrivals - shed - w.Abandoned
		if shed > 0 {
			rw.capacity = admitted
			rw.pConnRefused = float64(w.Refused) / float64(shed)
		}
		fail5xx := w.Class(5) - w.Code("503")
		failed := fail5xx + w.Resets + w.Timeouts
		if admitted > 0 && failed > 0 {
			rw.pFail = min(1, float64(failed)/float64(admitted))
			rw.p5xx = float64(fail5xx) / float64(failed)
			rw.pReset = rw.p5xx + float64(w.Resets)/float64(failed)
		}
		if w.HasLatency {
			lat, known = w.Latency, true
		}
		rw.latency, rw.hasLatency = lat, known
		r.wins[i] = rw
	}
	// Windows before the first with a latency take the first one's.
	for i := range r.wins {
		if r.wins[i].hasLatency {
			for j := range i {
				r.wins[j].latency = r.wins[i].latency
			}
			break
		}
	}
	return r, nil
}

// Timeline returns the recording the dependency follows.
func (r *Replay) Timeline() *timeline.Timeline { return r.tl }

// ReplayOptions tune a [Replay.Run]; the zero value is the defaults.
type ReplayOptions struct {
	// Seed fixes the arrival instants, the failures and the latencies; a
	// policy without a Rand gets one from it too.
	Seed uint64
	// Window is the width of the sliding window the peak is counted in;
	// 0 means DefaultWindow.
	Window time.Duration
	// Hang is how long an attempt without an answer and without a bound
	// waits; 0 means DefaultHang.
	Hang time.Duration
}

// ReplayResult is what the dependency received when a policy replayed a
// recording, next to what it received when it was recorded.
type ReplayResult struct {
	// Attempts counts the attempts the dependency received; Originals the
	// logical requests started (the recorded first attempts); Succeeded
	// those that got a served answer.
	Attempts, Originals, Succeeded int64
	// GaveUp counts the logical requests that stopped without success, by
	// the policy's reason.
	GaveUp map[retry.Reason]int64
	// Peak is the most attempts inside one sliding Window; PeakAt the
	// arrival of the last attempt of the earliest such window.
	Peak   int
	PeakAt time.Duration
	Window time.Duration
	// Width is the recording's window width: Recorded[i] and Replayed[i]
	// count the attempts that arrived in [i·Width, (i+1)·Width), as
	// recorded and as replayed (Replayed runs on while retries last).
	Width              time.Duration
	Recorded, Replayed []int64
	// Completion is when the last logical request finished.
	Completion time.Duration
	// Events counts the simulator's events.
	Events uint64
}

// Amplification returns attempts per logical request (0 without any).
func (r *ReplayResult) Amplification() float64 {
	if r.Originals == 0 {
		return 0
	}
	return float64(r.Attempts) / float64(r.Originals)
}

// RecordedAttempts returns the attempts the recording received.
func (r *ReplayResult) RecordedAttempts() int64 {
	var n int64
	for _, v := range r.Recorded {
		n += v
	}
	return n
}

// LoadChart returns the report's chart of the attempts per window as
// recorded and as replayed, one line each, the x axis in seconds.
func (r *ReplayResult) LoadChart(title string) report.Chart {
	series := func(name string, vs []int64, c report.Color) report.Series {
		s := report.Series{Name: name, Color: c, Points: make([]report.Point, len(vs))}
		for i, v := range vs {
			s.Points[i] = report.Point{X: (time.Duration(i) * r.Width).Seconds(), Y: float64(v)}
		}
		return s
	}
	return report.Chart{
		Title: title, Kind: report.Lines, Wide: true,
		XLabel: "time since the recording started (s)", YLabel: fmt.Sprintf("attempts per %v window", r.Width),
		Series: []report.Series{series("recorded", r.Recorded, report.Grey), series("replayed", r.Replayed, report.Blue)},
	}
}

// Event kinds of a replay.
const (
	evRWindow int32 = iota // window ID's originals are scheduled
	evROriginal
	evRSend   // a retry's wait ended
	evRAnswer // an attempt ended
)

// replayReq is one logical request in flight.
type replayReq struct {
	d   retry.Delivery
	err error // the attempt's outcome, fixed when it arrives
}

// Run replays the recording with policy p in virtual time; p is not
// modified (a copy gets a Rand from the seed when p has none). The run
// ends when every logical request has finished. It returns an error when
// ctx ends (checked every 4,096 events) or more than MaxReplayInFlight
// requests are in flight at once.
func (r *Replay) Run(ctx context.Context, p *retry.Policy, o ReplayOptions) (*ReplayResult, error) {
	if p == nil {
		p = &retry.Policy{}
	}
	if o.Window < 0 || o.Hang < 0 {
		return nil, fmt.Errorf("%w: ReplayOptions.Window and .Hang must be >= 0", ErrInvalid)
	}
	if o.Window == 0 {
		o.Window = DefaultWindow
	}
	if o.Hang == 0 {
		o.Hang = DefaultHang
	}
	pol := *p
	if pol.Rand == nil {
		pol.Rand = pcg(o.Seed, 1)
	}
	rng := rand.New(pcg(o.Seed, 2))
	width := r.tl.Width
	e := NewEngine(1024)
	bindClock(pol.Limiter, e)
	m := NewMeter(o.Window, width)
	res := &ReplayResult{Window: o.Window, Width: width, GaveUp: map[retry.Reason]int64{}}

	var (
		reqs     []replayReq
		free     []int32
		adm      ReplayAdmission
		inFlight int
	)
	alloc := func() (int32, error) {
		if n := len(free); n > 0 {
			id := free[n-1]
			free = free[:n-1]
			reqs[id] = replayReq{}
			return id, nil
		}
		if len(reqs) == MaxReplayInFlight {
			return 0, fmt.Errorf("sim: replay: more than %d requests in flight at once", MaxReplayInFlight)
		}
		reqs = append(reqs, replayReq{})
		return int32(len(reqs) - 1), nil
	}
	done := func(id int32) {
		free = append(free, id)
		inFlight--
	}
	giveUp := func(id int32, reason retry.Reason) {
		m.GiveUp(e.Now(), reason)
		res.GaveUp[reason]++
		done(id)
	}
	// attempt sends attempt Delivery.Attempt of request id now: it
	// arrives at once, its outcome and answer time are drawn here.
	attempt := func(id int32) {
		now := e.Now()
		m.Call(now)
		q := &reqs[id]
		bound := pol.AttemptTimeout
		if !q.d.Deadline.IsZero() {
			if left := q.d.Deadline.Sub(e.Time()); bound == 0 || left < bound {
				bound = left
			}
		}
		lat, err := r.Outcome(now, rng, &adm)
		if lat < 0 { // no answer
			lat = o.Hang
			if bound > 0 {
				lat = bound
			}
		}
		if bound > 0 && lat > bound {
			err, lat = ErrTimeout, bound
		}
		q.err = err
		e.At(now+lat, evRAnswer, id)
	}
	begin := func(id int32) bool {
		s := retrydriver.Step{Policy: &pol, Delivery: reqs[id].d}
		if reason := s.Begin(context.Background(), e.Time()); reason != retry.NoReason {
			giveUp(id, reason)
			return false
		}
		reqs[id].d = s.Delivery
		return true
	}

	e.At(r.wins[0].start, evRWindow, 0)
	for {
		ev, ok := e.Next()
		if !ok {
			break
		}
		if e.Processed()%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		now := e.Now()
		switch ev.Kind {
		case evRWindow:
			for range r.wins[ev.ID].originals {
				e.At(r.Arrival(int(ev.ID), rng), evROriginal, 0)
			}
			if next := ev.ID + 1; int(next) < len(r.wins) {
				e.At(r.wins[next].start, evRWindow, next)
			}
		case evROriginal:
			id, err := alloc()
			if err != nil {
				return nil, err
			}
			inFlight++
			m.Original()
			if begin(id) {
				attempt(id)
			}
		case evRSend:
			if begin(ev.ID) {
				attempt(ev.ID)
			}
		case evRAnswer:
			q := &reqs[ev.ID]
			s := retrydriver.Step{Policy: &pol, Delivery: q.d}
			s.Resume()
			dec := s.End(q.err, e.Time())
			q.d = s.Delivery
			switch {
			case q.err == nil:
				m.Success(now)
				done(ev.ID)
			case !dec.Retry:
				giveUp(ev.ID, dec.Reason)
			default:
				e.At(now+dec.Delay, evRSend, ev.ID)
			}
		}
	}
	res.Attempts, res.Originals, res.Succeeded = m.Calls(), m.Originals(), m.Successes()
	res.Peak, res.PeakAt = m.Peak()
	res.Completion, res.Events = m.Completion(), e.Processed()
	res.Replayed = m.Load()
	res.Recorded = make([]int64, r.tl.End()/width)
	for _, w := range r.wins {
		res.Recorded[w.start/width] += w.recordedArrive
	}
	n := max(len(res.Recorded), len(res.Replayed))
	res.Recorded = append(res.Recorded, make([]int64, n-len(res.Recorded))...)
	res.Replayed = append(res.Replayed, make([]int64, n-len(res.Replayed))...)
	return res, nil
}

// Windows returns the number of recorded windows.
func (r *Replay) Windows() int { return len(r.wins) }

// Originals returns the logical requests recorded window i starts: its
// first attempts (all its arrivals when the recording does not know which
// were first).
func (r *Replay) Originals(i int) int64 { return r.wins[i].originals }

// Arrival draws the instant one of window i's logical requests starts:
// uniformly random inside the window.
func (r *Replay) Arrival(i int, rng *rand.Rand) time.Duration {
	return r.wins[i].start + time.Duration(rng.Int64N(int64(r.tl.Width)))
}

// ReplayAdmission counts the attempts admitted in the current window
// against its recorded capacity; the zero value is a run's start. One
// per run, used by one goroutine at a time.
type ReplayAdmission struct {
	win  int   // the window used counts
	used int64 // attempts admitted in it
}

// Outcome draws what the dependency does with an attempt arriving at now
// (from the recording's start): its latency (-1: it never answers) and its
// error — nil (served), ErrShed (refused: over the recorded capacity),
// ErrFailed (a 5xx answer), ErrReset (a reset, at once) or ErrTimeout (no
// answer). It is the replay's one rule per attempt: the virtual run
// ([Replay.Run]) and a real-time gateway both call it, in the order the
// attempts arrive.
func (r *Replay) Outcome(now time.Duration, rng *rand.Rand, a *ReplayAdmission) (time.Duration, error) {
	i := r.tl.At(now)
	if i < 0 { // between windows or after the recording: healthy
		lat := r.latencyBefore(now)
		return lat.Quantile(rng.Float64()), nil
	}
	w := &r.wins[i]
	if a.win != i {
		a.win, a.used = i, 0
	}
	draw := func() time.Duration {
		if !w.hasLatency {
			return 0
		}
		return w.latency.Quantile(rng.Float64())
	}
	if w.capacity >= 0 && a.used >= w.capacity {
		if rng.Float64() < w.pConnRefused {
			return 0, ErrShed
		}
		return draw(), ErrShed
	}
	a.used++
	if w.pFail > 0 && rng.Float64() < w.pFail {
		switch u := rng.Float64(); {
		case u < w.p5xx:
			return draw(), ErrFailed
		case u < w.pReset:
			return 0, ErrReset
		}
		return -1, ErrTimeout
	}
	return draw(), nil
}

// latencyBefore returns the latency of the latest window starting before
// t (the first window's when none does).
func (r *Replay) latencyBefore(t time.Duration) timeline.Latency {
	i := sort.Search(len(r.wins), func(i int) bool { return r.wins[i].start > t }) - 1
	return r.wins[max(i, 0)].latency
}
