package retry

import "context"

// Propagator carries a trace context across a durable hand-off: a queue
// row, a broker message's headers. Work delivered hours later by the queue
// or a broker then belongs to the trace of the code that enqueued or
// published it. The values are those of the W3C Trace Context headers
// (W3C Recommendation "Trace Context"): traceparent and tracestate.
//
// The standard library has no tracing, so stagger's drivers take a
// Propagator and leave the tracing library to it: contrib/otel's
// Propagator is built on OpenTelemetry's. It must be safe for concurrent
// use.
type Propagator interface {
	// Inject returns the trace context of ctx as the traceparent and
	// tracestate header values, "" when ctx carries none.
	Inject(ctx context.Context) (traceparent, tracestate string)
	// Extract returns ctx carrying the remote trace context that
	// traceparent and tracestate describe, for the handler of the work
	// delivered; ctx itself when they describe none (or a malformed one).
	Extract(ctx context.Context, traceparent, tracestate string) context.Context
}
