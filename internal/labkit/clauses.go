package labkit

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The fault grammar shared by `stagger proxy --fault`, `stagger check
// --fault` and check.Experiment.Faults: the gateway's timeline ([Faults])
// plus dropped connections. A value holds one or more clauses separated by
// ';'. Times are measured from the start; every duration is a Go duration
// with a unit (700ms, 2s, 1m30s).
//
//	down D at T            503 for every attempt arriving in [T, T+D)
//	drop D at T            close the connection without an answer in [T, T+D)
//	latency D              add D before every answer
//	slow D at T for W      latency grows linearly by up to D over [T, T+W)
//	flap D/U at T for W    inside [T, T+W): down for D, up for U, down again, …
//	cap N                  at most N attempts in flight; more get 503 at once
//	retry-after D          send Retry-After (whole seconds, rounded up) with the 503s
const FaultGrammar = `down D at T; drop D at T; latency D; slow D at T for W; flap D/U at T for W; cap N; retry-after D`

// Bounds of a fault schedule.
const (
	// MaxFaultTime bounds every time and duration in a schedule.
	MaxFaultTime = 24 * time.Hour
	// MaxFaultClauses bounds the clauses of one schedule.
	MaxFaultClauses = 1000
	// MaxFaultCap bounds `cap N`.
	MaxFaultCap = 1_000_000
)

// FaultClauses is a parsed fault schedule: the timeline a [Gateway]
// plays, the spans in which connections are dropped, and the clauses as
// normalized text.
type FaultClauses struct {
	Faults
	Drop    []Span   // connections closed without an answer
	Clauses []string // normalized, in the order given
}

