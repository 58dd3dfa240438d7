package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/broker/kafka"
	"github.com/staggerhq/stagger/retry"
)

// A Consumer runs one retry.Handler on a main topic, one retry topic per
// delay tier and a dead-letter topic. Here on franz-go's in-process kfake
// cluster: a payment fails twice and succeeds from the second retry topic
// (orders-retry-20ms), a broken order goes to the DLQ at once. The origin of
// a dead letter is topic/partition/offset.
func ExampleConsumer() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	tiers := broker.Tiers{10 * time.Millisecond, 20 * time.Millisecond}
	topics := kafka.NewTopics("orders", tiers) // orders, orders-retry-10ms, orders-retry-20ms, orders-dlq
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topics.All()...))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cluster.Close()
	addrs := cluster.ListenAddrs()

	var (
		mu   sync.Mutex
		seen []string
		paid = make(chan struct{})
	)
	handle := func(ctx context.Context, payload []byte) error {
		d, _ := retry.DeliveryFrom(ctx)
		mu.Lock()
		seen = append(seen, fmt.Sprintf("%s attempt %d/%d (%s)", d.ID, d.Attempt, d.MaxAttempts, d.Source))
		mu.Unlock()
		switch {
		case strings.HasPrefix(string(payload), "{"):
			return retry.Permanent(errors.New("malformed order"))
		case d.Attempt < 3:
			return retry.Retryable(errors.New("payments: 503"))
		}
		close(paid)
		return nil
	}
	c, err := kafka.NewConsumer(kafka.Options{Brokers: addrs, Topics: topics, Group: "orders", Handler: handle})
	if err != nil {
		fmt.Println(err)
		return
	}
	rctx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- c.Run(rctx) }()
	defer func() { stop(); <-stopped }() // a graceful stop: the last offsets committed

	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cl.Close()
	for _, m := range []struct{ id, body string }{{"order-1", "pay 10 EUR"}, {"order-2", "{broken"}} {
		if err := kafka.Publish(ctx, cl, topics.Main, m.id, []byte(m.id), []byte(m.body)); err != nil {
			fmt.Println(err)
			return
		}
	}

	// Read the dead letter, then wait for the payment.
	dlq, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topics.DLQ),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer dlq.Close()
	var dead *broker.DeadLetter
	for dead == nil && ctx.Err() == nil {
		dlq.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			if dl, err := kafka.ParseDeadLetter(r); err == nil {
				dead = &dl
			}
		})
	}
	select {
	case <-paid:
	case <-ctx.Done():
		fmt.Println("timed out")
		return
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range []string{"order-1", "order-2"} {
		for _, line := range seen {
			if strings.HasPrefix(line, id+" ") {
				fmt.Println(line)
			}
		}
	}
	fmt.Printf("DLQ: %s reason=%s attempts=%d error=%q origin=%s\n", dead.ID, dead.Reason, dead.Attempts, dead.Error, dead.Origin)
	// Output:
	// order-1 attempt 1/3 (kafka)
	// order-1 attempt 2/3 (kafka)
	// order-1 attempt 3/3 (kafka)
	// order-2 attempt 1/3 (kafka)
	// DLQ: order-2 reason=permanent attempts=1 error="malformed order" origin=orders/0/1
}

// A handler that hands its work to Kafka builds its record (or calls
// Publish) with the context it was given: the record carries the work's
// ledger, so a consumer counts on from attempt 2 of 5 and keeps the
// deadline instead of starting a fresh budget.
func ExampleNewRecord() {
	ctx := retry.Delivery{ID: "order-42", Attempt: 2, MaxAttempts: 5, Source: "http",
		Deadline: time.UnixMilli(1_700_000_020_000)}.NewContext(context.Background())
	r := kafka.NewRecord(ctx, "orders", "order-42", []byte("order-42"), []byte(`{"sku":"tea"}`))
	for _, h := range r.Headers {
		fmt.Printf("%s: %s\n", h.Key, h.Value)
	}
	// Output:
	// x-stagger-id: order-42
	// x-stagger-attempt: 2
	// x-stagger-max-attempts: 5
	// x-stagger-deadline: 1700000020000
}

// A Publisher with a trace (here any retry.Propagator; contrib/otel's
// Tracer.Broker records a producer span per produce) writes the trace
// context of the publishing code on each record beside the ledger, in the
// same call; a consumer whose Options.Trace is the same value runs every
// attempt in that trace. It needs a Kafka cluster, so this example is
// compiled, not run.
func ExamplePublisher() {
	var trace retry.Propagator // e.g. tracer.Broker(), tracer a *staggerotel.Tracer
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:9092"))
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	pub := kafka.Publisher{Client: cl, Trace: trace}
	ctx := retry.Delivery{ID: "order-42", Attempt: 2, MaxAttempts: 5, Source: "queue"}.NewContext(context.Background())
	if err := pub.Publish(ctx, "orders", "order-42", []byte("order-42"), []byte(`{"sku":"tea"}`)); err != nil {
		log.Fatal(err)
	}
}
