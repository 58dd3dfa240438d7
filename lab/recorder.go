package lab

import (
	"time"

	"github.com/staggerhq/stagger/internal/labkit"
)

// DefaultWindow is the width of the window the peak is counted in:
// "attempts inside one 200 ms window".
const DefaultWindow = 200 * time.Millisecond

// Outcome is what the receiving side did with one attempt.
type Outcome uint8

// Outcomes. Everything except Accepted and Abandoned is a rejection.
const (
	// Accepted: the receiver served the attempt.
	Accepted Outcome = iota + 1
	// Down: refused because the receiver was down.
	Down
	// Busy: refused because the receiver was at its concurrency cap.
	Busy
	// Failed: the attempt got no usable answer. A recorder counts any value
	// it does not know, the zero value included, as Failed.
	Failed
	// Dropped: the receiver closed the connection without an answer on
	// purpose.
	Dropped
	// Abandoned: the sender went away before the receiver answered. The
	// receiver may well have served it; it is neither accepted nor rejected.
	Abandoned
)

// String returns "accepted", "down", "busy", "failed", "dropped" or
// "abandoned".
func (o Outcome) String() string { return labkit.Outcome(o).String() }

// MarshalText encodes the outcome as its String, for JSON.
func (o Outcome) MarshalText() ([]byte, error) { return labkit.Outcome(o).MarshalText() }

// UnmarshalText parses the names MarshalText writes.
func (o *Outcome) UnmarshalText(b []byte) error { return (*labkit.Outcome)(o).UnmarshalText(b) }

// Recorder counts attempts on the receiving side: when each arrived, what
// became of it, and which logical request and attempt number it was. It
// knows nothing of transports: a handler, a consumer or a proxy calls
// [Recorder.Record] per attempt ([Recorder.Handler] does it for an
// [http.Handler]), and [Recorder.Stats] answers with totals per outcome,
// the peak number of attempts inside any window of a given width (sliding,
// not aligned to a grid), a per-window timeline and attempts per logical
// request. It is the counter of the lab's own gateway.
//
// Record costs one uncontended mutex and, for an identified attempt, one
// map look-up; memory grows by 24 bytes per attempt plus an entry per
// request ID, so a Recorder is meant for an experiment or a test. A process
// that runs for days counts with a [WindowedRecorder].
//
// A Recorder is safe for concurrent use. The zero value is not usable;
// call [NewRecorder].
type Recorder struct{ r *labkit.Recorder }

// NewRecorder returns an empty recorder whose clock starts at start: arrival
// times are offsets from start, and windows are laid out from it.
func NewRecorder(start time.Time) *Recorder {
	return &Recorder{labkit.NewRecorder(start)}
}

// Record counts one attempt that arrived at time at. id names the logical
// request it belongs to ("" when the sender did not say; IDs longer than
// 256 bytes count as unidentified) and attempt its number as the sender
// counts (1 for the first try; 0 when unknown). An arrival before the
// recorder's start counts as arriving at the start. Attempts may be
// recorded in any order.
func (r *Recorder) Record(at time.Time, id string, attempt int, o Outcome) {
	r.r.Record(at, id, attempt, labkit.Outcome(o))
}

// Total returns the number of attempts recorded so far.
func (r *Recorder) Total() int { return r.r.Total() }

// Stats computes the statistics of everything recorded so far, with the peak
// and the timeline counted in windows of width window (<= 0 means
// [DefaultWindow]). It sorts a copy of the arrival times, O(n log n): call
// it when you need the numbers, not per attempt.
func (r *Recorder) Stats(window time.Duration) Stats { return statsOf(r.r.Stats(window)) }

// WindowedRecorder counts attempts as a [Recorder] does, for a process that
// runs for days: its memory is bounded by the windows it keeps and the
// request IDs it tracks, not by the number of attempts, and Stats takes a
// time independent of that number. Totals per outcome are exact for the whole
// run; the timeline keeps the windows of the last Horizon (older ones are
// counted in Stats.Folded); the peak is exact as long as every attempt is
// recorded within Lateness of the latest arrival seen; request IDs are kept
// as 64-bit hashes, at most MaxRequests of them (Stats.Evicted counts the
// ones forgotten). The counting proxy of the CLI uses it.
//
// A WindowedRecorder is safe for concurrent use. The zero value is not
// usable; call [NewWindowedRecorder].
type WindowedRecorder struct{ r *labkit.WindowedRecorder }

