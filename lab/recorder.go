package lab

import (
	"fmt"
	"iter"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
)

// DefaultWindow is the width of the window the peak is counted in:
// "attempts inside one 200 ms window".
const DefaultWindow = 200 * time.Millisecond

// MaxIDLen is the longest request ID a [Recorder] attributes attempts to.
// Longer IDs are counted as unidentified, so a hostile client cannot make the
// recorder keep arbitrarily large keys.
const MaxIDLen = 256

// Outcome is what the receiving side did with one attempt.
type Outcome uint8

// Outcomes. Everything except Accepted is a rejection.
const (
	// Accepted: the receiver served the attempt.
	Accepted Outcome = iota + 1
	// Down: refused because the receiver was down (an outage or a flap).
	Down
	// Busy: refused because the receiver was at its concurrency cap.
	Busy
	// Failed: the attempt got no usable answer (a transport error, a
	// dropped connection, an error upstream of a proxy). A [Recorder]
	// counts any value it does not know, the zero value included, as Failed.
	Failed
)

var outcomeNames = [...]string{Accepted: "accepted", Down: "down", Busy: "busy", Failed: "failed"}

// String returns "accepted", "down", "busy" or "failed".
func (o Outcome) String() string {
	if o >= Accepted && o <= Failed {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// MarshalText encodes the outcome as its String, for JSON.
func (o Outcome) MarshalText() ([]byte, error) {
	if o < Accepted || o > Failed {
		return nil, fmt.Errorf("lab: invalid outcome %d", uint8(o))
	}
	return []byte(o.String()), nil
}

// UnmarshalText parses the names MarshalText writes.
func (o *Outcome) UnmarshalText(b []byte) error {
	for i, n := range outcomeNames {
		if n != "" && n == string(b) {
			*o = Outcome(i)
			return nil
		}
	}
	return fmt.Errorf("lab: unknown outcome %q (want accepted, down, busy or failed)", b)
}

func normalize(o Outcome) Outcome {
	if o < Accepted || o > Failed {
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
// request ID, so a Recorder is meant for an experiment or a test session
// (millions of attempts), not for a process that runs for months. Computing [Recorder.Stats] sorts a copy of the arrival
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
	counts [Failed + 1]int
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
	slices.SortStableFunc(out, func(a, b Arrival) int {
		switch {
		case a.At < b.At:
			return -1
		case a.At > b.At:
			return 1
		}
		return 0
	})
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

// Bucket is one window of a timeline: the attempts that arrived in
// [Start, Start+width).
type Bucket struct {
	Start    time.Duration // window start, from the recorder's start
	Accepted int           // attempts accepted
	Rejected int           // attempts with any other outcome
}

// Total returns Accepted + Rejected.
func (b Bucket) Total() int { return b.Accepted + b.Rejected }

// Stats is what the receiving side saw.
type Stats struct {
	// Window is the width the peak and the timeline were counted in.
	Window time.Duration
	// Total counts every attempt; Accepted + Rejected == Total and
	// Rejected == Down + Busy + Failed.
	Total, Accepted, Rejected int
	Down, Busy, Failed        int // rejections by Outcome
	// Peak is the largest number of attempts that arrived inside one
	// window [t, t+Window) for any t; PeakAt is the earliest such t (always
	// an arrival time).
	Peak   int
	PeakAt time.Duration // from the recorder's start
	// First and Last are the earliest and latest arrival (0 when none).
	First, Last time.Duration
	// LastAccepted is the arrival of the latest accepted attempt (0 when
	// none was accepted).
	LastAccepted time.Duration
	// Requests counts distinct logical request IDs; RequestsAccepted those
	// with at least one accepted attempt; Unidentified the attempts that
	// carried no usable ID.
	Requests, RequestsAccepted, Unidentified int
	// MaxAttempts is the most attempts any one logical request made.
	MaxAttempts int
	// Timeline counts the attempts per consecutive window from the
	// recorder's start to the last arrival.
	Timeline []Bucket
}

// AttemptsPerRequest returns the mean number of attempts per logical
// request — the load amplification — or 0 when no request was identified.
func (s Stats) AttemptsPerRequest() float64 {
	if s.Requests == 0 {
		return 0
	}
	return float64(s.Total-s.Unidentified) / float64(s.Requests)
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
	s.Total = r.n
	s.Accepted = r.counts[Accepted]
	s.Down, s.Busy, s.Failed = r.counts[Down], r.counts[Busy], r.counts[Failed]
	s.Rejected = s.Total - s.Accepted
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
			b := &s.Timeline[a.at/int64(window)]
			if a.outcome == Accepted {
				b.Accepted++
			} else {
				b.Rejected++
			}
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
