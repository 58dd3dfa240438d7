package broker_test

import (
	"context"
	"testing"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/broker/brokertest"
	"github.com/staggerhq/stagger/retry"
)

// TestProcessorTrace: WithTrace restores the headers' trace context for
// the handler through Processor.Trace; without a Trace, or without a
// traceparent, the context is left as it is.
func TestProcessorTrace(t *testing.T) {
	headers := map[string]string{broker.HeaderTraceParent: brokertest.TraceParent, broker.HeaderTraceState: brokertest.TraceState}
	get := func(h map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := h[k]; return v, ok }
	}
	rec := brokertest.NewTraceRecorder()
	p := &broker.Processor{Handler: rec.Handler, Policy: &retry.Policy{MaxAttempts: 2}, Trace: brokertest.Trace{}}
	ctx := context.Background()
	if o := p.Process(p.WithTrace(ctx, get(headers)), "m", nil, broker.State{}); o.Action != broker.Retry {
		t.Fatalf("action %v, want retry", o.Action)
	}
	if err := rec.Check(1); err != nil {
		t.Error(err)
	}
	if got := p.WithTrace(ctx, get(map[string]string{broker.HeaderTraceState: brokertest.TraceState})); got != ctx {
		t.Error("no traceparent: the context changed")
	}
	p.Trace = nil
	if got := p.WithTrace(ctx, get(headers)); got != ctx {
		t.Error("no Trace: the context changed")
	}
}
