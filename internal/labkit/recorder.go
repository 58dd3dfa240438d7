package labkit

import (
	"cmp"
	"errors"
	"fmt"
	"hash/maphash"
	"iter"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/staggerhq/stagger/lab/labstats"
)

// The receiving side's counts are package labstats's: one definition,
// which package lab shows as it is.
type (
	Outcome        = labstats.Outcome
	Bucket         = labstats.Bucket
	Stats          = labstats.Stats
	WindowedConfig = labstats.WindowedConfig
)

// Outcomes (see labstats).
const (
	Accepted  = labstats.Accepted
	Down      = labstats.Down
	Busy      = labstats.Busy
	Failed    = labstats.Failed
	Dropped   = labstats.Dropped
	Abandoned = labstats.Abandoned
)

// DefaultWindow is the width of the window the peak is counted in.
const DefaultWindow = labstats.DefaultWindow

// MaxIDLen is the longest request ID a [Recorder] attributes attempts to.
// Longer IDs are counted as unidentified, so a hostile client cannot make the
// recorder keep arbitrarily large keys.
const MaxIDLen = 256

// lastOutcome is the largest Outcome.
const lastOutcome = Abandoned

func normalize(o Outcome) Outcome {
	if o < Accepted || o > lastOutcome {
		return Failed
	}
	return o
}

// Recorder counts attempts on the receiving side: when each arrived, what
// became of it, and which logical request and attempt number it was. It knows
// nothing of HTTP — the lab [Gateway] feeds it from its handler, and a proxy
// or any other receiver can feed it the same way — and answers with [Stats]:
// totals per outcome, the peak number of attempts inside any window of a
// given width (sliding, not aligned to a grid), a per-window timeline, and
// attempts per logical request.
//
// A Recorder is safe for concurrent use. Record is cheap: one uncontended
// mutex, a 24-byte entry written into a block of storage that is never
// copied and, for an identified attempt, one map look-up; it allocates only
// a new block every 4,096 attempts and an entry for a new request ID.
// Memory grows by those 24 bytes per attempt plus one entry per distinct
// request ID, so a Recorder is meant for an experiment or a test run
// (millions of attempts) that wants every attempt back ([Recorder.Arrivals]);
// a process that runs for days counts with a [WindowedRecorder], whose
// memory is bounded. Computing [Recorder.Stats] sorts a copy of the arrival
// times, O(n log n); call it when you need the numbers, not per attempt.
//
// The zero value is not usable; call [NewRecorder].
type Recorder struct {
	start time.Time

	mu sync.Mutex
	// arrivals are kept in blocks of chunkSize that are never copied, so
	// recording never moves what is already stored while holding the lock.
	chunks [][]arrival
	n      int
	ids    map[string]int32
	reqs   []reqStats
	counts outcomeCounts
}

// outcomeCounts counts attempts per Outcome (index 0 unused).
type outcomeCounts [lastOutcome + 1]int

// fill sets s's totals from the per-outcome counts.
func (c *outcomeCounts) fill(s *Stats) {
	s.Accepted, s.Abandoned = c[Accepted], c[Abandoned]
	s.Down, s.Busy, s.Failed, s.Dropped = c[Down], c[Busy], c[Failed], c[Dropped]
	s.Rejected = s.Down + s.Busy + s.Failed + s.Dropped
	s.Total = s.Accepted + s.Rejected + s.Abandoned
}

// chunkSize is the number of arrivals per storage block (96 KiB).
const chunkSize = 4096

// arrival is one recorded attempt; 24 bytes.
type arrival struct {
	at      int64 // nanoseconds since start, >= 0
	req     int32 // index into reqs; -1 when unidentified
	attempt int32
	outcome Outcome
}

type reqStats struct {
	id          string
	attempts    int
	accepted    int
	first, last int64
}

// NewRecorder returns an empty recorder whose clock starts at start: every
// arrival is stored as its offset from start, and windows and timelines are
// laid out from that origin.
func NewRecorder(start time.Time) *Recorder {
	return &Recorder{start: start, ids: make(map[string]int32)}
}

