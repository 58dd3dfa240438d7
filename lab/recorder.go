package lab

import (
	"time"

	"github.com/staggerhq/stagger/internal/labkit"
	"github.com/staggerhq/stagger/lab/labstats"
)

// DefaultWindow is the width of the window the peak is counted in:
// "attempts inside one 200 ms window".
const DefaultWindow = labstats.DefaultWindow

// Outcome is what the receiving side did with one attempt: Accepted, Down,
// Busy, Failed, Dropped or Abandoned.
type Outcome = labstats.Outcome

// Outcomes. Everything except Accepted and Abandoned is a rejection; see
// labstats for each.
const (
	Accepted  = labstats.Accepted
	Down      = labstats.Down
	Busy      = labstats.Busy
	Failed    = labstats.Failed
	Dropped   = labstats.Dropped
	Abandoned = labstats.Abandoned
)

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
	r.r.Record(at, id, attempt, o)
}

// Total returns the number of attempts recorded so far.
func (r *Recorder) Total() int { return r.r.Total() }

// Stats computes the statistics of everything recorded so far, with the peak
// and the timeline counted in windows of width window (<= 0 means
// [DefaultWindow]). It sorts a copy of the arrival times, O(n log n): call
// it when you need the numbers, not per attempt.
func (r *Recorder) Stats(window time.Duration) Stats { return r.r.Stats(window) }

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
type WindowedConfig = labstats.WindowedConfig

// NewWindowedRecorder returns an empty recorder whose clock starts at start,
// or an error naming the field of cfg that is out of range.
func NewWindowedRecorder(start time.Time, cfg WindowedConfig) (*WindowedRecorder, error) {
	r, err := labkit.NewWindowedRecorder(start, cfg)
	if err != nil {
		return nil, err
	}
	return &WindowedRecorder{r}, nil
}

// Record counts one attempt, as [Recorder.Record] does.
func (r *WindowedRecorder) Record(at time.Time, id string, attempt int, o Outcome) {
	r.r.Record(at, id, attempt, o)
}

// Stats returns the statistics so far; the Timeline (the kept windows) only
// when timeline is true.
func (r *WindowedRecorder) Stats(timeline bool) Stats { return r.r.Stats(timeline) }

// Bucket is one window of a timeline: the attempts that arrived in
// [Start, Start+width).
type Bucket = labstats.Bucket

// Stats is what the receiving side saw.
type Stats = labstats.Stats