// WindowedConfig bounds a [WindowedRecorder]. Zero fields take the defaults.
type WindowedConfig struct {
	// Window is the width of the timeline's windows and of the sliding
	// window the peak is counted in; 0 means DefaultWindow.
	Window time.Duration
	// Horizon is how far back from the latest arrival the timeline reaches;
	// 0 means an hour. Horizon / Window must not exceed 2^20.
	Horizon time.Duration
	// MaxRequests is how many request IDs are tracked at once; 0 means
	// 2^20. A new ID beyond it forgets the oldest.
	MaxRequests int
	// Lateness is how long after the latest arrival seen an arrival may
	// still be recorded with the peak exact; 0 means 250 ms.
	Lateness time.Duration
}

// NewWindowedRecorder returns an empty recorder whose clock starts at start,
// or an error naming the field of cfg that is out of range.
func NewWindowedRecorder(start time.Time, cfg WindowedConfig) (*WindowedRecorder, error) {
	r, err := labkit.NewWindowedRecorder(start, labkit.WindowedConfig(cfg))
	if err != nil {
		return nil, err
	}
	return &WindowedRecorder{r}, nil
}

// Record counts one attempt, as [Recorder.Record] does.
func (r *WindowedRecorder) Record(at time.Time, id string, attempt int, o Outcome) {
	r.r.Record(at, id, attempt, labkit.Outcome(o))
}

// Stats returns the statistics so far; the Timeline (the kept windows) only
// when timeline is true.
func (r *WindowedRecorder) Stats(timeline bool) Stats { return statsOf(r.r.Stats(timeline)) }

// Bucket is one window of a timeline: the attempts that arrived in
// [Start, Start+width).
type Bucket struct {
	Start    time.Duration // window start, from the recorder's start
	Accepted int           // attempts accepted
	Rejected int           // attempts rejected: Down + Busy + Failed + Dropped
	// Rejections by Outcome, and the abandoned attempts (not in Rejected).
	Down, Busy, Failed, Dropped, Abandoned int
}

// Total returns Accepted + Rejected + Abandoned.
func (b Bucket) Total() int { return labkit.Bucket(b).Total() }

// Stats is what the receiving side saw.
type Stats struct {
	// Window is the width the peak and the timeline were counted in.
	Window time.Duration
	// Total counts every attempt; Accepted + Rejected + Abandoned == Total
	// and Rejected == Down + Busy + Failed + Dropped.
	Total, Accepted, Rejected, Abandoned int
	Down, Busy, Failed, Dropped          int // rejections by Outcome
	// Peak is the largest number of attempts that arrived inside one
	// window [t, t+Window) for any t; PeakAt is the earliest such t (always
	// an arrival time), from the recorder's start.
	Peak   int
	PeakAt time.Duration
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
	// recorder's start (a WindowedRecorder's: from the oldest window it
	// keeps) to the last arrival.
	Timeline []Bucket
	// Folded counts the attempts of windows a WindowedRecorder no longer
	// keeps (in the totals, not in the Timeline); Evicted the request IDs
	// it forgot to stay within its bound. Both are 0 for a Recorder.
	Folded, Evicted int
}

// AttemptsPerRequest returns the mean number of attempts per logical
// request — the load amplification — or 0 when no request was identified.
func (s Stats) AttemptsPerRequest() float64 {
	return labkit.Stats{Total: s.Total, Unidentified: s.Unidentified, Requests: s.Requests}.AttemptsPerRequest()
}

// statsOf copies the implementation's Stats (a test checks that no field
// is left out).
func statsOf(k labkit.Stats) Stats {
	s := Stats{
		Window: k.Window, Total: k.Total, Accepted: k.Accepted, Rejected: k.Rejected, Abandoned: k.Abandoned,
		Down: k.Down, Busy: k.Busy, Failed: k.Failed, Dropped: k.Dropped,
		Peak: k.Peak, PeakAt: k.PeakAt, First: k.First, Last: k.Last, LastAccepted: k.LastAccepted,
		Requests: k.Requests, RequestsAccepted: k.RequestsAccepted, Unidentified: k.Unidentified,
		MaxAttempts: k.MaxAttempts, Folded: k.Folded, Evicted: k.Evicted,
	}
	if k.Timeline != nil {
		s.Timeline = make([]Bucket, len(k.Timeline))
		for i, b := range k.Timeline {
			s.Timeline[i] = Bucket(b)
		}
	}
	return s
}
