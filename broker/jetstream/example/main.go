// Command example runs the JetStream retry consumer end to end: a stream, a
// durable consumer whose failures are NakWithDelay'd by the stagger
// schedule, and a DLQ stream — with the same handler first run in-process
// by retry.Handler.Run.
//
//	go run ./broker/jetstream/example      # NATS at STAGGER_NATS_URL or nats://127.0.0.1:4222
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/staggerhq/stagger/backoff"
	stagjs "github.com/staggerhq/stagger/broker/jetstream"
	"github.com/staggerhq/stagger/retry"
)

// handle fails a payment transiently twice (the second time asking for
// 500 ms with After) and rejects a broken order for good.
func handle(ctx context.Context, payload []byte) error {
	d, _ := retry.DeliveryFrom(ctx)
	fmt.Printf("  %-9s %-12s attempt %d/%d: %s\n", d.Source, d.ID, d.Attempt, d.MaxAttempts, payload)
	switch {
	case strings.HasPrefix(string(payload), "{"):
		return retry.Permanent(errors.New("malformed order"))
	case d.Attempt == 1:
		return retry.Retryable(errors.New("payments: 503"))
	case d.Attempt == 2:
		return retry.After(errors.New("payments: 429"), 500*time.Millisecond)
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
// streams deleted on every path.
func run() error {
	url := os.Getenv("STAGGER_NATS_URL")
	if url == "" {
		url = nats.DefaultURL
	}
	policy := &retry.Policy{MaxAttempts: 4, Schedule: backoff.Exponential{Base: 200 * time.Millisecond, Cap: 2 * time.Second, Jitter: backoff.Full}}

	fmt.Println("in-process, retry.Handler.Run:")
	fmt.Println("  result:", retry.Handler(handle).Run(context.Background(), policy, "order-1", []byte("pay 10 EUR")))

	nc, err := nats.Connect(url, nats.Timeout(3*time.Second))
	if err != nil {
		return fmt.Errorf("NATS unreachable (set STAGGER_NATS_URL): %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	name := fmt.Sprintf("stagger-example-%d", time.Now().Unix())
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".orders"}}); err != nil {
		return err
	}
	defer func() {
		for _, s := range []string{name, name + "_DLQ", name + "_ADV"} {
			_ = js.DeleteStream(context.Background(), s)
		}
	}()

	var done atomic.Int32
	h := func(ctx context.Context, p []byte) error {
		err := handle(ctx, p)
		if err == nil {
			done.Add(1)
		}
		return err
	}
	c, err := stagjs.NewConsumer(js, stagjs.Options{Stream: name, Consumer: "orders", Handler: h, Policy: policy, AckWait: 5 * time.Second})
	if err != nil {
		return err
	}
	if _, _, err := c.Setup(ctx); err != nil {
		return err
	}
	rctx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- c.Run(rctx) }()
	defer func() { stop(); <-stopped }() // a graceful stop before the streams go
	fmt.Printf("on JetStream (stream %s, MaxDeliver %d, ack-timeout BackOff %v):\n", name, c.ConsumerConfig().MaxDeliver, c.ConsumerConfig().BackOff)
	// stagjs.Publish writes the ledger of the work ctx carries (none here:
	// these are new orders) with the message ID, in one call.
	if _, err := stagjs.Publish(ctx, js, name+".orders", "order-1", []byte("pay 10 EUR")); err != nil {
		return err
	}
	if _, err := stagjs.Publish(ctx, js, name+".orders", "order-2", []byte("{broken")); err != nil {
		return err
	}

	dc, err := js.OrderedConsumer(ctx, name+"_DLQ", jetstream.OrderedConsumerConfig{})
	if err != nil {
		return err
	}
	m, err := dc.Next(jetstream.FetchMaxWait(10 * time.Second))
	if err != nil {
		return fmt.Errorf("no dead letter: %w", err)
	}
	dl, err := stagjs.ParseDeadLetter(m)
	if err != nil {
		return err
	}
	fmt.Printf("  DLQ: %s reason=%s attempts=%d error=%q origin=%s\n", dl.ID, dl.Reason, dl.Attempts, dl.Error, dl.Origin)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for done.Load() < 1 {
		select {
		case <-ctx.Done():
			return errors.New("timed out")
		case err := <-stopped:
			stopped <- err // for the deferred wait
			return fmt.Errorf("consumer stopped: %w", err)
		case <-tick.C:
		}
	}
	fmt.Println("  order-1 succeeded on JetStream")
	return nil
}