// ParseFaultClauses parses every value into one schedule. Errors start with
// name (the flag or field the values came from) and quote the clause.
func ParseFaultClauses(name string, values []string) (*FaultClauses, error) {
	s := &FaultClauses{}
	for _, v := range values {
		if strings.TrimSpace(v) == "" {
			return nil, errors.New(name + `: empty value; want clauses such as "down 700ms at 2s" (` + FaultGrammar + `)`)
		}
		for _, clause := range strings.Split(v, ";") {
			clause = strings.Join(strings.Fields(clause), " ")
			if clause == "" {
				continue // "a; b;" is fine
			}
			if len(s.Clauses) == MaxFaultClauses {
				return nil, fmt.Errorf("%s: more than %d clauses", name, MaxFaultClauses)
			}
			if err := s.add(clause); err != nil {
				return nil, fmt.Errorf("%s %q: %w", name, clause, err)
			}
			s.Clauses = append(s.Clauses, clause)
		}
	}
	if err := s.Faults.Validate(); err != nil { // the clauses above cannot break it; keep the two in step
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return s, nil
}

// IsDropped reports whether an attempt arriving at t loses its connection.
func (s *FaultClauses) IsDropped(t time.Duration) bool {
	for _, d := range s.Drop {
		if d.Contains(t) {
			return true
		}
	}
	return false
}

// End is when the last scripted fault (drops included) ends.
func (s *FaultClauses) End() time.Duration {
	e := s.Faults.End()
	for _, d := range s.Drop {
		e = max(e, d.To)
	}
	return e
}

// Start is when the first scripted fault (drops included) starts; End()
// when there is none.
func (s *FaultClauses) Start() time.Duration {
	start, any := time.Duration(0), false
	see := func(sp Span) {
		if !any || sp.From < start {
			start, any = sp.From, true
		}
	}
	for _, sp := range s.Down {
		see(sp)
	}
	for _, sp := range s.Drop {
		see(sp)
	}
	for _, sl := range s.Slow {
		see(sl.Span)
	}
	for _, fl := range s.Flap {
		see(fl.Span)
	}
	return start
}

// span parses "D at T" (words d, "at", t) into [T, T+D).
func span(d, at, t string) (Span, error) {
	if at != "at" {
		return Span{}, fmt.Errorf("got %q where \"at\" belongs", at)
	}
	dur, err := faultDuration("duration", d, true)
	if err != nil {
		return Span{}, err
	}
	from, err := faultDuration("time", t, false)
	if err != nil {
		return Span{}, err
	}
	if from+dur > MaxFaultTime {
		return Span{}, fmt.Errorf("the span ends at %v, past the limit of %v", from+dur, MaxFaultTime)
	}
	return Span{From: from, To: from + dur}, nil
}

// clauseParsers reads each kind of fault clause into the set, keyed by the
// clause's first word; f is the clause's words, lower-cased.
var clauseParsers = map[string]func(s *FaultClauses, f []string) error{
	"down":        (*FaultClauses).addSpan,
	"drop":        (*FaultClauses).addSpan,
	"latency":     (*FaultClauses).addLatency,
	"slow":        (*FaultClauses).addPhase,
	"flap":        (*FaultClauses).addPhase,
	"cap":         (*FaultClauses).addCap,
	"retry-after": (*FaultClauses).addRetryAfter,
}

// add reads one clause into the set, by its kind's entry in clauseParsers.
func (s *FaultClauses) add(clause string) error {
	f := strings.Fields(strings.ToLower(clause))
	parse, ok := clauseParsers[f[0]]
	if !ok {
		return fmt.Errorf("unknown fault %q; want one of: %s", f[0], FaultGrammar)
	}
	return parse(s, f)
}

// clauseForm checks that the clause has n words; want is its shape, shown
// when it does not.
func clauseForm(f []string, want string, n int) error {
	if len(f) != n {
		return fmt.Errorf("want %q", want)
	}
	return nil
}

// addSpan reads "down D at T" and "drop D at T".
func (s *FaultClauses) addSpan(f []string) error {
	if err := clauseForm(f, f[0]+" D at T", 4); err != nil {
		return err
	}
	sp, err := span(f[1], f[2], f[3])
	if err != nil {
		return fmt.Errorf("want %q: %w", f[0]+" D at T", err)
	}
	if f[0] == "down" {
		s.Down = append(s.Down, sp)
	} else {
		s.Drop = append(s.Drop, sp)
	}
	return nil
}

// addLatency reads "latency D", given at most once.
func (s *FaultClauses) addLatency(f []string) error {
	return setDurationOnce(f, &s.Latency, "latency is already set; give it once (a phase of growing latency is \"slow D at T for W\")")
}

// addPhase reads "slow D at T for W" and "flap D/U at T for W".
func (s *FaultClauses) addPhase(f []string) error {
	want := f[0] + " D at T for W"
	if f[0] == "flap" {
		want = "flap D/U at T for W"
	}
	if err := clauseForm(f, want, 6); err != nil {
		return err
	}
	if f[4] != "for" {
		return fmt.Errorf("want %q, got %q where \"for\" belongs", want, f[4])
	}
	amount, up, err := phaseAmount(f[0], f[1], want)
	if err != nil {
		return err
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
		s.Slow = append(s.Slow, Slow{Span: sp, Extra: d})
	} else {
		s.Flap = append(s.Flap, Flap{Span: sp, Down: d, Up: up})
	}
	return nil
}

// phaseAmount is the amount word of a phase: for slow the extra latency as
// given; for flap, "D/U" split into the down time as given and the up time
// parsed.
func phaseAmount(kind, word, want string) (amount string, up time.Duration, err error) {
	if kind != "flap" {
		return word, 0, nil
	}
	d, u, ok := strings.Cut(word, "/")
	if !ok {
		return "", 0, fmt.Errorf("want %q: %q is not D/U, such as 100ms/200ms", want, word)
	}
	if up, err = faultDuration("up time", u, true); err != nil {
		return "", 0, err
	}
	return d, up, nil
}

// addCap reads "cap N", given at most once.
func (s *FaultClauses) addCap(f []string) error {
	if err := clauseForm(f, "cap N", 2); err != nil {
		return err
	}
	if s.Capacity != 0 {
		return errors.New("cap is already set; give it once")
	}
	n, err := strconv.Atoi(f[1])
	if err != nil || n < 1 || n > MaxFaultCap {
		return fmt.Errorf("cap: want a whole number of attempts in flight between 1 and %d, got %q", MaxFaultCap, f[1])
	}
	s.Capacity = n
	return nil
}

// addRetryAfter reads "retry-after D", given at most once.
func (s *FaultClauses) addRetryAfter(f []string) error {
	return setDurationOnce(f, &s.RetryAfter, "retry-after is already set; give it once")
}

// setDurationOnce reads a clause "KIND D" into *dst; already is the error
// when an earlier clause set it.
func setDurationOnce(f []string, dst *time.Duration, already string) error {
	if err := clauseForm(f, f[0]+" D", 2); err != nil {
		return err
	}
	if *dst != 0 {
		return errors.New(already)
	}
	d, err := faultDuration(f[0], f[1], true)
	if err != nil {
		return err
	}
	*dst = d
	return nil
}

// faultDuration parses a Go duration in [0, MaxFaultTime] (> 0 when
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
	case d > MaxFaultTime:
		return 0, fmt.Errorf("%s %v: must be <= %v", what, d, MaxFaultTime)
	}
	return d, nil
}