// Start returns the origin given to NewRecorder.
func (r *Recorder) Start() time.Time { return r.start }

// Record counts one attempt that arrived at time at. id names the logical
// request the attempt belongs to ("" when the sender did not say; IDs longer
// than MaxIDLen count as unidentified) and attempt its number as the sender
// counts them (1 for the first try; 0 when unknown). An arrival before the
// recorder's start counts as arriving at the start. Outcomes it does not
// know count as Failed.
//
// Arrivals may be recorded in any order (for example when the outcome is
// known only after an upstream answered): the statistics sort them by time.
func (r *Recorder) Record(at time.Time, id string, attempt int, o Outcome) {
	off := int64(at.Sub(r.start))
	if off < 0 {
		off = 0
	}
	att := int32(min(max(attempt, 0), math.MaxInt32))
	o = normalize(o)
	r.mu.Lock()
	req := int32(-1)
	if id != "" && len(id) <= MaxIDLen {
		i, ok := r.ids[id]
		if !ok && len(r.reqs) < math.MaxInt32 {
			i = int32(len(r.reqs))
			key := strings.Clone(id) // do not pin the caller's buffer
			r.ids[key] = i
			r.reqs = append(r.reqs, reqStats{id: key, first: off, last: off})
			ok = true
		}
		if ok {
			req = i
			s := &r.reqs[i]
			s.attempts++
			if o == Accepted {
				s.accepted++
			}
			s.first = min(s.first, off)
			s.last = max(s.last, off)
		}
	}
	if r.n%chunkSize == 0 {
		r.chunks = append(r.chunks, make([]arrival, 0, chunkSize))
	}
	last := &r.chunks[len(r.chunks)-1]
	*last = append(*last, arrival{at: off, req: req, attempt: att, outcome: o})
	r.n++
	r.counts[o]++
	r.mu.Unlock()
}

// Total returns the number of attempts recorded so far.
func (r *Recorder) Total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// all yields every arrival in recording order; r.mu must be held.
func (r *Recorder) all() iter.Seq[arrival] {
	return func(yield func(arrival) bool) {
		for _, c := range r.chunks {
			for _, a := range c {
				if !yield(a) {
					return
				}
			}
		}
	}
}

// Arrival is one attempt as the receiving side recorded it.
type Arrival struct {
	// At is the arrival time, measured from the recorder's start.
	At time.Duration `json:"-"`
	// ID is the logical request ("" when unidentified).
	ID string `json:"id,omitempty"`
	// Attempt is the sender's attempt number (0 when unknown).
	Attempt int `json:"attempt,omitempty"`
	// Outcome is what the receiver did with it.
	Outcome Outcome `json:"outcome"`
}

// Arrivals returns a copy of every recorded attempt, ordered by arrival time
// (attempts recorded with the same time keep their recording order).
func (r *Recorder) Arrivals() []Arrival {
	r.mu.Lock()
	out := make([]Arrival, 0, r.n)
	for a := range r.all() {
		e := Arrival{At: time.Duration(a.at), Attempt: int(a.attempt), Outcome: a.outcome}
		if a.req >= 0 {
			e.ID = r.reqs[a.req].id
		}
		out = append(out, e)
	}
	r.mu.Unlock()
	slices.SortStableFunc(out, func(a, b Arrival) int { return cmp.Compare(a.At, b.At) })
	return out
}

// Request sums the attempts of one logical request.
type Request struct {
	ID       string // the request ID its attempts carried
	Attempts int    // attempts that arrived
	Accepted int    // of which accepted (more than 1 means duplicated work)
	// First and Last are the arrival times of its first and last attempt.
	First, Last time.Duration
}

