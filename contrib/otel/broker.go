package staggerotel

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/contrib/otel/internal/attempts"
	"github.com/staggerhq/stagger/retry"
)

// Broker returns the trace of the broker adapters, for both ends of a
// broker: the publishers' (rabbitmq.Publisher.WithTrace,
// kafka.Publisher.Trace, jetstream.Publisher.Trace) and the consumers'
// (Options.Trace of each adapter, broker.Processor.Trace).
//
// Each publish is a span of kind producer, a child of the publishing
// code's span, named "send <destination>" and lasting from the publish to
// the broker's acknowledgement (RabbitMQ's confirm, Kafka's produce
// response, JetStream's PubAck), with the OpenTelemetry messaging
// semantic conventions' attributes: messaging.operation.type and
// messaging.operation.name "send", messaging.system ("rabbitmq", "kafka";
// "jetstream", which the conventions do not name), messaging.destination.name
// (the exchange, topic or subject), messaging.message.id,
// messaging.message.body.size and, when the publishing code hands work on
// (retry.DeliveryFrom), stagger.attempt.number: the handing-over attempt.
// A publish the broker refused gets the error, error.type and status
// Error. The message carries that span's context in its traceparent and
// tracestate headers (in t's propagation format: W3C Trace Context by
// default, [Tracer.WithPropagator]).
//
// On the consumer side each attempt's handler runs with that context as
// its remote parent: wrap the handler in [Tracer.Handler] and its
// "process" spans — one per attempt, forwards through delay tiers and
// retry topics included, since every adapter copies the headers onto
// them — are children of the producer span, in the producer's trace.
func (t *Tracer) Broker() retry.Propagator {
	return &brokerTrace{t: t, p: propagator{t.prop}}
}

type brokerTrace struct {
	t *Tracer
	p propagator
}

var _ broker.PublishTracer = (*brokerTrace)(nil)

func (b *brokerTrace) Inject(ctx context.Context) (traceparent, tracestate string) {
	return b.p.Inject(ctx)
}

func (b *brokerTrace) Extract(ctx context.Context, traceparent, tracestate string) context.Context {
	return b.p.Extract(ctx, traceparent, tracestate)
}

func (b *brokerTrace) StartPublish(ctx context.Context, p broker.PublishInfo) (traceparent, tracestate string, end func(error)) {
	kv := make([]attribute.KeyValue, 0, 8)
	kv = append(kv, semconv.MessagingOperationTypeSend, semconv.MessagingOperationName("send"),
		semconv.MessagingSystemKey.String(p.System), semconv.MessagingDestinationName(p.Destination),
		semconv.MessagingMessageBodySize(p.Size))
	if p.ID != "" {
		kv = append(kv, semconv.MessagingMessageID(p.ID))
	}
	if d, ok := retry.DeliveryFrom(ctx); ok && d.Attempt > 0 {
		kv = append(kv, KeyAttemptNumber.Int(d.Attempt))
	}
	ctx, span := b.t.tracer.Start(ctx, "send "+p.Destination, kindProducer, trace.WithAttributes(kv...))
	traceparent, tracestate = b.p.Inject(ctx)
	return traceparent, tracestate, func(err error) {
		if err != nil {
			span.SetAttributes(semconv.ErrorTypeOther)
			attempts.Final(span, true, err, "publish failed")
		}
		span.End()
	}
}
