package brokertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/internal/tracetest"
	"github.com/staggerhq/stagger/retry"
)

// The trace context the adapters' trace tests publish with.
const (
	TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	TraceState  = "congo=t61rcWkgMzE"
)

// Trace is a retry.Propagator for tests: it keeps the trace context as a
// context value, as a tracing library keeps its span.
type Trace = tracetest.Propagator

// TraceRecorder is a handler that fails every attempt with a retryable
// error (so a message is retried, then dead-lettered) and records the
// trace context each attempt's context carried.
type TraceRecorder struct {
	mu   sync.Mutex
	seen []string
}

// NewTraceRecorder returns an empty TraceRecorder.
func NewTraceRecorder() *TraceRecorder { return &TraceRecorder{} }

var errTraced = retry.Retryable(errors.New("brokertest: traced failure"))

// traceOf is the trace context ctx carries (through Trace), as the
// traceparent and the tracestate joined by a space; published is that of
// TraceParent and TraceState.
func traceOf(ctx context.Context) string {
	c := tracetest.From(ctx)
	return c.Parent + " " + c.State
}

const published = TraceParent + " " + TraceState

// Handler is the recorder's handler.
func (r *TraceRecorder) Handler(ctx context.Context, _ []byte) error {
	tc := traceOf(ctx)
	r.mu.Lock()
	r.seen = append(r.seen, tc)
	r.mu.Unlock()
	return errTraced
}

// Check reports an error unless want attempts were recorded and every
// one saw TraceParent and TraceState.
func (r *TraceRecorder) Check(want int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.seen) != want {
		return fmt.Errorf("brokertest: %d attempts recorded, want %d", len(r.seen), want)
	}
	for i, s := range r.seen {
		if s != published {
			return fmt.Errorf("brokertest: attempt %d ran with trace context %q, want the message's", i+1, s)
		}
	}
	return nil
}

// Setup is the Setup of a trace test named name: the recorder's handler,
// the suite's Policy and Tiers, Trace.
func (r *TraceRecorder) Setup(name string) Setup {
	return Setup{Name: name, Handler: r.Handler, Policy: Policy(), Tiers: Tiers, Trace: Trace{}}
}

// CheckDeadLetter fails t unless every attempt of the message (Policy's
// MaxAttempts) saw TraceParent and TraceState, and the dead letter's
// headers, read with get, still carry them.
func (r *TraceRecorder) CheckDeadLetter(t *testing.T, get func(key string) (string, bool)) {
	t.Helper()
	if err := r.Check(Policy().MaxAttempts); err != nil {
		t.Error(err)
	}
	for k, want := range map[string]string{broker.HeaderTraceParent: TraceParent, broker.HeaderTraceState: TraceState} {
		if v, _ := get(k); v != want {
			t.Errorf("dead letter's %s = %q, want %q", k, v, want)
		}
	}
}

// CheckTraceTravels publishes one message with TraceParent and TraceState
// through p, to a consumer built from r.Setup whose handler always fails,
// waits for its dead letter (next returns a getter of the dead letter's
// headers) and checks it with CheckDeadLetter.
func (r *TraceRecorder) CheckTraceTravels(t *testing.T, p TracePublisher, next func(context.Context) (func(key string) (string, bool), error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := p.PublishTraced(ctx, "t", []byte("x"), TraceParent, TraceState); err != nil {
		t.Fatal(err)
	}
	get, err := next(ctx)
	if err != nil {
		t.Fatalf("no dead letter: %v", err)
	}
	r.CheckDeadLetter(t, get)
}
