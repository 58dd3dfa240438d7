// Command example runs the RabbitMQ delay-queue cascade end to end: it
// declares a topology with short tiers, publishes a few orders, and consumes
// them with one handler — the same handler it first runs in-process with
// retry.Handler.Run — printing each attempt and each dead letter.
//
//	go run ./broker/rabbitmq/example            # RabbitMQ at STAGGER_AMQP_URL or amqp://guest:guest@127.0.0.1:5672/
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/broker/rabbitmq"
	"github.com/staggerhq/stagger/retry"
)

// handle is the one handler: a payment that fails transiently on its first
// attempts, and an order with a broken body that can never succeed.
func handle(ctx context.Context, payload []byte) error {
	d, _ := retry.DeliveryFrom(ctx)
	fmt.Printf("  %-8s %-12s attempt %d/%d: %s\n", d.Source, d.ID, d.Attempt, d.MaxAttempts, payload)
	switch {
	case strings.HasPrefix(string(payload), "{"):
		return retry.Permanent(errors.New("malformed order"))
	case d.Attempt < 3:
		return retry.Retryable(errors.New("payments: 503"))
	}
	return nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "example:", err)
		os.Exit(1)
	}
}

// run returns instead of exiting, so that the consumer is stopped and the
// topology deleted on every path.
func run() error {
	url := os.Getenv("STAGGER_AMQP_URL")
	if url == "" {
		url = "amqp://guest:guest@127.0.0.1:5672/"
	}
	tiers := broker.Tiers{200 * time.Millisecond, time.Second, 2 * time.Second}

	fmt.Println("in-process, retry.Handler.Run:")
	pol := broker.CascadePolicy(tiers)
	fmt.Println("  result:", retry.Handler(handle).Run(context.Background(), pol, "order-1", []byte("pay 10 EUR")))

	conn, err := amqp.Dial(url)
	if err != nil {
		return fmt.Errorf("RabbitMQ unreachable (set STAGGER_AMQP_URL): %w", err)
	}
	defer conn.Close()
	topo := rabbitmq.NewTopology(fmt.Sprintf("stagger-example-%d", time.Now().Unix()), tiers)
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := topo.Declare(ch); err != nil {
		return err
	}
	defer topo.Delete(ch)

	var done atomic.Int32
	h := func(ctx context.Context, p []byte) error {
		err := handle(ctx, p)
		if err == nil {
			done.Add(1)
		}
		return err
	}
	c, err := rabbitmq.NewConsumer(rabbitmq.Options{URL: url, Topology: topo, Handler: h})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	rctx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- c.Run(rctx) }()
	defer func() { stop(); <-stopped }() // a graceful stop before the topology goes

	fmt.Printf("on RabbitMQ (queue %s, wait queues %s … , DLQ %s):\n", topo.Queue, topo.TierQueue(0), topo.DLQ)
	pub, err := rabbitmq.NewPublisher(conn, topo)
	if err != nil {
		return err
	}
	defer pub.Close()
	if err := pub.Publish(ctx, "order-1", []byte("pay 10 EUR")); err != nil {
		return err
	}
	if err := pub.Publish(ctx, "order-2", []byte("{broken")); err != nil {
		return err
	}

	dch, err := conn.Channel()
	if err != nil {
		return err
	}
	dl, err := dch.Consume(topo.DLQ, "", true, false, false, false, nil)
	if err != nil {
		return err
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for dead := false; done.Load() < 1 || !dead; {
		select {
		case d := <-dl:
			letter, err := rabbitmq.ParseDeadLetter(d)
			if err != nil {
				return err
			}
			fmt.Printf("  DLQ: %s reason=%s attempts=%d error=%q origin=%s\n", letter.ID, letter.Reason, letter.Attempts, letter.Error, letter.Origin)
			dead = true
		case <-tick.C:
		case err := <-stopped:
			stopped <- err // for the deferred wait
			return fmt.Errorf("consumer stopped: %w", err)
		case <-ctx.Done():
			return errors.New("timed out")
		}
	}
	fmt.Println("  order-1 succeeded on RabbitMQ")
	return nil
}
