package faultproxy

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/staggerhq/stagger/internal/labkit"
)

// Errors of a Schedule; the control API maps them to 404 and 409.
var (
	ErrNoClause     = errors.New("no such schedule clause")
	ErrClauseExists = errors.New("a schedule clause of that name exists")
)

// MaxScheduleClause bounds the text of one schedule clause, so that the
// schedule (at most labkit.MaxFaultClauses clauses) stays small.
const MaxScheduleClause = 256

// ScheduleClause is one clause of an HTTP proxy's fault schedule (the
// timeline of `stagger proxy --fault`: down, drop, latency, slow, flap,
// cap, retry-after), by name. Its times count from the proxy's start.
type ScheduleClause struct {
	Name   string `json:"name"`
	Clause string `json:"clause"`
}

// schedule is a compiled fault schedule: the clauses by name and the
// timeline they make, read by every attempt without a lock.
type schedule struct {
	labkit.FaultClauses
	list []ScheduleClause
}

// compileSchedule checks the clauses together (latency, cap and
// retry-after at most once) and compiles them.
func compileSchedule(list []ScheduleClause) (*schedule, error) {
	texts := make([]string, len(list))
	for i, c := range list {
		texts[i] = c.Clause
	}
	fc := &labkit.FaultClauses{}
	if len(texts) > 0 {
		var err error
		if fc, err = labkit.ParseFaultClauses("schedule", texts); err != nil {
			return nil, errorf("%v", err)
		}
	}
	return &schedule{FaultClauses: *fc, list: list}, nil
}

// retryAfterValue is the Retry-After header value, "" when none is sent.
func (s *schedule) retryAfterValue() string {
	if s.RetryAfter <= 0 {
		return ""
	}
	return strconv.FormatInt(int64((s.RetryAfter+time.Second-1)/time.Second), 10)
}

// Schedule is the run-time fault schedule of an HTTP proxy: clauses added,
// replaced and removed by name while traffic flows. Each attempt reads the
// whole schedule once, as it arrives; a change applies to the attempts that
// arrive after it. The zero value is not usable: call newSchedule.
type Schedule struct {
	mu  sync.Mutex // writers
	cur atomic.Pointer[schedule]
}

func newSchedule() *Schedule {
	s := &Schedule{}
	s.cur.Store(&schedule{})
	return s
}

func (s *Schedule) load() *schedule { return s.cur.Load() }

// ParseScheduleClause checks one clause of the schedule's grammar
// (labkit.FaultGrammar) and returns it in normal form; a value with ';'
// holds more than one and is refused.
func ParseScheduleClause(clause string) (string, error) {
	c := strings.Join(strings.Fields(clause), " ")
	switch {
	case c == "":
		return "", errorf("clause: required, such as \"down 2s at 10s\" (%s)", labkit.FaultGrammar)
	case len(c) > MaxScheduleClause:
		return "", errorf("clause: %d bytes, over the limit of %d", len(c), MaxScheduleClause)
	case strings.Contains(c, ";"):
		return "", errorf("clause %q: one clause, without ';'", c)
	}
	fc, err := labkit.ParseFaultClauses("clause", []string{c})
	if err != nil {
		return "", errorf("%v", err)
	}
	return fc.Clauses[0], nil
}

// List returns the clauses in the order they were added.
func (s *Schedule) List() []ScheduleClause {
	return append([]ScheduleClause{}, s.load().list...)
}

// Clauses returns the clauses' text, in order.
func (s *Schedule) Clauses() []string {
	var out []string
	for _, c := range s.load().list {
		out = append(out, c.Clause)
	}
	return out
}

// Get returns the clause called name; ErrNoClause when there is none.
func (s *Schedule) Get(name string) (ScheduleClause, error) {
	for _, c := range s.load().list {
		if c.Name == name {
			return c, nil
		}
	}
	return ScheduleClause{}, fmt.Errorf("%w: %q (GET /schedule lists them)", ErrNoClause, name)
}

// Add adds clause under name (or, for "", its first word with a number if
// needed) and returns the name; ErrClauseExists when the name is taken.
func (s *Schedule) Add(name, clause string) (string, error) {
	c, err := ParseScheduleClause(clause)
	if err != nil {
		return "", err
	}
	if name != "" && !labkit.ValidFaultName(name) {
		return "", errorf("name %q: want 1 to %d letters, digits, '-', '_' or '.'", name, labkit.MaxFaultName)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.load().list
	if name == "" {
		kind, _, _ := strings.Cut(c, " ")
		name = kind
		for i := 2; scheduleIndex(cur, name) >= 0; i++ {
			name = kind + "-" + strconv.Itoa(i)
		}
	}
	if scheduleIndex(cur, name) >= 0 {
		return "", fmt.Errorf("%w: %q; change it with PUT or remove it first", ErrClauseExists, name)
	}
	return name, s.store(append(slices.Clip(cur), ScheduleClause{Name: name, Clause: c}))
}

// Put sets the clause called name, adding it when there is none; it
// reports whether it was added.
func (s *Schedule) Put(name, clause string) (added bool, err error) {
	c, err := ParseScheduleClause(clause)
	if err != nil {
		return false, err
	}
	if !labkit.ValidFaultName(name) {
		return false, errorf("name %q: want 1 to %d letters, digits, '-', '_' or '.'", name, labkit.MaxFaultName)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.load().list
	next := slices.Clone(cur)
	if i := scheduleIndex(cur, name); i >= 0 {
		next[i].Clause = c
	} else {
		next, added = append(next, ScheduleClause{Name: name, Clause: c}), true
	}
	return added, s.store(next)
}

// Remove removes the clause called name; ErrNoClause when there is none.
func (s *Schedule) Remove(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.load().list
	i := scheduleIndex(cur, name)
	if i < 0 {
		return fmt.Errorf("%w: %q (GET /schedule lists them)", ErrNoClause, name)
	}
	return s.store(slices.Delete(slices.Clone(cur), i, i+1))
}

// store compiles list and makes it the schedule; s.mu held.
func (s *Schedule) store(list []ScheduleClause) error {
	sc, err := compileSchedule(list)
	if err != nil {
		return err
	}
	s.cur.Store(sc)
	return nil
}

func scheduleIndex(list []ScheduleClause, name string) int {
	return slices.IndexFunc(list, func(c ScheduleClause) bool { return c.Name == name })
}
