// Package labstats is what the lab's receiving-side counters report: the
// outcome of one attempt, the statistics of a run and its timeline, and the
// bounds of a windowed counter. It is the one definition of these types,
// which package lab returns and the lab behind it builds.
package labstats

import (
	"fmt"
	"time"
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
	// Down: refused because the receiver was down (an outage or a flap).
	Down
	// Busy: refused because the receiver was at its concurrency cap.
	Busy
	// Failed: the attempt got no usable answer (a transport error, a
	// dropped connection, an error upstream of a proxy). A recorder
	// counts any value it does not know, the zero value included, as Failed.
	Failed
	// Dropped: the receiver closed the connection without an answer on
	// purpose (a scheduled drop fault).
	Dropped
	// Abandoned: the sender went away (closed the connection, timed out)
	// before the receiver answered. The receiver may well have served it;
	// it is neither accepted nor rejected.
	Abandoned
)

// lastOutcome is the largest Outcome.
const lastOutcome = Abandoned

var outcomeNames = [...]string{Accepted: "accepted", Down: "down", Busy: "busy", Failed: "failed",
	Dropped: "dropped", Abandoned: "abandoned"}

// String returns "accepted", "down", "busy", "failed", "dropped" or
// "abandoned".
func (o Outcome) String() string {
	if o >= Accepted && o <= lastOutcome {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// MarshalText encodes the outcome as its String, for JSON.
func (o Outcome) MarshalText() ([]byte, error) {
	if o < Accepted || o > lastOutcome {
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
	return fmt.Errorf("lab: unknown outcome %q (want accepted, down, busy, failed, dropped or abandoned)", b)
}

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
func (b Bucket) Total() int { return b.Accepted + b.Rejected + b.Abandoned }

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
	// recorder's start (a windowed recorder's: from the oldest window it
	// keeps) to the last arrival.
	Timeline []Bucket
	// Folded counts the attempts of windows a windowed recorder no longer
	// keeps: they are in the totals, not in the Timeline. Evicted counts the
	// request IDs it forgot to stay within its bound. Both are 0 for a
	// recorder that keeps everything (lab.Recorder).
	Folded, Evicted int
}

// AttemptsPerRequest returns the mean number of attempts per logical
// request — the load amplification — or 0 when no request was identified.
func (s Stats) AttemptsPerRequest() float64 {
	if s.Requests == 0 {
		return 0
	}
	return float64(s.Total-s.Unidentified) / float64(s.Requests)
}

// WindowedConfig bounds a windowed recorder (lab.WindowedRecorder). Zero
// fields take the defaults.
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