// Requests returns the logical requests in the order their first attempt was
// recorded.
func (r *Recorder) Requests() []Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Request, len(r.reqs))
	for i, s := range r.reqs {
		out[i] = Request{ID: s.id, Attempts: s.attempts, Accepted: s.accepted,
			First: time.Duration(s.first), Last: time.Duration(s.last)}
	}
	return out
}

// addTo counts n attempts with outcome o in b.
func addTo(b *Bucket, o Outcome, n int) {
	switch o {
	case Accepted:
		b.Accepted += n
	case Abandoned:
		b.Abandoned += n
	default:
		b.Rejected += n
		switch o {
		case Down:
			b.Down += n
		case Busy:
			b.Busy += n
		case Dropped:
			b.Dropped += n
		default:
			b.Failed += n
		}
	}
}

// Stats computes the statistics of everything recorded so far, with the
// peak and the timeline counted in windows of width window (<= 0 means
// DefaultWindow).
func (r *Recorder) Stats(window time.Duration) Stats {
	if window <= 0 {
		window = DefaultWindow
	}
	s := Stats{Window: window}
	r.mu.Lock()
	ats := make([]int64, 0, r.n)
	var last, lastAcc int64 = 0, -1
	for a := range r.all() {
		ats = append(ats, a.at)
		last = max(last, a.at)
		if a.outcome == Accepted {
			lastAcc = max(lastAcc, a.at)
		}
		if a.req < 0 {
			s.Unidentified++
		}
	}
	r.counts.fill(&s)
	s.Requests = len(r.reqs)
	for _, q := range r.reqs {
		s.MaxAttempts = max(s.MaxAttempts, q.attempts)
		if q.accepted > 0 {
			s.RequestsAccepted++
		}
	}
	// The timeline needs outcomes; count it while holding the lock, sized
	// from the latest arrival.
	if s.Total > 0 {
		s.Timeline = make([]Bucket, last/int64(window)+1)
		for i, b := range s.Timeline {
			b.Start = time.Duration(i) * window
			s.Timeline[i] = b
		}
		for a := range r.all() {
			addTo(&s.Timeline[a.at/int64(window)], a.outcome, 1)
		}
	}
	r.mu.Unlock()

	if lastAcc >= 0 {
		s.LastAccepted = time.Duration(lastAcc)
	}
	slices.Sort(ats)
	if len(ats) > 0 {
		s.First, s.Last = time.Duration(ats[0]), time.Duration(ats[len(ats)-1])
	}
	s.Peak, s.PeakAt = peakSorted(ats, int64(window))
	return s
}

// SlidingPeak returns the largest number of the given times that fall inside
// one half-open window [t, t+window) for any t, and the earliest t at which
// that many fall inside (always one of the times). times need not be sorted
// and is not modified. A window <= 0 or no times give (0, 0).
func SlidingPeak(times []time.Duration, window time.Duration) (peak int, at time.Duration) {
	if window <= 0 || len(times) == 0 {
		return 0, 0
	}
	ats := make([]int64, len(times))
	for i, t := range times {
		ats[i] = int64(t)
	}
	slices.Sort(ats)
	return peakSorted(ats, int64(window))
}

// peakSorted is SlidingPeak over sorted nanoseconds. A window with the most
// arrivals can always be slid right until its left edge meets an arrival
// without losing one, so only windows starting at an arrival are examined;
// two indexes walk the slice once.
func peakSorted(ats []int64, window int64) (int, time.Duration) {
	best, bestAt := 0, int64(0)
	j := 0
	for i, t := range ats {
		if i > 0 && t == ats[i-1] {
			continue // same start as the previous window: not more arrivals
		}
		if end := t + window; end < t { // overflow: the window reaches the end of time
			j = len(ats)
		} else {
			for j < len(ats) && ats[j] < end {
				j++
			}
		}
		if n := j - i; n > best {
			best, bestAt = n, t
		}
	}
	return best, time.Duration(bestAt)
}

