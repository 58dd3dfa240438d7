// Package faultproxy is the run-time half of `stagger proxy` and package
// proxytest: named faults added, changed and removed while traffic flows
// (labkit.ParseFault clauses), applied to HTTP attempts and to TCP
// connections, a TCP proxy for any protocol, an HTTP proxy, and the
// control API that steers them.
package faultproxy

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/staggerhq/stagger/internal/labkit"
)

// MaxFaults bounds the faults of one proxy.
const MaxFaults = 256

// Errors of a Set; the control API maps them to 404 and 409.
var (
	ErrNoFault = errors.New("no such fault")
	ErrExists  = errors.New("a fault of that name exists")
	ErrKind    = errors.New("fault of the wrong kind for this proxy")
	ErrFull    = errors.New("too many faults")
)

// Active is a fault in a Set with its counts. A fault replaced under the
// same name keeps its counts, so a change while traffic flows loses none.
type Active struct {
	labkit.Fault
	c *counts
}

type counts struct {
	matched, applied atomic.Int64
}

// Count records that the fault matched an attempt or connection and
// whether it applied (its probability).
func (a *Active) Count(applied bool) {
	a.c.matched.Add(1)
	if applied {
		a.c.applied.Add(1)
	}
}

// FaultCount is a fault as the control API shows it.
type FaultCount struct {
	Name    string `json:"name"`
	Clause  string `json:"clause"`
	Matched int64  `json:"matched"` // attempts or connections it matched
	Applied int64  `json:"applied"` // of which it applied to (its probability)
}

// Set is the named faults of one proxy. Readers take a snapshot without a
// lock; writers copy. The zero value is not usable: call NewSet.
type Set struct {
	tcp  bool
	rand func() float64 // uniform in [0, 1)

	mu   sync.Mutex
	list atomic.Pointer[[]*Active]
	// kept holds the counts of every name ever used, so a fault removed
	// and added again, or replaced, goes on counting; ResetCounts zeroes
	// them. Bounded by the names added (MaxFaults at once; a removed name
	// is forgotten unless it comes back).
	kept map[string]*counts
}

// NewSet returns an empty set for a TCP (tcp) or an HTTP proxy; rnd is
// uniform in [0, 1) (nil: math/rand/v2's Float64).
func NewSet(tcp bool, rnd func() float64) *Set {
	if rnd == nil {
		rnd = rand.Float64
	}
	s := &Set{tcp: tcp, rand: rnd, kept: map[string]*counts{}}
	s.list.Store(&[]*Active{})
	return s
}

// TCP reports whether the set holds TCP faults.
func (s *Set) TCP() bool { return s.tcp }

// Snapshot returns the faults in the order they were added; it must not be
// modified.
func (s *Set) Snapshot() []*Active { return *s.list.Load() }

// Parse reads a clause and checks it suits the set's proxy.
func (s *Set) Parse(clause string) (labkit.Fault, error) {
	f, err := labkit.ParseFault(clause)
	if err != nil {
		return f, err
	}
	if f.Kind.TCP() != s.tcp {
		proxy, want := "an HTTP", "status, delay, cut or reset"
		if s.tcp {
			proxy, want = "a TCP", "latency, bandwidth, slow-close, timeout, slicer, limit-data or reset-peer"
		}
		return f, fmt.Errorf("%w: %s is not a fault of %s proxy; want %s", ErrKind, f.Kind, proxy, want)
	}
	return f, nil
}

// Add adds f under its name (or, without one, its kind with a number if
// needed) and returns the name. It fails with ErrExists when the name is
// taken.
func (s *Set) Add(f labkit.Fault) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := *s.list.Load()
	if f.Name == "" {
		f.Name = string(f.Kind)
		for i := 2; s.index(cur, f.Name) >= 0; i++ {
			f.Name = string(f.Kind) + "-" + strconv.Itoa(i)
		}
	}
	if s.index(cur, f.Name) >= 0 {
		return "", fmt.Errorf("%w: %q; change it with PUT or remove it first", ErrExists, f.Name)
	}
	if len(cur) >= MaxFaults {
		return "", fmt.Errorf("%w: at most %d per proxy", ErrFull, MaxFaults)
	}
	next := append(slices.Clip(cur), s.active(f))
	s.list.Store(&next)
	return f.Name, nil
}

// Put sets the fault called name to f, adding it when there is none; it
// reports whether it was added. Its counts go on.
func (s *Set) Put(name string, f labkit.Fault) (added bool, err error) {
	f.Name = name
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := *s.list.Load()
	i := s.index(cur, name)
	if i < 0 {
		if len(cur) >= MaxFaults {
			return false, fmt.Errorf("%w: at most %d per proxy", ErrFull, MaxFaults)
		}
		next := append(slices.Clip(cur), s.active(f))
		s.list.Store(&next)
		return true, nil
	}
	next := slices.Clone(cur)
	next[i] = s.active(f)
	s.list.Store(&next)
	return false, nil
}

// Remove removes the fault called name; ErrNoFault when there is none.
func (s *Set) Remove(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := *s.list.Load()
	i := s.index(cur, name)
	if i < 0 {
		return fmt.Errorf("%w: %q", ErrNoFault, name)
	}
	next := slices.Delete(slices.Clone(cur), i, i+1)
	s.list.Store(&next)
	return nil
}

// Clear removes every fault.
func (s *Set) Clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.list.Store(&[]*Active{})
}

// Get returns the fault called name with its counts.
func (s *Set) Get(name string) (FaultCount, error) {
	for _, a := range s.Snapshot() {
		if a.Name == name {
			return a.count(), nil
		}
	}
	return FaultCount{}, fmt.Errorf("%w: %q", ErrNoFault, name)
}

// Counts returns every fault with its counts, in order.
func (s *Set) Counts() []FaultCount {
	out := []FaultCount{}
	for _, a := range s.Snapshot() {
		out = append(out, a.count())
	}
	return out
}

// Clauses returns every fault as its clause, in order.
func (s *Set) Clauses() []string {
	var out []string
	for _, a := range s.Snapshot() {
		out = append(out, a.Fault.String())
	}
	return out
}

// ResetCounts zeroes every fault's counts.
func (s *Set) ResetCounts() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.kept {
		c.matched.Store(0)
		c.applied.Store(0)
	}
}

func (a *Active) count() FaultCount {
	return FaultCount{Name: a.Name, Clause: a.Fault.String(), Matched: a.c.matched.Load(), Applied: a.c.applied.Load()}
}

func (s *Set) index(list []*Active, name string) int {
	return slices.IndexFunc(list, func(a *Active) bool { return a.Name == name })
}

// active wraps f with the counts its name has had; s.mu is held.
func (s *Set) active(f labkit.Fault) *Active {
	c := s.kept[f.Name]
	if c == nil {
		if len(s.kept) >= 4*MaxFaults { // forget the names no longer in use
			in := map[string]bool{}
			for _, a := range *s.list.Load() {
				in[a.Name] = true
			}
			for n := range s.kept {
				if !in[n] {
					delete(s.kept, n)
				}
			}
		}
		c = &counts{}
		s.kept[f.Name] = c
	}
	return &Active{Fault: f, c: c}
}
