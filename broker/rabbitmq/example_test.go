package rabbitmq_test

import (
	"context"
	"errors"
	"log"
	"os"
	"os/signal"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/broker/rabbitmq"
	"github.com/staggerhq/stagger/retry"
)

var errBusy = errors.New("payments: busy")

func charge(ctx context.Context, order []byte) error { return nil }

// A Consumer runs one retry.Handler on a queue and retries its failures
// through one TTL wait queue per delay tier (10 s, 1 min, 10 min), then the
// DLQ; no consumer ever sleeps. It needs a RabbitMQ server, so this example
// is compiled, not run.
func ExampleConsumer() {
	const url = "amqp://guest:guest@127.0.0.1:5672/"
	handle := func(ctx context.Context, order []byte) error {
		switch err := charge(ctx, order); {
		case errors.Is(err, errBusy):
			return retry.After(err, 30*time.Second) // the first wait queue of at least 30 s
		case err != nil:
			return retry.Retryable(err) // the next delay tier
		}
		return nil // ack
	}
	// The default cascade (attempt n waits tier n, the DLQ after 4 attempts),
	// and one day at most from the first attempt.
	policy := broker.CascadePolicy(broker.DefaultTiers)
	policy.Timeout = 24 * time.Hour
	c, err := rabbitmq.NewConsumer(rabbitmq.Options{
		URL:      url,
		Topology: rabbitmq.NewTopology("orders", nil), // orders, orders.retry.10s …, orders.dlq
		Handler:  handle,
		Policy:   policy,
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := c.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
}

// A Publisher sends with publisher confirms, setting the message ID the
// consumer's retry.Delivery and Inbox key on.
func ExamplePublisher() {
	conn, err := amqp.Dial("amqp://guest:guest@127.0.0.1:5672/")
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	topo := rabbitmq.NewTopology("orders", nil)
	pub, err := rabbitmq.NewPublisher(conn, topo)
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	if err := pub.Publish(context.Background(), "order-42", []byte(`{"sku":"tea"}`)); err != nil {
		log.Fatal(err)
	}
}

// A dead letter carries why it was given up on.
func ExampleParseDeadLetter() {
	conn, err := amqp.Dial("amqp://guest:guest@127.0.0.1:5672/")
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		log.Fatal(err)
	}
	topo := rabbitmq.NewTopology("orders", nil)
	d, ok, err := ch.Get(topo.DLQ, false)
	if err != nil || !ok {
		log.Fatal("nothing dead: ", err)
	}
	dl, err := rabbitmq.ParseDeadLetter(d)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("%s: %s after %d attempts: %s (from %s)", dl.ID, dl.Reason, dl.Attempts, dl.Error, dl.Origin)
	d.Ack(false)
}

// A handler that hands its work to RabbitMQ publishes with the context it
// was given: the message carries the work's ledger (attempts made, attempt
// budget, deadline), so the consumer counts on from it instead of starting
// a fresh budget. It needs a RabbitMQ server, so this example is compiled,
// not run.
func ExamplePublisher_Publish_ledger() {
	conn, err := amqp.Dial("amqp://guest:guest@127.0.0.1:5672/")
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	pub, err := rabbitmq.NewPublisher(conn, rabbitmq.NewTopology("orders", nil))
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	handOff := func(ctx context.Context, order []byte) error {
		d, _ := retry.DeliveryFrom(ctx) // e.g. attempt 2 of 5, from a Guard-ed request
		return pub.Publish(ctx, d.ID, order)
	}
	ctx := retry.Delivery{ID: "order-42", Attempt: 2, MaxAttempts: 5, Source: "queue",
		Deadline: time.Now().Add(20 * time.Second)}.NewContext(context.Background())
	if err := handOff(ctx, []byte(`{"sku":"tea"}`)); err != nil {
		log.Fatal(err)
	}
}

// A publisher with a trace (here any retry.Propagator; contrib/otel's
// Tracer.Broker records a producer span per publish) writes the trace
// context of the publishing code on each message beside the ledger, in
// the same call; a consumer whose Options.Trace is the same value runs
// every attempt in that trace. It needs a RabbitMQ server, so this
// example is compiled, not run.
func ExamplePublisher_WithTrace() {
	var trace retry.Propagator // e.g. tracer.Broker(), tracer a *staggerotel.Tracer
	conn, err := amqp.Dial("amqp://guest:guest@127.0.0.1:5672/")
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	topo := rabbitmq.NewTopology("orders", nil)
	pub, err := rabbitmq.NewPublisher(conn, topo)
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	traced := pub.WithTrace(trace)
	if err := traced.Publish(context.Background(), "order-42", []byte(`{"sku":"tea"}`)); err != nil {
		log.Fatal(err)
	}
	c, err := rabbitmq.NewConsumer(rabbitmq.Options{URL: "amqp://guest:guest@127.0.0.1:5672/", Topology: topo, Trace: trace,
		Handler: func(ctx context.Context, body []byte) error { return nil }})
	if err != nil {
		log.Fatal(err)
	}
	_ = c
}
