package staggerotel

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/staggerhq/stagger/contrib/otel/internal/attempts"
	"github.com/staggerhq/stagger/retry"
)

// Propagator returns a retry.Propagator built on p, for queue.Config.Trace,
// broker.Processor.Trace and the broker adapters' Options.Trace: the trace
// context of the code that enqueues or publishes travels with the work (in
// the job row, in the message's traceparent and tracestate headers) and
// every attempt's handler runs with it as its remote parent, so the spans
// the handler starts (Tracer.Handler's among them) are children of the
// enqueuer's span however much later they run. nil means
// propagation.TraceContext{}, the W3C Trace Context format; only the
// traceparent and tracestate fields travel (not baggage).
func Propagator(p propagation.TextMapPropagator) retry.Propagator {
	if p == nil {
		p = propagation.TraceContext{}
	}
	return propagator{p}
}

type propagator struct{ p propagation.TextMapPropagator }

func (t propagator) Inject(ctx context.Context) (traceparent, tracestate string) {
	var c carrier
	t.p.Inject(ctx, &c)
	return c.parent, c.state
}

func (t propagator) Extract(ctx context.Context, traceparent, tracestate string) context.Context {
	return t.p.Extract(ctx, &carrier{parent: traceparent, state: tracestate})
}

// carrier is a propagation.TextMapCarrier of the two W3C fields.
type carrier struct{ parent, state string }

const (
	fieldParent = "traceparent"
	fieldState  = "tracestate"
)

func (c *carrier) Get(key string) string {
	switch key {
	case fieldParent:
		return c.parent
	case fieldState:
		return c.state
	}
	return ""
}

func (c *carrier) Set(key, value string) {
	switch key {
	case fieldParent:
		c.parent = value
	case fieldState:
		c.state = value
	}
}

func (c *carrier) Keys() []string { return []string{fieldParent, fieldState} }

// Propagator is [Propagator](nil) that also records a span of kind
// producer for each Inject, that is each time the queue creates jobs
// (queue.Config.Trace) or a producer that only injects writes a message's
// trace context (the brokers' publishers take [Tracer.Broker], whose send
// span also covers the broker's round trip):
// named "create <destination>", with messaging.operation.type "create",
// messaging.operation.name "create", messaging.system system and
// messaging.destination.name destination. The work carries that span's
// context, so the consumer spans of its attempts ([Tracer.Handler]) are
// its children. The span covers making the message, not the broker's
// round trip: wrap a publish in a span of your own to time that.
//
// system is the messaging.system value: "rabbitmq" and "kafka" as the
// semantic conventions name them, "jetstream" and "stagger.queue" for
// the systems they do not.
func (t *Tracer) Propagator(system, destination string) retry.Propagator {
	return &producer{t: t, p: propagator{t.prop}, name: "create " + destination, attrs: []attribute.KeyValue{
		semconv.MessagingOperationTypeCreate, semconv.MessagingOperationName("create"),
		semconv.MessagingSystemKey.String(system), semconv.MessagingDestinationName(destination),
	}}
}

type producer struct {
	t     *Tracer
	p     propagator
	name  string
	attrs []attribute.KeyValue
}

func (p *producer) Inject(ctx context.Context) (traceparent, tracestate string) {
	ctx, span := p.t.tracer.Start(ctx, p.name, kindProducer, trace.WithAttributes(p.attrs...))
	defer span.End()
	return p.p.Inject(ctx)
}

func (p *producer) Extract(ctx context.Context, traceparent, tracestate string) context.Context {
	return p.p.Extract(ctx, traceparent, tracestate)
}

// Handler wraps h, a handler of durable work (queue.Worker, queue.RunOnce,
// a broker consumer), so that each delivery runs in a span of kind
// consumer named "process <name>", a child of the handler's context's
// span: with [Propagator] or [Tracer.Propagator] set on the queue or the
// consumer, the span of the code that enqueued or published the work.
// name is the queue, topic or subject (messaging.destination.name). The
// span has messaging.operation.type and messaging.operation.name
// "process", messaging.system (from the delivery's source: "rabbitmq",
// "kafka", "jetstream", "stagger.queue"), messaging.message.id (the work's
// ID), stagger.name and stagger.attempt.number (the ledger's attempt,
// from retry.DeliveryFrom). h's context carries the span.
//
// A failed attempt's status follows the rule of [Tracer], as the handler
// can tell it: a retryable error with attempts and time left is an
// attempt that will be retried (Unset, stagger.retry.will_retry); a
// permanent or unclassed error, the last attempt, or a context past its
// deadline is the last one (Error). The driver's Policy.Classify and
// Budget decide after the handler returned; when they decide otherwise
// (an unclassed error classed retryable, a retry refused), it shows in
// the next attempt's span, the dead letter and [Metrics.Hooks]'s
// stagger.giveups.
func (t *Tracer) Handler(name string, h retry.Handler) retry.Handler {
	base := []attribute.KeyValue{
		semconv.MessagingOperationTypeProcess, semconv.MessagingOperationName("process"),
		semconv.MessagingDestinationName(name), KeyName.String(name),
	}
	spanName := "process " + name
	return func(ctx context.Context, payload []byte) error {
		d, _ := retry.DeliveryFrom(ctx)
		kv := make([]attribute.KeyValue, len(base), len(base)+3)
		copy(kv, base)
		kv = append(kv, semconv.MessagingSystemKey.String(messagingSystem(d.Source)), KeyAttemptNumber.Int(d.Attempt))
		if d.ID != "" {
			kv = append(kv, semconv.MessagingMessageID(d.ID))
		}
		ctx, span := t.tracer.Start(ctx, spanName, kindConsumer, trace.WithAttributes(kv...))
		defer span.End()
		err := h(ctx, payload)
		if err == nil {
			return nil
		}
		if willRetry(ctx, d, err) {
			attempts.Retried(span, err, time.Time{})
		} else {
			attempts.Final(span, true, err, errText(err))
		}
		return err
	}
}

// messagingSystem is messaging.system of a delivery from source: the
// queue's is "stagger.queue", the brokers' their names.
func messagingSystem(source string) string {
	if source == "queue" {
		return "stagger.queue"
	}
	return source
}

// willRetry is whether a driver will retry the delivery d whose handler
// failed with err, as far as the handler can tell.
func willRetry(ctx context.Context, d retry.Delivery, err error) bool {
	c, _ := retry.Classify(err)
	if c != retry.ClassRetryable {
		return false
	}
	if d.MaxAttempts > 0 && d.Attempt >= d.MaxAttempts {
		return false
	}
	return !errors.Is(ctx.Err(), context.DeadlineExceeded)
}

// errText is the status description of a failed attempt: its error's
// class (retry.Classify), a short value spans can be grouped by. The
// error's text is in the span's exception event (RecordError).
func errText(err error) string {
	c, _ := retry.Classify(err)
	return c.String() + " error"
}
