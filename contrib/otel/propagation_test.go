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

// TestQueueProducerConsumerSpans: with Tracer.Propagator on the queue, an
// enqueue makes a producer span ("create emails"), the enqueuer's child;
// each attempt runs in a consumer span ("process emails"), the producer
// span's child, with messaging.* attributes; the retried attempt is Unset
// with will_retry, the successful one Unset.
func TestQueueProducerConsumerSpans(t *testing.T) {
	tr, rec, test := newTracer(t)
	now := int64(1_700_000_000_000)
	q, err := queue.New(queue.NewMemoryStore(), queue.Config{Trace: tr.Propagator("stagger.queue", "emails"), Now: func() int64 { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, enq := test.Start(context.Background(), "signup")
	if _, _, err := q.Enqueue(ctx, queue.NewJob{ID: "welcome-1"}); err != nil {
		t.Fatal(err)
	}
	enq.End()
	calls := 0
	h := tr.Handler("emails", func(context.Context, []byte) error {
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
	prod := spansNamed(rec.Ended(), "create emails")
	if len(prod) != 1 || prod[0].SpanKind() != trace.SpanKindProducer || prod[0].Parent().SpanID() != enq.SpanContext().SpanID() {
		t.Fatalf("producer spans %v", prod)
	}
	p := prod[0]
	if str(p, semconv.MessagingSystemKey) != "stagger.queue" || str(p, semconv.MessagingDestinationNameKey) != "emails" ||
		str(p, semconv.MessagingOperationTypeKey) != "create" {
		t.Errorf("producer span: %v", p.Attributes())
	}
	checkChildren(t, rec.Ended(), "process emails", p.SpanContext(), 2)
	for i, s := range spansNamed(rec.Ended(), "process emails") {
		if s.SpanKind() != trace.SpanKindConsumer || str(s, semconv.MessagingSystemKey) != "stagger.queue" ||
			str(s, semconv.MessagingDestinationNameKey) != "emails" || str(s, semconv.MessagingMessageIDKey) != "welcome-1" ||
			s.Status().Code != codes.Unset || (str(s, KeyWillRetry) == "true") != (i == 0) {
			t.Errorf("consumer span %d: %v %v %v", i+1, s.SpanKind(), s.Attributes(), s.Status())
		}
	}
}