// Defaults and bounds of a [WindowedRecorder].
const (
	// DefaultHorizon is how far back a WindowedRecorder keeps its timeline.
	DefaultHorizon = time.Hour
	// DefaultMaxRequests is how many request IDs it tracks at once.
	DefaultMaxRequests = 1 << 20
	// DefaultLateness is how long after its arrival an attempt may be
	// counted toward the peak with the peak still exact.
	DefaultLateness = 250 * time.Millisecond
	// MaxWindows bounds Horizon / Window.
	MaxWindows = 1 << 20
)

// WindowedRecorder counts attempts on the receiving side as a [Recorder]
// does, for a process that runs for days: its memory is bounded by the
// number of windows it keeps and the number of request IDs it tracks, not
// by the number of attempts, and [WindowedRecorder.Stats] takes a time
// independent of that number.
//
//   - Totals per outcome are exact for the whole run.
//   - The timeline keeps the windows of the last Horizon (one 28-byte
//     counter per window); the attempts of older windows stay in the totals
//     and are counted in Stats.Folded.
//   - The peak inside a sliding window is exact over the whole run as long
//     as every attempt is passed to [WindowedRecorder.Arrive] within
//     Lateness of the latest arrival seen so far (arrivals from concurrent
//     handlers are never further apart than that); an attempt arriving later
//     counts everywhere except in windows already closed. It keeps the
//     arrival times of the last Window + Lateness only.
//   - Request IDs are kept as 64-bit hashes (a collision between two of a
//     million IDs has a chance of about 3 in 10⁸), at most MaxRequests of
//     them; a new ID beyond that forgets the oldest one (Stats.Evicted), and
//     if that request sends another attempt later it counts as a new one.
//     Requests, RequestsAccepted and MaxAttempts are kept as running totals,
//     so they cover forgotten requests too.
//
// It does not keep attempts one by one: it has no Arrivals or Requests.
// A WindowedRecorder is safe for concurrent use; the zero value is not
// usable; call [NewWindowedRecorder].
type WindowedRecorder struct {
	start    time.Time
	window   int64
	lateness int64
	maxReqs  int
	seed     maphash.Seed

	mu           sync.Mutex
	counts       outcomeCounts
	unidentified int
	first, last  int64 // valid when counts is not all zero
	lastAcc      int64 // -1 when none was accepted
	any          bool

	// ring[k%len(ring)] counts window k (arrivals in [k*window, (k+1)*window));
	// it holds the windows newest-len(ring)+1 .. newest.
	ring   []windowCounts
	newest int64 // -1 before the first attempt
	folded int

	peak peakTracker

	ids      map[uint64]reqCount
	order    []uint64 // the tracked hashes, oldest at orderAt once full
	orderAt  int
	requests int
	reqsAcc  int
	maxAtt   int
	evicted  int
}

type windowCounts [lastOutcome + 1]uint32

type reqCount struct{ attempts, accepted uint32 }

// Pending is an attempt [WindowedRecorder.Arrive] counted toward the peak,
// waiting for its outcome.
type Pending struct{ at int64 }

