package faultproxy

import (
	"strconv"
	"time"

	"github.com/staggerhq/stagger/internal/labkit"
	"github.com/staggerhq/stagger/retryhttp"
)

// Stats is what a proxy counted: the one shape of the control API's
// GET /stats, `stagger proxy`'s /_stagger/stats, its --summary file (less
// the fields that change from run to run) and package proxytest. HTTP
// proxies count attempts; TCP proxies count connections as attempts
// (accepted: it ended normally; dropped: a fault closed or reset it;
// failed: the upstream could not be reached) and bytes.
type Stats struct {
	Name      string       `json:"name"`
	Kind      string       `json:"kind"` // "http" or "tcp"
	Listen    string       `json:"listen"`
	Upstream  string       `json:"upstream"`
	Faults    []string     `json:"faults"`       // every fault as a clause, timeline clauses first
	Counts    []FaultCount `json:"fault_counts"` // the named faults and what they did
	UptimeMS  int64        `json:"uptime_ms"`
	WindowMS  int64        `json:"window_ms"`
	Total     int          `json:"total"`
	Accepted  int          `json:"accepted"`
	Rejected  int          `json:"rejected"`
	Down      int          `json:"down"`
	Busy      int          `json:"busy"`
	Dropped   int          `json:"dropped"`
	Failed    int          `json:"failed"`
	Abandoned int          `json:"abandoned"`
	Peak      int          `json:"peak"`
	PeakAtMS  int64        `json:"peak_at_ms"`
	InFlight  int64        `json:"in_flight"`
	// Per logical request (HTTP): null when no attempt carried the key.
	Requests           *int     `json:"requests"`
	RequestsAccepted   *int     `json:"requests_accepted"`
	MaxAttempts        *int     `json:"max_attempts"`
	AttemptsPerRequest *float64 `json:"attempts_per_request"`
	Unidentified       int      `json:"unidentified"`
	// Attempts per Stagger-Attempt value ("none", "1", …, "16+"); null
	// when no attempt carried one (HTTP).
	ByAttempt map[string]int64 `json:"by_attempt"`
	// HTTP: attempts without a readable Stagger-Attempt, requests refused
	// with 413 (no attempts), request keys forgotten to stay within the
	// bound, attempts of windows older than the horizon, the horizon, and
	// how attempts are grouped into logical requests.
	Unnumbered int64  `json:"unnumbered"`
	TooLarge   int64  `json:"too_large"`
	Evicted    int    `json:"evicted_requests"`
	Folded     int    `json:"folded"`
	HorizonMS  int64  `json:"horizon_ms,omitempty"`
	GroupBy    string `json:"group_by,omitempty"`
	// TCP: bytes each way, and the most bytes in one window.
	BytesUp       int64    `json:"bytes_up,omitempty"`
	BytesDown     int64    `json:"bytes_down,omitempty"`
	PeakBytes     int64    `json:"peak_bytes,omitempty"`
	PeakBytesAtMS int64    `json:"peak_bytes_at_ms,omitempty"`
	Timeline      []Window `json:"timeline,omitempty"`
}

// Window is one window of the timeline.
type Window struct {
	StartMS   int64 `json:"start_ms"`
	Accepted  int   `json:"accepted"`
	Rejected  int   `json:"rejected"`
	Down      int   `json:"down,omitempty"`
	Busy      int   `json:"busy,omitempty"`
	Dropped   int   `json:"dropped,omitempty"`
	Failed    int   `json:"failed,omitempty"`
	Abandoned int   `json:"abandoned,omitempty"`
	BytesUp   int64 `json:"bytes_up,omitempty"`
	BytesDown int64 `json:"bytes_down,omitempty"`
}

// BaseStats is what every proxy shows: who it is, its run-time faults with
// their counts, and the recorder's counts.
func BaseStats(p Proxy, uptime time.Duration, inflight int64, rec labkit.Stats) Stats {
	s := Stats{Name: p.Name(), Kind: p.Kind(), Listen: p.Addr(), Upstream: p.Upstream(), UptimeMS: uptime.Milliseconds(),
		InFlight: inflight, ByAttempt: map[string]int64{}, Faults: append([]string{}, p.Faults().Clauses()...), Counts: p.Faults().Counts()}
	s.FromRecorder(rec)
	return s
}

// FromRecorder fills the counts of s from a recorder's stats.
func (s *Stats) FromRecorder(r labkit.Stats) {
	s.WindowMS = r.Window.Milliseconds()
	s.Total, s.Accepted, s.Rejected, s.Down, s.Busy, s.Dropped, s.Failed, s.Abandoned =
		r.Total, r.Accepted, r.Rejected, r.Down, r.Busy, r.Dropped, r.Failed, r.Abandoned
	s.Peak, s.PeakAtMS, s.Unidentified = r.Peak, r.PeakAt.Milliseconds(), r.Unidentified
	if r.Total == 0 || r.Unidentified < r.Total {
		apr := r.AttemptsPerRequest()
		s.Requests, s.RequestsAccepted, s.MaxAttempts, s.AttemptsPerRequest = &r.Requests, &r.RequestsAccepted, &r.MaxAttempts, &apr
	}
	for _, b := range r.Timeline {
		s.Timeline = append(s.Timeline, Window{StartMS: b.Start.Milliseconds(), Accepted: b.Accepted, Rejected: b.Rejected,
			Down: b.Down, Busy: b.Busy, Dropped: b.Dropped, Failed: b.Failed, Abandoned: b.Abandoned})
	}
}

// AttemptKey names entry i of a by-attempt table: "none", "1", "2", …,
// and the last, retryhttp.TrackedAttempts and above, with "+".
func AttemptKey(i int) string {
	switch i {
	case 0:
		return "none"
	case retryhttp.TrackedAttempts:
		return strconv.Itoa(i) + "+"
	}
	return strconv.Itoa(i)
}
