package staggerotel

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/retry"
)

// TestBrokerProducerSpan: a publish through broker.StartPublish with
// Tracer.Broker is a producer span "send orders", the publishing code's
// child, with the messaging attributes and the handing-over attempt; the
// message carries its context with the ledger, and each attempt's
// consumer span (Processor.Trace = the same value, Tracer.Handler) is its
// child. A refused publish ends its span with status Error.
func TestBrokerProducerSpan(t *testing.T) {
	tr, rec, test := newTracer(t)
	bt := tr.Broker()
	ctx, caller := test.Start(context.Background(), "checkout")
	work := retry.Delivery{ID: "w", Attempt: 2, MaxAttempts: 4, Source: "queue"}.NewContext(ctx)
	headers := map[string]string{}
	end := broker.StartPublish(work, bt, broker.PublishInfo{System: "rabbitmq", Destination: "orders", ID: "order-1", Size: 3},
		func(k, v string) { headers[k] = v })
	end(nil)
	caller.End()
	prod := spansNamed(rec.Ended(), "send orders")
	if len(prod) != 1 {
		t.Fatalf("%d producer spans, want 1", len(prod))
	}
	p := prod[0]
	if p.SpanKind() != trace.SpanKindProducer || p.Parent().SpanID() != caller.SpanContext().SpanID() || p.Status().Code != codes.Unset {
		t.Errorf("producer span: kind %v parent %v status %v", p.SpanKind(), p.Parent().SpanID(), p.Status())
	}
	for k, want := range map[attribute.Key]string{
		semconv.MessagingSystemKey: "rabbitmq", semconv.MessagingDestinationNameKey: "orders",
		semconv.MessagingOperationTypeKey: "send", semconv.MessagingOperationNameKey: "send",
		semconv.MessagingMessageIDKey: "order-1", semconv.MessagingMessageBodySizeKey: "3",
		KeyAttemptNumber: "2",
	} {
		if got := str(p, k); got != want {
			t.Errorf("producer span's %s = %q, want %q", k, got, want)
		}
	}
	if headers[broker.HeaderAttempt] != "2" || headers[broker.HeaderMaxAttempts] != "4" {
		t.Errorf("the ledger is not in the headers: %v", headers)
	}
	get := func(k string) (string, bool) { v, ok := headers[k]; return v, ok }
	pr := &broker.Processor{Handler: tr.Handler("orders", func(context.Context, []byte) error { return errFlaky }),
		Policy: &retry.Policy{MaxAttempts: 2}, Trace: bt, Source: "rabbitmq"}
	st := broker.State{}
	for range 2 {
		o := pr.Process(pr.WithTrace(context.Background(), get), "order-1", nil, st)
		st = o.State
		st.Due = st.Due.Add(-time.Hour)
	}
	checkChildren(t, rec.Ended(), "process orders", p.SpanContext(), 2)

	// A refused publish.
	end = broker.StartPublish(context.Background(), bt, broker.PublishInfo{System: "kafka", Destination: "refused"}, func(string, string) {})
	end(errors.New("not leader"))
	bad := spansNamed(rec.Ended(), "send refused")
	if len(bad) != 1 || bad[0].Status().Code != codes.Error || str(bad[0], semconv.ErrorTypeKey) != "_OTHER" || len(bad[0].Events()) != 1 {
		t.Errorf("refused publish: %v", bad)
	}
}

// TestStartPublishPropagatorOnly: a trace that is only a retry.Propagator
// writes the publishing code's own context and records no span; no trace
// writes only the ledger.
func TestStartPublishPropagatorOnly(t *testing.T) {
	_, rec, test := newTracer(t)
	ctx, caller := test.Start(context.Background(), "checkout")
	defer caller.End()
	h := map[string]string{}
	broker.StartPublish(ctx, Propagator(nil), broker.PublishInfo{Destination: "orders"}, func(k, v string) { h[k] = v })(nil)
	want, _ := Propagator(nil).Inject(ctx)
	if h[broker.HeaderTraceParent] != want || want == "" {
		t.Errorf("traceparent %q, want the caller's %q", h[broker.HeaderTraceParent], want)
	}
	h = map[string]string{}
	broker.StartPublish(ctx, nil, broker.PublishInfo{Destination: "orders"}, func(k, v string) { h[k] = v })(nil)
	if len(h) != 0 {
		t.Errorf("no trace, no work: headers %v, want none", h)
	}
	if n := len(rec.Ended()); n != 0 {
		t.Errorf("%d spans ended, want none", n)
	}
}

// BenchmarkBrokerStartPublish: what a publish's producer span costs
// (Tracer.Broker through broker.StartPublish, the span sampled and ended
// with no exporter), next to the publish with tracing off.
func BenchmarkBrokerStartPublish(b *testing.B) {
	tp := sdktrace.NewTracerProvider()
	tr, _ := NewTracer(tp)
	work := retry.Delivery{ID: "w", Attempt: 2, MaxAttempts: 5, Source: "queue"}.NewContext(context.Background())
	info := broker.PublishInfo{System: "rabbitmq", Destination: "orders", ID: "w", Size: 3}
	set := func(string, string) {}
	for _, c := range []struct {
		name  string
		trace retry.Propagator
	}{{"Off", nil}, {"Broker", tr.Broker()}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				broker.StartPublish(work, c.trace, info, set)(nil)
			}
		})
	}
}
