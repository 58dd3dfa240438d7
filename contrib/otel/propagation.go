package staggerotel

import (
	"context"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

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

// Handler wraps h, a handler of durable work (queue.Worker, queue.RunOnce,
// a broker consumer), so that each delivery runs in a span named name, a
// child of the handler's context's span: with Propagator set on the queue
// or the consumer, the span of the code that enqueued or published the
// work. The span has stagger.name and stagger.attempt.number (the
// attempt the delivery is, from retry.DeliveryFrom); a failed attempt's
// span gets the error and an Error status. h's context carries the span.
func (t *Tracer) Handler(name string, h retry.Handler) retry.Handler {
	return func(ctx context.Context, payload []byte) error {
		d, _ := retry.DeliveryFrom(ctx)
		ctx, span := t.tracer.Start(ctx, name, trace.WithAttributes(KeyName.String(name), KeyAttemptNumber.Int(d.Attempt)))
		defer span.End()
		err := h(ctx, payload)
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, errText(err))
		} else {
			span.SetStatus(codes.Ok, "")
		}
		return err
	}
}

// errText is the status description of a failed attempt: its error's
// class (retry.Classify), a short value spans can be grouped by. The
// error's text is in the span's exception event (RecordError).
func errText(err error) string {
	c, _ := retry.Classify(err)
	return c.String() + " error"
}