// NewWindowedRecorder returns an empty recorder whose clock starts at start,
// or an error naming the field of cfg that is out of range.
func NewWindowedRecorder(start time.Time, cfg WindowedConfig) (*WindowedRecorder, error) {
	if cfg.Window == 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.Horizon == 0 {
		cfg.Horizon = DefaultHorizon
	}
	if cfg.MaxRequests == 0 {
		cfg.MaxRequests = DefaultMaxRequests
	}
	if cfg.Lateness == 0 {
		cfg.Lateness = DefaultLateness
	}
	switch {
	case cfg.Window < 0:
		return nil, fmt.Errorf("lab: WindowedConfig.Window %v: must be positive", cfg.Window)
	case cfg.Horizon < cfg.Window:
		return nil, fmt.Errorf("lab: WindowedConfig.Horizon %v: must be at least the window (%v)", cfg.Horizon, cfg.Window)
	case cfg.Horizon/cfg.Window > MaxWindows:
		return nil, fmt.Errorf("lab: WindowedConfig.Horizon %v: at most %d windows of %v (%v)", cfg.Horizon, MaxWindows, cfg.Window, cfg.Window*MaxWindows)
	case cfg.MaxRequests < 0 || cfg.MaxRequests > math.MaxInt32:
		return nil, fmt.Errorf("lab: WindowedConfig.MaxRequests %d: must be between 1 and %d", cfg.MaxRequests, math.MaxInt32)
	case cfg.Lateness < 0:
		return nil, errors.New("lab: WindowedConfig.Lateness: must not be negative")
	}
	n := int((cfg.Horizon + cfg.Window - 1) / cfg.Window)
	return &WindowedRecorder{
		start: start, window: int64(cfg.Window), lateness: int64(cfg.Lateness), maxReqs: cfg.MaxRequests,
		seed: maphash.MakeSeed(), lastAcc: -1, newest: -1,
		ring: make([]windowCounts, n), ids: make(map[uint64]reqCount),
		peak: peakTracker{window: int64(cfg.Window), lateness: int64(cfg.Lateness)},
	}, nil
}

// Start returns the origin given to NewWindowedRecorder.
func (r *WindowedRecorder) Start() time.Time { return r.start }

// Window returns the width of the windows.
func (r *WindowedRecorder) Window() time.Duration { return time.Duration(r.window) }

// Arrive counts an attempt that arrived at time at toward the peak; pass
// the result to Finish once its outcome is known. An arrival before the
// recorder's start counts as arriving at the start.
func (r *WindowedRecorder) Arrive(at time.Time) Pending {
	off := max(int64(at.Sub(r.start)), 0)
	r.mu.Lock()
	r.peak.add(off)
	r.mu.Unlock()
	return Pending{off}
}

// Finish counts the attempt p with its outcome: id and attempt as for
// [Recorder.Record]. Call it once per Pending; the counts and the timeline
// see the attempt from then on, the peak from Arrive.
func (r *WindowedRecorder) Finish(p Pending, id string, attempt int, o Outcome) {
	o = normalize(o)
	var key uint64
	identified := id != "" && len(id) <= MaxIDLen
	if identified {
		key = maphash.String(r.seed, id) // outside the lock
	}
	off := p.at
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts[o]++
	if !r.any {
		r.first, r.last, r.any = off, off, true
	}
	r.first, r.last = min(r.first, off), max(r.last, off)
	if o == Accepted {
		r.lastAcc = max(r.lastAcc, off)
	}
	r.count(off/r.window, o)
	if !identified {
		r.unidentified++
		return
	}
	q, ok := r.ids[key]
	if !ok {
		r.track(key)
		r.requests++
	}
	q.attempts = min(q.attempts+1, math.MaxUint32-1)
	if o == Accepted {
		if q.accepted == 0 {
			r.reqsAcc++
		}
		q.accepted = min(q.accepted+1, math.MaxUint32-1)
	}
	r.maxAtt = max(r.maxAtt, int(q.attempts))
	r.ids[key] = q
}

// Record counts one attempt at once: Finish(Arrive(at), id, attempt, o).
func (r *WindowedRecorder) Record(at time.Time, id string, attempt int, o Outcome) {
	r.Finish(r.Arrive(at), id, attempt, o)
}

// track adds a new request hash, evicting the oldest when full; r.mu held.
func (r *WindowedRecorder) track(key uint64) {
	if len(r.order) < r.maxReqs {
		r.order = append(r.order, key)
		return
	}
	delete(r.ids, r.order[r.orderAt])
	r.evicted++
	r.order[r.orderAt] = key
	r.orderAt = (r.orderAt + 1) % len(r.order)
}

