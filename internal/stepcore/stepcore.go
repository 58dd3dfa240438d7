// Package stepcore is the layout shared by package retry, which implements
// the per-attempt step every stagger driver runs, and package
// retry/retrydriver, which hands that step to drivers. It holds types only:
// the rules are in retry (one copy, the one retry.Do runs), which hands
// them to retrydriver through a method whose argument is of this package's
// Step type (retry.Decision.Step), so that no code outside this repository
// can call it.
//
// The types are generic in retry's own types (its Policy, Delivery, Class
// and Reason) so that this package imports nothing of retry: retry imports
// it. Both instantiate them with retry's types, which makes them one type,
// and a *retrydriver.Step converts to the *Step retry works on without a
// copy.
package stepcore

import (
	"context"
	"time"

	"github.com/staggerhq/stagger/internal/attemptctx"
)

// Verdict is what a driver's classifier says of an attempt's error (see
// retrydriver.Verdict for the rules).
type Verdict[C ~uint8] struct {
	// Class is the error's class; the zero Class leaves it to
	// Policy.Classify.
	Class C
	// After is the wait the dependency asked for (pushback), 0 when none.
	After time.Duration
	// Ended: the error is the driver's word for the end of a context.
	Ended bool
	// Expired: the error reports a deadline that passed.
	Expired bool
}

// Step is the state of one unit of work's attempts: what a driver sets
// (Policy, Delivery, Classifier) and what the step keeps between Begin and
// End (State, reachable only through this package).
type Step[P, D any, C, R ~uint8] struct {
	Policy     *P
	Delivery   D
	Classifier func(err error) Verdict[C]

	x State[C, R]
}

// State returns the step's own state.
func (s *Step[P, D, C, R]) State() *State[C, R] { return &s.x }

// State is what a step keeps between Begin and End (retry's step.go says
// what each field is for).
type State[C, R ~uint8] struct {
	Ctx    context.Context    // the driver's context of the attempt in flight
	Actx   context.Context    // the attempt's own bounded context; nil when none
	Cancel context.CancelFunc // cancels Actx
	Lazy   *attemptctx.Ctx    // Actx made lazily (LazyContext), to end; nil when none or ended
	Bound  time.Duration      // the attempt's bound, 0 when none
	Held   bool               // a Limiter slot is held
	Keep   bool               // End keeps the slot and Actx (Hold)
	Served bool               // the last attempt's outcome, as the Budget heard it
	Folded bool               // the context's deadline (Dline) is folded into Delivery
	Quiet  bool               // the in-process loop's ctx is never done: Err need not be asked
	Hedge  bool               // BeginHedge: a refusal is no give-up
	Pre    bool               // Classify judged the error End gets
	PreE   bool               // its Verdict's Ended
	PreX   bool               // its Verdict's Expired
	PreC   C
	LastC  C // the class the last attempt was judged by
	Reason R // why the unit of work stopped; the zero Reason while it goes on
	PreA   time.Duration
	LastA  time.Duration // the wait the last attempt asked for
	Last   error         // the last attempt's error
	CtxErr error         // the context's error when the context ended the work
	Dline  time.Time     // the context's deadline, folded
}
