package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/staggerhq/stagger/internal/labkit"
)

// The fault grammar of `stagger proxy --fault`: the lab gateway's timeline
// (labkit.Faults) plus dropped connections. A flag value holds one or more
// clauses separated by ';'; the flag may be repeated. Times are measured
// from the proxy's start; every duration is a Go duration with a unit
// (700ms, 2s, 1m30s).
//
//	down D at T            503 for every attempt arriving in [T, T+D)
//	drop D at T            close the connection without an answer in [T, T+D)
//	latency D              add D before every answer
//	slow D at T for W      latency grows linearly by up to D over [T, T+W)
//	flap D/U at T for W    inside [T, T+W): down for D, up for U, down again, …
//	cap N                  at most N attempts in flight; more get 503 at once
//	retry-after D          send Retry-After (whole seconds, rounded up) with the 503s
const faultGrammar = `down D at T; drop D at T; latency D; slow D at T for W; flap D/U at T for W; cap N; retry-after D`

// maxFaultTime bounds every time and duration in a schedule.
const maxFaultTime = 24 * time.Hour

// maxFaultClauses bounds the clauses of one schedule.
const maxFaultClauses = 1000

// maxCap bounds `cap N`.
const maxCap = 1_000_000

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
	if err := s.Faults.Validate(); err != nil { // the clauses above cannot break it; keep the two in step
		return nil, fmt.Errorf("--fault: %w", err)
	}
	return s, nil
}

// span parses "D at T" (words d, "at", t) into [T, T+D).
func span(d, at, t string) (labkit.Span, error) {
	if at != "at" {
		return labkit.Span{}, fmt.Errorf("got %q where \"at\" belongs", at)
	}
	dur, err := faultDuration("duration", d, true)
	if err != nil {
		return labkit.Span{}, err
	}
	from, err := faultDuration("time", t, false)
	if err != nil {
		return labkit.Span{}, err
	}
	if from+dur > maxFaultTime {
		return labkit.Span{}, fmt.Errorf("the span ends at %v, past the limit of %v", from+dur, maxFaultTime)
	}
	return labkit.Span{From: from, To: from + dur}, nil
}

func (s *faultSchedule) add(clause string) error {
	f := strings.Fields(strings.ToLower(clause))
	form := func(want string, n int) error {
		if len(f) != n {
			return fmt.Errorf("want %q", want)
		}
		return nil
	}
	switch f[0] {
	case "down", "drop":
		if err := form(f[0]+" D at T", 4); err != nil {
			return err
		}
		sp, err := span(f[1], f[2], f[3])
		if err != nil {
			return fmt.Errorf("want %q: %w", f[0]+" D at T", err)
		}
		if f[0] == "down" {
			s.Down = append(s.Down, sp)
		} else {
			s.drop = append(s.drop, sp)
		}
	case "latency":
		if err := form("latency D", 2); err != nil {
			return err
		}
		if s.Latency != 0 {
			return errors.New("latency is already set; give it once (a phase of growing latency is \"slow D at T for W\")")
		}
		d, err := faultDuration("latency", f[1], true)
		if err != nil {
			return err
		}
		s.Latency = d
	case "slow", "flap":
		want := f[0] + " D at T for W"
		if f[0] == "flap" {
			want = "flap D/U at T for W"
		}
		if err := form(want, 6); err != nil {
			return err
		}
		if f[4] != "for" {
			return fmt.Errorf("want %q, got %q where \"for\" belongs", want, f[4])
		}
		amount := f[1]
		var up time.Duration
		if f[0] == "flap" {
			d, u, ok := strings.Cut(f[1], "/")
			if !ok {
				return fmt.Errorf("want %q: %q is not D/U, such as 100ms/200ms", want, f[1])
			}
			var err error
			if up, err = faultDuration("up time", u, true); err != nil {
				return err
			}
			amount = d
		}
		sp, err := span(f[5], f[2], f[3])
		if err != nil {
			return fmt.Errorf("want %q: %w", want, err)
		}
		d, err := faultDuration(map[string]string{"slow": "extra latency", "flap": "down time"}[f[0]], amount, true)
		if err != nil {
			return err
		}
		if f[0] == "slow" {
			s.Slow = append(s.Slow, labkit.Slow{Span: sp, Extra: d})
		} else {
			s.Flap = append(s.Flap, labkit.Flap{Span: sp, Down: d, Up: up})
		}
	case "cap":
		if err := form("cap N", 2); err != nil {
			return err
		}
		if s.Capacity != 0 {
			return errors.New("cap is already set; give it once")
		}
		n, err := strconv.Atoi(f[1])
		if err != nil || n < 1 || n > maxCap {
			return fmt.Errorf("cap: want a whole number of attempts in flight between 1 and %d, got %q", maxCap, f[1])
		}
		s.Capacity = n
	case "retry-after":
		if err := form("retry-after D", 2); err != nil {
			return err
		}
		if s.RetryAfter != 0 {
			return errors.New("retry-after is already set; give it once")
		}
		d, err := faultDuration("retry-after", f[1], true)
		if err != nil {
			return err
		}
		s.RetryAfter = d
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
