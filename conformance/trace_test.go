package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/staggerhq/stagger/broker"
	stagjs "github.com/staggerhq/stagger/broker/jetstream"
	"github.com/staggerhq/stagger/broker/kafka"
	"github.com/staggerhq/stagger/broker/rabbitmq"
	staggerotel "github.com/staggerhq/stagger/contrib/otel"
	"github.com/staggerhq/stagger/retry"
)

// traced is one broker's traced pipeline: publish sends a message with
// the publisher's trace set to Tracer.Broker; the consumer (Options.Trace
// the same value) runs handler, wrapped in Tracer.Handler.
type traced struct {
	dest    string // the producer span's destination
	publish func(ctx context.Context, id string) error
}

// TestBrokerSpans: on each broker (RabbitMQ, NATS JetStream, Kafka with
// kfake), a publish from inside a span is one producer span "send <dest>"
// (kind producer, messaging.operation.type send, the broker's
// messaging.system), the publishing span's child, and each attempt of
// the message — the first fails, the forwarded retry succeeds — is a
// consumer span "process <name>" whose parent is the producer span, in
// the same trace: the trace context crossed the broker in the message's
// headers, and across the adapter's forward too.
func TestBrokerSpans(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tr, err := staggerotel.NewTracer(tp)
	if err != nil {
		t.Fatal(err)
	}
	bt := tr.Broker()
	unique := fmt.Sprintf("stg-trace-%d", time.Now().UnixNano())
	policy := &retry.Policy{MaxAttempts: 3, Schedule: tick}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// handler fails a message's first attempt and succeeds on its second,
	// reporting the success after the consumer span ended.
	done := make(chan string, 8)
	handler := func(name string) retry.Handler {
		h := tr.Handler(name, func(ctx context.Context, _ []byte) error {
			if d, _ := retry.DeliveryFrom(ctx); d.Attempt == 1 {
				return retry.Retryable(errors.New("busy"))
			}
			return nil
		})
		return func(ctx context.Context, p []byte) error {
			err := h(ctx, p)
			if err == nil {
				done <- name
			}
			return err
		}
	}

	pipes := map[string]traced{}

	// RabbitMQ.
	conn, amqpURL, topo := rabbitTopology(t, unique+"-r", broker.Tiers{10 * time.Millisecond})
	pub, err := rabbitmq.NewPublisher(conn, topo)
	if err != nil {
		t.Fatal(err)
	}
	tpub := pub.WithTrace(bt)
	rc, err := rabbitmq.NewConsumer(rabbitmq.Options{URL: amqpURL, Topology: topo, Policy: policy, Trace: bt, Handler: handler(hopRabbit)})
	if err != nil {
		t.Fatal(err)
	}
	run(t, rc.Run)
	pipes[hopRabbit] = traced{dest: topo.Exchange, publish: func(ctx context.Context, id string) error {
		return tpub.Publish(ctx, id, []byte("x"))
	}}

	// NATS JetStream.
	stream := strings.ReplaceAll(unique, "-", "_")
	js, subject := natsStream(t, ctx, stream)
	jc, err := stagjs.NewConsumer(js, stagjs.Options{Stream: stream, Consumer: "work", Policy: policy, AckWait: 5 * time.Second, Trace: bt, Handler: handler(hopJS)})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := jc.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	run(t, jc.Run)
	jpub := stagjs.Publisher{JS: js, Trace: bt}
	pipes[hopJS] = traced{dest: subject, publish: func(ctx context.Context, id string) error {
		_, err := jpub.Publish(ctx, subject, id, []byte("x"))
		return err
	}}

	// Kafka, on kfake.
	addrs, topics, kcl := kfakeTopics(t, unique+"-k", broker.Tiers{10 * time.Millisecond})
	kc, err := kafka.NewConsumer(kafka.Options{Brokers: addrs, Topics: topics, Group: unique, Policy: policy, Trace: bt, Handler: handler(hopKafka)})
	if err != nil {
		t.Fatal(err)
	}
	run(t, kc.Run)
	kpub := kafka.Publisher{Client: kcl, Trace: bt}
	pipes[hopKafka] = traced{dest: topics.Main, publish: func(ctx context.Context, id string) error {
		return kpub.Publish(ctx, topics.Main, id, nil, []byte("x"))
	}}

	test := tp.Tracer("test")
	callers := map[string]trace.SpanContext{}
	for name, p := range pipes {
		pctx, span := test.Start(ctx, "checkout "+name)
		if err := p.publish(pctx, "m-"+name); err != nil {
			t.Fatalf("%s: publish: %v", name, err)
		}
		span.End()
		callers[name] = span.SpanContext()
	}
	for range pipes {
		select {
		case <-done:
		case <-ctx.Done():
			t.Fatalf("not every message was handled: %v", ctx.Err())
		}
	}
	spans := exp.GetSpans().Snapshots()
	for name, p := range pipes {
		var prod []sdktrace.ReadOnlySpan
		var cons []sdktrace.ReadOnlySpan
		for _, s := range spans {
			switch s.Name() {
			case "send " + p.dest:
				prod = append(prod, s)
			case "process " + name:
				cons = append(cons, s)
			}
		}
		if len(prod) != 1 {
			t.Errorf("%s: %d producer spans, want 1", name, len(prod))
			continue
		}
		ps := prod[0]
		attrs := map[string]string{}
		for _, kv := range ps.Attributes() {
			attrs[string(kv.Key)] = kv.Value.String()
		}
		if ps.SpanKind() != trace.SpanKindProducer || ps.Parent().SpanID() != callers[name].SpanID() ||
			ps.SpanContext().TraceID() != callers[name].TraceID() ||
			attrs[string(semconv.MessagingSystemKey)] != name || attrs[string(semconv.MessagingOperationTypeKey)] != "send" ||
			attrs[string(semconv.MessagingDestinationNameKey)] != p.dest || attrs[string(semconv.MessagingMessageIDKey)] != "m-"+name {
			t.Errorf("%s: producer span kind %v parent %v, attributes %v; want a producer, the caller's child, with the messaging attributes",
				name, ps.SpanKind(), ps.Parent().SpanID(), attrs)
		}
		if len(cons) != 2 {
			t.Errorf("%s: %d consumer spans, want 2 (a retry, then a success)", name, len(cons))
		}
		for i, s := range cons {
			if s.SpanKind() != trace.SpanKindConsumer || s.SpanContext().TraceID() != ps.SpanContext().TraceID() ||
				s.Parent().SpanID() != ps.SpanContext().SpanID() || !s.Parent().IsRemote() {
				t.Errorf("%s: consumer span %d: kind %v trace %v parent %v (remote %v); want the producer span's child",
					name, i+1, s.SpanKind(), s.SpanContext().TraceID(), s.Parent().SpanID(), s.Parent().IsRemote())
			}
		}
	}
}
