package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The fault grammar of `stagger proxy --fault`. A flag value holds one or
// more clauses separated by ';'; the flag may be repeated. Times are
// measured from the proxy's start; every duration is a Go duration with a
// unit (700ms, 2s, 1m30s).
//
//	down D at T                503 for every attempt arriving in [T, T+D)
//	drop D at T                close the connection without an answer in [T, T+D)
//	latency D                  add D before every answer
//	latency D at T for W       add D before answers to attempts arriving in [T, T+W)
//	cap N                      at most N attempts in flight upstream; more get 503 at once
//	retry-after D              send Retry-After (whole seconds, rounded up) with the proxy's 503s
const faultGrammar = `down D at T; drop D at T; latency D [at T for W]; cap N; retry-after D`

// maxFaultTime bounds every time and duration in a schedule.
const maxFaultTime = 24 * time.Hour

// maxFaultClauses bounds the clauses of one schedule.
const maxFaultClauses = 1000

// maxCap bounds `cap N`.
const maxCap = 1_000_000

// faultSpan is [from, to) measured from the proxy's start.
type faultSpan struct{ from, to time.Duration }

func (s faultSpan) contains(t time.Duration) bool { return t >= s.from && t < s.to }

type latencySpan struct {
	faultSpan
	extra time.Duration
}

// faultSchedule is a parsed --fault list.
type faultSchedule struct {
	down, drop []faultSpan
	latency    time.Duration // everywhere
	windows    []latencySpan // in spans, added to latency
	cap        int           // 0: none
	retryAfter time.Duration
	hasAfter   bool
	clauses    []string // normalized, for the report
}

// parseFaults parses every --fault value into one schedule. Errors name the
// flag and quote the clause.
func parseFaults(values []string) (*faultSchedule, error) {
	s := &faultSchedule{}
	for _, v := range values {
		if strings.TrimSpace(v) == "" {
			return nil, errors.New(`--fault: empty value; want clauses such as "down 700ms at 2s" (` + faultGrammar + `)`)
		}
		for _, clause := range strings.Split(v, ";") {
			clause = strings.Join(strings.Fields(clause), " ")
			if clause == "" {
				continue // "a; b;" is fine
			}
			if len(s.clauses) == maxFaultClauses {
				return nil, fmt.Errorf("--fault: more than %d clauses", maxFaultClauses)
			}
			if err := s.add(clause); err != nil {
				return nil, fmt.Errorf("--fault %q: %w", clause, err)
			}
			s.clauses = append(s.clauses, clause)
		}
	}
	return s, nil
}

func (s *faultSchedule) add(clause string) error {
	f := strings.Fields(strings.ToLower(clause))
	want := func(n int, form string) error {
		if len(f) != n {
			return fmt.Errorf("want %q", form)
		}
		return nil
	}
	switch f[0] {
	case "down", "drop":
		form := f[0] + " D at T"
		if err := want(4, form); err != nil {
			return err
		}
		if f[2] != "at" {
			return fmt.Errorf("want %q, got %q where \"at\" belongs", form, f[2])
		}
		d, err := faultDuration("duration", f[1], true)
		if err != nil {
			return err
		}
		at, err := faultDuration("time", f[3], false)
		if err != nil {
			return err
		}
		if at+d > maxFaultTime {
			return fmt.Errorf("the span ends at %v, past the limit of %v", at+d, maxFaultTime)
		}
		if f[0] == "down" {
			s.down = append(s.down, faultSpan{at, at + d})
		} else {
			s.drop = append(s.drop, faultSpan{at, at + d})
		}
	case "latency":
		if len(f) != 2 && len(f) != 6 {
			return errors.New(`want "latency D" or "latency D at T for W"`)
		}
		d, err := faultDuration("latency", f[1], true)
		if err != nil {
			return err
		}
		if len(f) == 2 {
			if s.latency != 0 {
				return errors.New(`latency without a window is already set; give it once (add windows with "latency D at T for W")`)
			}
			s.latency = d
			return nil
		}
		if f[2] != "at" || f[4] != "for" {
			return errors.New(`want "latency D at T for W"`)
		}
		at, err := faultDuration("time", f[3], false)
		if err != nil {
			return err
		}
		w, err := faultDuration("window", f[5], true)
		if err != nil {
			return err
		}
		if at+w > maxFaultTime {
			return fmt.Errorf("the window ends at %v, past the limit of %v", at+w, maxFaultTime)
		}
		s.windows = append(s.windows, latencySpan{faultSpan{at, at + w}, d})
	case "cap":
		if err := want(2, "cap N"); err != nil {
			return err
		}
		if s.cap != 0 {
			return errors.New("cap is already set; give it once")
		}
		n, err := strconv.Atoi(f[1])
		if err != nil || n < 1 || n > maxCap {
			return fmt.Errorf("cap: want a whole number of attempts in flight between 1 and %d, got %q", maxCap, f[1])
		}
		s.cap = n
	case "retry-after":
		if err := want(2, "retry-after D"); err != nil {
			return err
		}
		if s.hasAfter {
			return errors.New("retry-after is already set; give it once")
		}
		d, err := faultDuration("retry-after", f[1], false)
		if err != nil {
			return err
		}
		s.retryAfter, s.hasAfter = d, true
	default:
		return fmt.Errorf("unknown fault %q; want one of: %s", f[0], faultGrammar)
	}
	return nil
}

// faultDuration parses a Go duration in [0, maxFaultTime] (> 0 when
// positive).
func faultDuration(what, v string, positive bool) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s %q: want a duration with a unit, such as 700ms or 2s", what, v)
	}
	switch {
	case d < 0:
		return 0, fmt.Errorf("%s %v: must be >= 0", what, d)
	case positive && d == 0:
		return 0, fmt.Errorf("%s %v: must be > 0", what, d)
	case d > maxFaultTime:
		return 0, fmt.Errorf("%s %v: must be <= %v", what, d, maxFaultTime)
	}
	return d, nil
}

// isDown, isDropped and latencyAt read the schedule at t (since start).
func (s *faultSchedule) isDown(t time.Duration) bool { return inAny(s.down, t) }

func (s *faultSchedule) isDropped(t time.Duration) bool { return inAny(s.drop, t) }

func (s *faultSchedule) latencyAt(t time.Duration) time.Duration {
	d := s.latency
	for _, w := range s.windows {
		if w.contains(t) {
			d += w.extra
		}
	}
	return d
}

func inAny(spans []faultSpan, t time.Duration) bool {
	for _, s := range spans {
		if s.contains(t) {
			return true
		}
	}
	return false
}

// retryAfterValue is the Retry-After header value, "" when none is sent.
func (s *faultSchedule) retryAfterValue() string {
	if !s.hasAfter {
		return ""
	}
	return strconv.FormatInt(int64((s.retryAfter+time.Second-1)/time.Second), 10)
}
