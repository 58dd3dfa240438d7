package jetstream_test

import (
	"context"
	"errors"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	stagjs "github.com/staggerhq/stagger/broker/jetstream"
	"github.com/staggerhq/stagger/retry"
)

func charge(ctx context.Context, order []byte) error { return nil }

// A Consumer runs one retry.Handler on a durable JetStream consumer: a
// retryable failure is a NakWithDelay of the decided delay, a failure given
// up on is copied to the DLQ stream (ORDERS_DLQ) and terminated. It needs a
// NATS server with JetStream, so this example is compiled, not run.
func ExampleConsumer() {
	nc, err := nats.Connect("nats://127.0.0.1:4222")
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}}); err != nil {
		log.Fatal(err)
	}

	c, err := stagjs.NewConsumer(js, stagjs.Options{
		Stream:   "ORDERS",
		Consumer: "orders",
		Handler: func(ctx context.Context, order []byte) error {
			return retry.Retryable(charge(ctx, order)) // nil acks
		},
		// MaxDeliver is MaxAttempts; keep AttemptTimeout below AckWait so an
		// attempt ends before the server hands the message to another consumer.
		Policy:  &retry.Policy{MaxAttempts: 5, AttemptTimeout: 20 * time.Second},
		AckWait: 30 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
}

// A handler that hands its work to JetStream publishes with the context
// it was given: the message carries the work's ledger, so the consumer's
// attempts count on from the producer's (3, 4, 5 here) rather than from
// the server's delivery count alone, and its Delivery keeps the work's
// deadline. It needs a NATS server, so this example is compiled, not run.
func ExamplePublish() {
	nc, err := nats.Connect("nats://127.0.0.1:4222")
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	ctx := retry.Delivery{ID: "order-42", Attempt: 2, MaxAttempts: 5, Source: "queue",
		Deadline: time.Now().Add(20 * time.Second)}.NewContext(context.Background())
	if _, err := stagjs.Publish(ctx, js, "orders.in", "order-42", []byte(`{"sku":"tea"}`)); err != nil {
		log.Fatal(err)
	}
}

// A Publisher with a trace (here any retry.Propagator; contrib/otel's
// Tracer.Broker records a producer span per publish) writes the trace
// context of the publishing code on each message beside the ledger, in
// the same call; a consumer whose Options.Trace is the same value runs
// every attempt in that trace. It needs a NATS server, so this example is
// compiled, not run.
func ExamplePublisher() {
	var trace retry.Propagator // e.g. tracer.Broker(), tracer a *staggerotel.Tracer
	nc, err := nats.Connect("nats://127.0.0.1:4222")
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	pub := stagjs.Publisher{JS: js, Trace: trace}
	ctx := retry.Delivery{ID: "order-42", Attempt: 2, MaxAttempts: 5, Source: "queue"}.NewContext(context.Background())
	if _, err := pub.Publish(ctx, "orders.in", "order-42", []byte(`{"sku":"tea"}`)); err != nil {
		log.Fatal(err)
	}
}
