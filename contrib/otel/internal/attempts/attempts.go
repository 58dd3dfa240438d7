// Package attempts holds the one rule for the status of an attempt's span
// and the bookkeeping of a logical call whose attempts are spans of their
// own (HTTP, gRPC): a failed attempt that is retried keeps status Unset
// and gets stagger.retry.will_retry=true; the last attempt, when it
// failed, gets status Error, and so does the logical call's span.
package attempts

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// KeyWillRetry marks the span of a failed attempt that is retried.
const KeyWillRetry = attribute.Key("stagger.retry.will_retry")

// KeyAttemptCount is the number of attempts a logical call made, on its
// span.
const KeyAttemptCount = attribute.Key("stagger.attempt.count")

// Retried settles s, the span of an attempt another attempt follows: the
// error (if any) as an exception event, stagger.retry.will_retry=true
// (after attrs, set in the same call), status Unset. It does not end s.
func Retried(s trace.Span, err error, at time.Time, attrs ...attribute.KeyValue) {
	s.SetAttributes(append(attrs, KeyWillRetry.Bool(true))...)
	if err != nil {
		s.RecordError(err, trace.WithTimestamp(at))
	}
}

// Final settles s, the span of the last attempt (or of a logical call):
// when it failed, the error (if any) as an exception event and status
// Error with desc; when it did not, status Unset (Ok is the
// application's to set). It does not end s.
func Final(s trace.Span, failed bool, err error, desc string) {
	if !failed {
		return
	}
	if err != nil {
		s.RecordError(err)
	}
	s.SetStatus(codes.Error, desc)
}

// Outcome is what an attempt or a call came to.
type Outcome struct {
	Failed bool
	Err    error                // the transport's or the call's error, if any
	Desc   string               // the Error status's description
	Attrs  []attribute.KeyValue // never appended to in place: it may be shared
}

// Call is a logical call whose attempts get spans of their own, children
// of its span. An attempt's span stays open (its end time kept) until the
// call knows whether another attempt follows it. Attempts of one call run
// one at a time; Finish may run on another goroutine (a response body's
// Close).
type Call struct {
	Span  trace.Span           // the logical call's
	Attrs []attribute.KeyValue // the call's attributes, for its attempts' spans too

	parent context.Context // With's ctx

	mu   sync.Mutex
	n    int        // attempts started
	prev trace.Span // the last attempt's span, not ended yet
	end  time.Time  // when prev's attempt ended
	out  Outcome    // prev's outcome
	done bool
}

type key struct{}

// With returns ctx carrying c: c itself, as a context (no allocation).
// Use c with one context only.
func With(ctx context.Context, c *Call) context.Context {
	c.parent = ctx
	return (*callCtx)(c)
}

// From returns the Call ctx carries, or nil.
func From(ctx context.Context) *Call {
	c, _ := ctx.Value(key{}).(*Call)
	return c
}

// callCtx is a Call as the context carrying it; everything else is its
// parent's.
type callCtx Call

func (c *callCtx) Deadline() (time.Time, bool) { return c.parent.Deadline() }
func (c *callCtx) Done() <-chan struct{}       { return c.parent.Done() }
func (c *callCtx) Err() error                  { return c.parent.Err() }
func (c *callCtx) Value(k any) any {
	if _, ok := k.(key); ok {
		return (*Call)(c)
	}
	return c.parent.Value(k)
}

// Begin settles the previous attempt as retried and returns the number of
// the attempt starting (1 for the first).
func (c *Call) Begin() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.settle(false)
	c.n++
	return c.n
}

// Done records the outcome of the attempt whose span is s; s gets
// out.Attrs and ends later, when the call knows whether another attempt
// follows.
func (c *Call) Done(s trace.Span, out Outcome) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		s.SetAttributes(out.Attrs...)
		Final(s, out.Failed, out.Err, out.Desc)
		s.End()
		return
	}
	c.prev, c.end, c.out = s, time.Now(), out
}

// settle ends the pending attempt's span: retried, or the last one.
func (c *Call) settle(last bool) {
	s := c.prev
	if s == nil {
		return
	}
	c.prev = nil
	if last {
		s.SetAttributes(c.out.Attrs...)
		Final(s, c.out.Failed, c.out.Err, c.out.Desc)
		s.End()
		return
	}
	Retried(s, c.out.Err, c.end, c.out.Attrs...)
	s.End(trace.WithTimestamp(c.end))
}

// Finish ends the last attempt's span and the call's, the call's with
// out's attributes and status (the rule of Final). Only the first Finish
// counts.
func (c *Call) Finish(out Outcome) {
	c.mu.Lock()
	if c.done {
		c.mu.Unlock()
		return
	}
	c.done = true
	c.settle(true)
	n := c.n
	c.mu.Unlock()
	c.Span.SetAttributes(append(out.Attrs, KeyAttemptCount.Int(n))...)
	Final(c.Span, out.Failed, out.Err, out.Desc)
	c.Span.End()
}
