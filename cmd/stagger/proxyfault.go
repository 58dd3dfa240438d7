package main

import (
	"strconv"
	"time"

	"github.com/staggerhq/stagger/internal/labkit"
)

// The fault grammar of `stagger proxy --fault` is the lab's
// (labkit.FaultGrammar): the gateway's timeline plus dropped connections,
// parsed by labkit.ParseFaultClauses, which `stagger check` uses too.
const faultGrammar = labkit.FaultGrammar

// maxFaultClauses bounds the clauses of one schedule.
const maxFaultClauses = labkit.MaxFaultClauses

// faultSchedule is a parsed --fault list: the lab's timeline, decided by
// labkit.Faults.Decide as the lab gateway does, and the proxy's own drops.
type faultSchedule struct {
	labkit.Faults
	drop    []labkit.Span
	clauses []string // normalized, for the report
}

// parseFaults parses every --fault value into one schedule. Errors name the
// flag and quote the clause.
func parseFaults(values []string) (*faultSchedule, error) {
	c, err := labkit.ParseFaultClauses("--fault", values)
	if err != nil {
		return nil, err
	}
	return &faultSchedule{Faults: c.Faults, drop: c.Drop, clauses: c.Clauses}, nil
}

// isDropped reports whether an attempt arriving at t loses its connection.
func (s *faultSchedule) isDropped(t time.Duration) bool {
	for _, d := range s.drop {
		if d.Contains(t) {
			return true
		}
	}
	return false
}

// retryAfterValue is the Retry-After header value, "" when none is sent.
func (s *faultSchedule) retryAfterValue() string {
	if s.RetryAfter <= 0 {
		return ""
	}
	return strconv.FormatInt(int64((s.RetryAfter+time.Second-1)/time.Second), 10)
}

// end is when the last scripted fault ends.
func (s *faultSchedule) end() time.Duration {
	e := s.Faults.End()
	for _, d := range s.drop {
		e = max(e, d.To)
	}
	return e
}
