package labkit

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// wholeMS returns d in whole milliseconds (truncated), as the log prints times.
func wholeMS(d time.Duration) int64 { return int64(d / time.Millisecond) }

// WriteLog writes the result as the lab's log: the summary line
//
//	RETRY IMMEDIATELY: 4 callers, 64 attempts total, 4 accepted, peak 18
//
// and, when attempts is true, one line per attempt, by caller, indented by
// two spaces:
//
//	caller 1 attempt 1: straight away -> DOWN at 12ms
//	caller 1 attempt 2: after 20ms -> DOWN at 58ms
//
// where "at" is the arrival time at the gateway (the send time if it never
// arrived) and waits are padded to the longest one. A caller
// that gave up gets one more line saying why:
//
//	caller 3 gave up after 3 attempts: budget
//
// The counts of the summary line are the gateway's: attempts received,
// attempts accepted, and the peak inside one window.
func (r *Result) WriteLog(w io.Writer, attempts bool) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "%s: %d callers, %d attempts total, %d accepted, peak %d\n",
		r.Strategy.Title, r.Scenario.Callers, r.Gateway.Total, r.Gateway.Accepted, r.Gateway.Peak)
	if attempts {
		width := 0
		for _, a := range r.Attempts {
			if a.Attempt > 1 {
				width = max(width, len(strconv.FormatInt(wholeMS(a.Wait), 10))+2)
			}
		}
		next := 0 // index into r.Attempts
		for _, c := range r.Callers {
			for ; next < len(r.Attempts) && r.Attempts[next].Caller == c.Caller; next++ {
				a := r.Attempts[next]
				wait := "straight away"
				if a.Attempt > 1 {
					wait = fmt.Sprintf("after %-*s", width, strconv.FormatInt(wholeMS(a.Wait), 10)+"ms")
				}
				fmt.Fprintf(bw, "  caller %d attempt %d: %s -> %s at %dms\n",
					a.Caller, a.Attempt, wait, strings.ToUpper(a.Outcome.String()), wholeMS(a.At()))
			}
			if !c.Accepted {
				fmt.Fprintf(bw, "  caller %d gave up after %d attempt%s: %s\n",
					c.Caller, c.Attempts, plural(c.Attempts), c.GaveUp)
			}
		}
	}
	return bw.Flush()
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// Summary is a result in the shape of `stagger lab --json`. Points in time
// (*_ms ints) are whole milliseconds since the start; the latency and
// overhead fields are fractional milliseconds.
type Summary struct {
	Name  string `json:"name"`  // the strategy's command-line name
	Title string `json:"title"` // the strategy's log heading
	// Callers is the number of callers; CallersAccepted those accepted.
	Callers         int `json:"callers"`
	CallersAccepted int `json:"callers_accepted"` // callers whose request was accepted
	// Attempts, Accepted, Rejected and Peak are the gateway's counts.
	Attempts int   `json:"attempts"`
	Accepted int   `json:"accepted"`   // attempts accepted
	Rejected int   `json:"rejected"`   // attempts refused or failed
	Peak     int   `json:"peak"`       // most attempts inside one window
	PeakAtMS int64 `json:"peak_at_ms"` // start of the earliest peak window, ms
	// CallerAttempts is the callers' own count of attempts sent; Agree says
	// it matched the gateway's attempt by attempt.
	CallerAttempts int      `json:"caller_attempts"`
	Agree          bool     `json:"agree"`                // Result.Agree
	Mismatches     []string `json:"mismatches,omitempty"` // Result.Mismatches; omitted when Agree
	// Waits counts the waits before retries, DistinctWaits their distinct
	// whole-millisecond values.
	Waits         int  `json:"waits"`
	DistinctWaits int  `json:"distinct_waits"` // distinct whole-ms waits
	Jittered      bool `json:"jittered"`       // the strategy draws random waits (Strategy.Jittered)
	// LastAcceptMS is when the last accepted attempt arrived (null when
	// none was).
	LastAcceptMS *int64 `json:"last_accept_ms"`
	// AttemptsPerRequest is the mean attempts per logical request;
	// MaxAttemptsPerRequest the most any one made.
	AttemptsPerRequest    float64        `json:"attempts_per_request"`
	MaxAttemptsPerRequest int            `json:"max_attempts_per_request"` // the gateway's Stats.MaxAttempts
	GaveUp                map[string]int `json:"gave_up"`                  // callers that gave up, by retry.Reason name; {} when none
	// LatencyMS is the gateway latency used; OverheadMS what the machine
	// was measured to add per cycle when the latency was calibrated.
	LatencyMS  float64 `json:"latency_ms"`
	OverheadMS float64 `json:"overhead_ms"` // 0 unless Scenario.RoundTrip was set
	// ObservedOverheadMS is what the machine added per retry cycle during
	// the run (see Result.ObservedOverhead).
	ObservedOverheadMS float64       `json:"observed_overhead_ms"`
	ElapsedMS          int64         `json:"elapsed_ms"`            // the run's wall time, ms
	Timeline           []WindowCount `json:"timeline"`              // the gateway's counts per window, from the start
	Log                []LogEntry    `json:"attempt_log,omitempty"` // every attempt, by caller then attempt; only when asked for
}

