package staggerotel_test

import (
	"context"
	"fmt"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	staggerotel "github.com/staggerhq/stagger/contrib/otel"
	"github.com/staggerhq/stagger/queue"
)

// A job enqueued inside a span is handled, however much later, in a span
// of the same trace: the row carries the W3C trace context.
func ExamplePropagator() {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tr, _ := staggerotel.NewTracer(tp)

	q, _ := queue.New(queue.NewMemoryStore(), queue.Config{Trace: staggerotel.Propagator(nil)})
	ctx, span := tp.Tracer("shop").Start(context.Background(), "checkout")
	q.Enqueue(ctx, queue.NewJob{ID: "order-1", Payload: []byte("ship")})
	span.End()

	// Later, in a worker (any process, any host):
	q.RunOnce(context.Background(), tr.Handler("ship", func(context.Context, []byte) error { return nil }))

	spans := rec.Ended()
	checkout, ship := spans[0], spans[1]
	fmt.Println(ship.Name(), "is a child of", checkout.Name()+":",
		ship.Parent().SpanID() == checkout.SpanContext().SpanID(),
		ship.SpanContext().TraceID() == checkout.SpanContext().TraceID())
	// Output: process ship is a child of checkout: true true
}
