package staggerotel

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/retry"
)

// spansNamed returns the ended spans named name, in order.
func spansNamed(spans []sdktrace.ReadOnlySpan, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// checkChildren fails t unless there are n spans named name, each a child
// of parent (through the remote trace context the work carried), numbered
// 1..n.
func checkChildren(t *testing.T, spans []sdktrace.ReadOnlySpan, name string, parent trace.SpanContext, n int) {
	t.Helper()
	got := spansNamed(spans, name)
	if len(got) != n {
		t.Fatalf("%d %q spans, want %d", len(got), name, n)
	}
	for i, s := range got {
		if s.SpanContext().TraceID() != parent.TraceID() || s.Parent().SpanID() != parent.SpanID() || !s.Parent().IsRemote() {
			t.Errorf("%s span %d: trace %v parent %v (remote %v), want a child of %v/%v", name, i+1,
				s.SpanContext().TraceID(), s.Parent().SpanID(), s.Parent().IsRemote(), parent.TraceID(), parent.SpanID())
		}
		if v, _ := attr(s, KeyAttemptNumber); v.AsInt64() != int64(i+1) {
			t.Errorf("%s span %d: attempt %v", name, i+1, v)
		}
	}
}

// TestPropagatorQueue: a job enqueued inside a span runs, attempt after
// attempt, in spans that are children of the enqueuer's, through the row's
// stored trace context (W3C traceparent and tracestate).
func TestPropagatorQueue(t *testing.T) {
	tr, rec, test := newTracer(t)
	now := int64(1_700_000_000_000)
	q, err := queue.New(queue.NewMemoryStore(), queue.Config{Trace: Propagator(nil), Now: func() int64 { return now }})
	if err != nil {
		t.Fatal(err)
	}
	// The enqueuer's span inherits a tracestate from its own remote parent.
	ts, _ := trace.ParseTraceState("congo=t61rcWkgMzE")
	upstream := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2},
		TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true})
	ctx, enq := test.Start(trace.ContextWithRemoteSpanContext(context.Background(), upstream), "enqueue")
	j, _, err := q.Enqueue(ctx, queue.NewJob{ID: "j"})
	enq.End()
	if err != nil || j.Trace == "" {
		t.Fatalf("Enqueue: %v, Trace %q", err, j.Trace)
	}
	calls := 0
	h := tr.Handler("work", func(context.Context, []byte) error {
		if calls++; calls == 1 {
			return errFlaky
		}
		return nil
	})
	for range 2 {
		if _, err := q.RunOnce(context.Background(), h); err != nil {
			t.Fatal(err)
		}
		now += 60_000
	}
	checkChildren(t, rec.Ended(), "process work", enq.SpanContext(), 2)
	for _, s := range spansNamed(rec.Ended(), "process work") {
		if got := s.SpanContext().TraceState().String(); got != ts.String() {
			t.Errorf("work span's tracestate %q, want %q", got, ts.String())
		}
	}
}

// TestPropagatorBroker: a message published inside a span carries its
// trace context in traceparent and tracestate; the Processor's handler
// span is a child of the publisher's.
func TestPropagatorBroker(t *testing.T) {
	tr, rec, test := newTracer(t)
	prop := Propagator(nil)
	ctx, pub := test.Start(context.Background(), "publish")
	parent, state := prop.Inject(ctx)
	pub.End()
	if parent == "" {
		t.Fatal("no traceparent injected")
	}
	headers := map[string]string{broker.HeaderTraceParent: parent, broker.HeaderTraceState: state}
	get := func(k string) (string, bool) { v, ok := headers[k]; return v, ok }
	p := &broker.Processor{Handler: tr.Handler("consume", func(context.Context, []byte) error { return errFlaky }),
		Policy: &retry.Policy{MaxAttempts: 2}, Trace: prop, Source: "rabbitmq"}
	st := broker.State{}
	for range 2 {
		o := p.Process(p.WithTrace(context.Background(), get), "m", nil, st)
		st = o.State
		st.Due = st.Due.Add(-time.Hour) // due now: no wait in a test
	}
	checkChildren(t, rec.Ended(), "process consume", pub.SpanContext(), 2)
	// The first failure is retried, the second is the last (MaxAttempts 2).
	spans := spansNamed(rec.Ended(), "process consume")
	for i, want := range []codes.Code{codes.Unset, codes.Error} {
		s := spans[i]
		w, _ := attr(s, KeyWillRetry)
		sys, _ := attr(s, semconv.MessagingSystemKey)
		op, _ := attr(s, semconv.MessagingOperationTypeKey)
		if s.SpanKind() != trace.SpanKindConsumer || s.Status().Code != want || w.AsBool() != (i == 0) ||
			sys.AsString() != "rabbitmq" || op.AsString() != "process" {
			t.Errorf("consumer span %d: kind %v status %v will_retry %v system %q op %q", i, s.SpanKind(), s.Status(), w.AsBool(), sys.AsString(), op.AsString())
		}
	}
}
