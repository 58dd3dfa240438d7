package queuetest

import (
	"context"
	"strings"
	"testing"

	"github.com/staggerhq/stagger/internal/tracetest"
	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/retry"
)

type traceVal = tracetest.Context

const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// testTrace: with Config.Trace, the enqueuer's trace context is stored
// with the job and restored into every attempt's handler context, a retry
// included; a job enqueued without one runs without; a tracestate too long
// to store is dropped, the traceparent kept.
func testTrace(t *testing.T, s queue.Store) {
	e := newEnv(t, s, func(c *queue.Config) { c.Trace = tracetest.Propagator{} })
	enq := func(id string, v traceVal) queue.Job {
		t.Helper()
		ctx := e.ctx
		if v.Parent != "" {
			ctx = tracetest.With(ctx, v)
		}
		j, _, err := e.q.Enqueue(ctx, queue.NewJob{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	long := strings.Repeat("v=1,", queue.MaxTraceLen/4)
	for _, c := range []struct {
		id        string
		in, want  traceVal
		wantTrace string
	}{
		{"a-traced", traceVal{Parent: tp, State: "congo=t61rcWkgMzE"}, traceVal{Parent: tp, State: "congo=t61rcWkgMzE"}, tp + "\ncongo=t61rcWkgMzE"},
		{"b-parent-only", traceVal{Parent: tp}, traceVal{Parent: tp}, tp},
		{"c-untraced", traceVal{}, traceVal{}, ""},
		{"d-long-state", traceVal{Parent: tp, State: long}, traceVal{Parent: tp}, tp},
		{"e-newline", traceVal{Parent: tp + "\nx"}, traceVal{}, ""},
	} {
		if j := enq(c.id, c.in); j.Trace != c.wantTrace {
			t.Errorf("%s: Enqueue returned Trace %q, want %q", c.id, j.Trace, c.wantTrace)
		}
		if j := e.get(c.id); j.Trace != c.wantTrace {
			t.Errorf("%s: stored Trace %q, want %q", c.id, j.Trace, c.wantTrace)
		}
		for attempt := 1; attempt <= 2; attempt++ {
			var got traceVal
			h := func(ctx context.Context, _ []byte) error {
				got = tracetest.From(ctx)
				if attempt == 1 {
					return retry.Retryable(errBoom)
				}
				return nil
			}
			if j := e.runOnce(h); j == nil || j.ID != c.id {
				t.Fatalf("%s attempt %d: ran %v", c.id, attempt, j)
			}
			if got != c.want {
				t.Errorf("%s attempt %d: handler's trace %+v, want %+v", c.id, attempt, got, c.want)
			}
			e.clock.Advance(1000)
		}
	}
	// Without Config.Trace nothing is stored, and a stored trace is not
	// restored.
	plain := newEnv(t, s, nil)
	ctx := tracetest.With(e.ctx, traceVal{Parent: tp})
	if j, _, err := plain.q.Enqueue(ctx, queue.NewJob{ID: "f-plain"}); err != nil || j.Trace != "" {
		t.Errorf("without Config.Trace: %v, Trace %q", err, j.Trace)
	}
	if _, _, err := e.q.Enqueue(ctx, queue.NewJob{ID: "g-traced"}); err != nil {
		t.Fatal(err)
	}
	plain.clock.Advance(e.clock.Now() - plain.clock.Now()) // g-traced is due
	for _, id := range []string{"f-plain", "g-traced"} {
		var got traceVal
		j := plain.runOnce(func(ctx context.Context, _ []byte) error { got = tracetest.From(ctx); return nil })
		if j == nil || j.ID != id || got != (traceVal{}) {
			t.Errorf("without Config.Trace: ran %v with trace %+v, want %s with none", j, got, id)
		}
	}
}
