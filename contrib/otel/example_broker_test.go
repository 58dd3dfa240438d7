package staggerotel_test

import (
	"context"
	"fmt"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/staggerhq/stagger/broker"
	staggerotel "github.com/staggerhq/stagger/contrib/otel"
	"github.com/staggerhq/stagger/retry"
)

// Tracer.Broker is the trace of both ends of a broker: set it on the
// publisher (rabbitmq.Publisher.WithTrace, kafka.Publisher.Trace,
// jetstream.Publisher.Trace) and on the consumer (each adapter's
// Options.Trace). A publish is a producer span; every attempt of the
// message is a consumer span, its child. Here broker.StartPublish, which
// the publishers call, and a Processor, which the consumers run, stand
// for the broker.
func ExampleTracer_Broker() {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tr, _ := staggerotel.NewTracer(tp)
	bt := tr.Broker()

	ctx, span := tp.Tracer("shop").Start(context.Background(), "checkout")
	headers := map[string]string{}
	end := broker.StartPublish(ctx, bt, broker.PublishInfo{System: "rabbitmq", Destination: "orders", ID: "order-1"},
		func(k, v string) { headers[k] = v })
	end(nil) // the broker confirmed the publish
	span.End()

	// Later, in the consumer (any process, any host):
	p := &broker.Processor{Trace: bt, Policy: &retry.Policy{MaxAttempts: 3},
		Handler: tr.Handler("orders", func(context.Context, []byte) error { return nil })}
	get := func(k string) (string, bool) { v, ok := headers[k]; return v, ok }
	p.Process(p.WithTrace(context.Background(), get), "order-1", nil, broker.State{})

	spans := rec.Ended()
	send, checkout, process := spans[0], spans[1], spans[2]
	fmt.Println(send.Name(), send.SpanKind(), "child of", checkout.Name()+":", send.Parent().SpanID() == checkout.SpanContext().SpanID())
	fmt.Println(process.Name(), process.SpanKind(), "child of", send.Name()+":", process.Parent().SpanID() == send.SpanContext().SpanID())
	// Output:
	// send orders producer child of checkout: true
	// process orders consumer child of send orders: true
}
