// Package attemptctx is an attempt's bounded context made lazily: a
// context with a deadline whose timer, Done channel and registration in
// its parent are made only when something asks for them.
//
// An attempt's context ends at its bound (retry's AttemptTimeout, or the
// time left before the work's deadline) or when the attempt ends. With
// context.WithDeadline that costs a context, a timer and an entry in the
// parent's children an attempt, made and taken apart again, even when the
// work never watches Done: a queue handler that reads its payload and
// writes to memory, a check of ctx.Err() between steps. A Ctx defers all
// of it to the first call of Done (or of Value with the context package's
// own key, which context.Cause and a child's registration use), and
// answers Err and Deadline without it: Err reads the clock against the
// deadline and asks the parent. Once made, it is context.WithDeadline's
// context, and every method answers from it.
package attemptctx

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Ctx is an attempt's context: parent, bounded by a deadline, ended by End.
// It is safe for concurrent use, as a context must be.
type Ctx struct {
	parent   context.Context
	deadline time.Time
	// state is made and ended: written under mu, read without it.
	state atomic.Uint32
	mu    sync.Mutex
	// inner and cancel are context.WithDeadline(parent, deadline), once
	// made; inner is read without mu once made is set.
	inner  context.Context
	cancel context.CancelFunc
}

const (
	made  = 1 << iota // inner is set
	ended             // End was called
)

// New returns parent bounded by deadline. Nothing is made until asked
// for; End must be called when the attempt ends.
func New(parent context.Context, deadline time.Time) *Ctx {
	return &Ctx{parent: parent, deadline: deadline}
}

// Deadline returns the earlier of the parent's deadline and the bound,
// as context.WithDeadline's context does.
func (c *Ctx) Deadline() (time.Time, bool) {
	if d, ok := c.parent.Deadline(); ok && d.Before(c.deadline) {
		return d, true
	}
	return c.deadline, true
}

// Done returns the channel closed when the context ends, making the
// context's timer and its registration in the parent on the first call.
func (c *Ctx) Done() <-chan struct{} { return c.real().Done() }

// Err returns nil while the context goes on, else why it ended
// (context.Canceled or context.DeadlineExceeded, or the parent's error).
// Before anything is made it asks the parent and the clock; a context
// found ended is made (already ended), so that Done and context.Cause
// agree with it.
func (c *Ctx) Err() error {
	st := c.state.Load()
	if st&made != 0 {
		return c.inner.Err()
	}
	if st&ended != 0 || c.parent.Err() != nil || !time.Now().Before(c.deadline) {
		return c.real().Err()
	}
	return nil
}

// Value returns the parent's value for key. The context package's own
// key (an *int: context.Cause and a child context's registration ask for
// it) makes the context and is answered by it.
func (c *Ctx) Value(key any) any {
	if _, ok := key.(*int); ok {
		return c.real().Value(key)
	}
	return c.parent.Value(key)
}

// String names the context, as the context package's own do.
func (c *Ctx) String() string { return "attemptctx.Ctx" }

// End ends the context (context.Canceled), stopping its timer if it was
// made. It is idempotent.
func (c *Ctx) End() {
	c.mu.Lock()
	c.state.Store(c.state.Load() | ended)
	cancel := c.cancel
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// real returns the context made: context.WithDeadline's, ended at once if
// End came first.
func (c *Ctx) real() context.Context {
	if c.state.Load()&made != 0 {
		return c.inner
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.state.Load()
	if st&made == 0 {
		c.inner, c.cancel = context.WithDeadline(c.parent, c.deadline)
		if st&ended != 0 {
			c.cancel()
		}
		c.state.Store(st | made)
	}
	return c.inner
}