// count adds one attempt to window k, moving the ring forward and folding
// the windows that fall out of it; r.mu held.
func (r *WindowedRecorder) count(k int64, o Outcome) {
	n := int64(len(r.ring))
	if k > r.newest {
		// Windows newest+1 .. k enter; the ones they replace leave (all of
		// them when k is a horizon or more ahead).
		if k-r.newest >= n {
			for i := range r.ring {
				r.folded += r.ring[i].sum()
				r.ring[i] = windowCounts{}
			}
		} else {
			for j := r.newest + 1; j <= k; j++ {
				c := &r.ring[j%n]
				r.folded += c.sum()
				*c = windowCounts{}
			}
		}
		r.newest = k
	}
	if k <= r.newest-n {
		r.folded++ // older than the horizon: in the totals only
		return
	}
	r.ring[k%n][o]++
}

func (c *windowCounts) sum() int {
	t := 0
	for _, v := range c {
		t += int(v)
	}
	return t
}

// Stats returns the statistics so far; the Timeline (the kept windows, up
// to Horizon/Window of them) only when timeline is true. Its cost depends
// on the windows kept and the arrivals of the last Window + Lateness, not
// on the number of attempts recorded.
func (r *WindowedRecorder) Stats(timeline bool) Stats {
	s := Stats{Window: time.Duration(r.window)}
	r.mu.Lock()
	r.counts.fill(&s)
	if r.any {
		s.First, s.Last = time.Duration(r.first), time.Duration(r.last)
	}
	if r.lastAcc >= 0 {
		s.LastAccepted = time.Duration(r.lastAcc)
	}
	peak, at := r.peak.current()
	s.Peak, s.PeakAt = peak, time.Duration(at)
	s.Requests, s.RequestsAccepted, s.Unidentified = r.requests, r.reqsAcc, r.unidentified
	s.MaxAttempts, s.Evicted, s.Folded = r.maxAtt, r.evicted, r.folded
	if !timeline || r.newest < 0 {
		r.mu.Unlock()
		return s
	}
	// Copy the ring (28 bytes a window) and lay out the buckets unlocked.
	ring, newest := slices.Clone(r.ring), r.newest
	r.mu.Unlock()
	n := int64(len(ring))
	from := max(newest-n+1, 0)
	s.Timeline = make([]Bucket, 0, newest-from+1)
	for k := from; k <= newest; k++ {
		b := Bucket{Start: time.Duration(k * r.window)}
		for o, v := range ring[k%n] {
			if v > 0 {
				addTo(&b, Outcome(o), int(v))
			}
		}
		s.Timeline = append(s.Timeline, b)
	}
	return s
}

// peakTracker keeps the sliding peak of a stream of arrival times that come
// in nearly sorted: it keeps the times of the last window + lateness,
// sorted, and closes the window starting at each kept time once the latest
// time seen is lateness past its end.
type peakTracker struct {
	window, lateness int64
	buf              []int64 // sorted; buf[head:] are the open window starts
	head             int
	latest           int64
	peak             int
	peakAt           int64
}

func (p *peakTracker) add(t int64) {
	// Insert in order, searching from the end: arrivals are nearly sorted.
	i := len(p.buf)
	for i > p.head && p.buf[i-1] > t {
		i--
	}
	p.buf = slices.Insert(p.buf, i, t)
	p.latest = max(p.latest, t)
	for p.head < len(p.buf) {
		s := p.buf[p.head]
		end := s + p.window
		if end < s || end > p.latest-p.lateness { // still open (or reaches the end of time)
			break
		}
		open := p.buf[p.head:]
		j, _ := slices.BinarySearch(open, end) // first time >= end
		if j > p.peak {
			p.peak, p.peakAt = j, s
		}
		p.head++
	}
	if p.head > 1024 && p.head > len(p.buf)/2 {
		p.buf = p.buf[:copy(p.buf, p.buf[p.head:])]
		p.head = 0
	}
}

// current returns the peak over the closed and the open windows.
func (p *peakTracker) current() (int, int64) {
	n, at := peakSorted(p.buf[p.head:], p.window)
	if n > p.peak || (n == p.peak && n > 0 && int64(at) < p.peakAt) {
		return n, int64(at)
	}
	return p.peak, p.peakAt
}
