package broker

import (
	"context"

	"github.com/staggerhq/stagger/retry"
)

// PublishInfo describes one publish of an original message to a
// producer's tracing ([PublishTracer]).
type PublishInfo struct {
	// System names the broker: "rabbitmq", "kafka", "jetstream".
	System string
	// Destination is where the message goes: the exchange, the topic,
	// the subject.
	Destination string
	// ID is the message's ID (the key an inbox deduplicates on); "" when
	// it has none.
	ID string
	// Size is the body's length in bytes.
	Size int
}

// PublishTracer is a retry.Propagator that also records a span for each
// publish: contrib/otel's Tracer.Broker is one. An adapter's publisher
// whose trace implements it (rabbitmq.Publisher.WithTrace,
// kafka.Publisher, jetstream.Publisher) calls StartPublish before it
// sends and the returned end when the broker has taken the message (or
// refused it), so the span covers the broker's round trip, and the
// message carries that span's trace context: the consumer's spans
// (Processor.Trace restores the context) are its children.
type PublishTracer interface {
	retry.Propagator
	// StartPublish starts the span of the publish p, a child of ctx's
	// span, and returns the trace context the message must carry (the
	// W3C traceparent and tracestate values of that span; "" for none)
	// and the function that ends the span with the publish's error (nil:
	// sent). end is called exactly once.
	StartPublish(ctx context.Context, p PublishInfo) (traceparent, tracestate string, end func(error))
}

// StartPublish writes, through set, what an original message published
// from ctx carries: the ledger of the work ctx carries (EncodeLedger) and,
// when trace is not nil, the trace context (HeaderTraceParent,
// HeaderTraceState) — that of the span trace starts for the publish when
// it is a [PublishTracer], ctx's own (trace.Inject) otherwise. It returns
// the function the publisher calls with the publish's outcome, never nil.
// With trace nil it costs what EncodeLedger costs: the adapters' publishers
// call it on every publish.
func StartPublish(ctx context.Context, trace retry.Propagator, p PublishInfo, set func(key, value string)) (end func(error)) {
	EncodeLedger(ctx, set)
	if trace == nil {
		return noEnd
	}
	var parent, state string
	end = noEnd
	if pt, ok := trace.(PublishTracer); ok {
		parent, state, end = pt.StartPublish(ctx, p)
		if end == nil {
			end = noEnd
		}
	} else {
		parent, state = trace.Inject(ctx)
	}
	if parent != "" {
		set(HeaderTraceParent, parent)
		if state != "" {
			set(HeaderTraceState, state)
		}
	}
	return end
}

func noEnd(error) {}