// WindowCount is one bucket of the timeline.
type WindowCount struct {
	StartMS  int64 `json:"start_ms"` // window start, ms
	Accepted int   `json:"accepted"` // attempts accepted in the window
	Rejected int   `json:"rejected"` // attempts refused or failed in the window
}

// LogEntry is one attempt of the log.
type LogEntry struct {
	Caller   int     `json:"caller"`   // 1..N
	Attempt  int     `json:"attempt"`  // 1 for the first try
	WaitMS   int64   `json:"wait_ms"`  // wait the policy chose before it, ms; 0 for the first
	SentMS   int64   `json:"sent_ms"`  // when the caller sent it, ms
	AtMS     int64   `json:"at_ms"`    // arrival at the gateway (SentMS if never received), ms
	Received bool    `json:"received"` // the gateway counted it
	Outcome  Outcome `json:"outcome"`  // what the caller saw: "accepted", "down", "busy" or "failed"
}

// Summary returns the result in the JSON shape; withLog includes every
// attempt.
func (r *Result) Summary(withLog bool) Summary {
	g := r.Gateway
	s := Summary{
		Name: r.Strategy.Name, Title: r.Strategy.Title,
		Callers: r.Scenario.Callers, CallersAccepted: r.CallersAccepted(),
		Attempts: g.Total, Accepted: g.Accepted, Rejected: g.Rejected,
		Peak: g.Peak, PeakAtMS: wholeMS(g.PeakAt),
		CallerAttempts: len(r.Attempts), Agree: r.Agree(), Mismatches: r.Mismatches,
		Waits: len(r.Waits()), DistinctWaits: r.DistinctWaits(), Jittered: r.Strategy.Jittered,
		AttemptsPerRequest: g.AttemptsPerRequest(), MaxAttemptsPerRequest: g.MaxAttempts,
		GaveUp:             map[string]int{},
		LatencyMS:          msf(r.Latency),
		OverheadMS:         msf(r.Overhead),
		ObservedOverheadMS: msf(r.ObservedOverhead()),
		ElapsedMS:          wholeMS(r.Elapsed),
		Timeline:           make([]WindowCount, len(g.Timeline)),
	}
	if g.Accepted > 0 {
		v := wholeMS(g.LastAccepted)
		s.LastAcceptMS = &v
	}
	for reason, n := range r.GaveUp() {
		s.GaveUp[reason.String()] = n
	}
	for i, b := range g.Timeline {
		s.Timeline[i] = WindowCount{StartMS: wholeMS(b.Start), Accepted: b.Accepted, Rejected: b.Rejected}
	}
	if withLog {
		s.Log = make([]LogEntry, len(r.Attempts))
		for i, a := range r.Attempts {
			s.Log[i] = LogEntry{Caller: a.Caller, Attempt: a.Attempt, WaitMS: wholeMS(a.Wait),
				SentMS: wholeMS(a.Sent), AtMS: wholeMS(a.At()), Received: a.Received, Outcome: a.Outcome}
		}
	}
	return s
}
