// Command example runs the Kafka retry topics end to end on franz-go's
// in-process kfake cluster (or a real cluster with -brokers): the main
// topic, retry topics with short tiers, and the DLQ — with the same handler
// first run in-process by retry.Handler.Run.
//
//	go run ./broker/kafka/example                       # in-process kfake cluster
//	go run ./broker/kafka/example -brokers 127.0.0.1:9092
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/broker/kafka"
	"github.com/staggerhq/stagger/retry"
)

// handle fails a payment transiently twice and rejects a broken order.
func handle(ctx context.Context, payload []byte) error {
	d, _ := retry.DeliveryFrom(ctx)
	fmt.Printf("  %-6s %-22s attempt %d/%d: %s\n", d.Source, d.ID, d.Attempt, d.MaxAttempts, payload)
	switch {
	case strings.HasPrefix(string(payload), "{"):
		return retry.Permanent(errors.New("malformed order"))
	case d.Attempt < 3:
		return retry.Retryable(errors.New("payments: 503"))
	}
	return nil
}

func main() {
	brokers := flag.String("brokers", "", "comma-separated seed brokers (default: an in-process kfake cluster)")
	flag.Parse()
	if err := run(*brokers); err != nil {
		fmt.Fprintln(os.Stderr, "example:", err)
		os.Exit(1)
	}
}

// run returns instead of exiting, so that the consumer is stopped and the
// clients closed on every path.
func run(brokers string) error {
	tiers := broker.Tiers{200 * time.Millisecond, time.Second, 2 * time.Second}
	topics := kafka.NewTopics(fmt.Sprintf("stagger-example-%d", time.Now().Unix()), tiers)

	fmt.Println("in-process, retry.Handler.Run:")
	fmt.Println("  result:", retry.Handler(handle).Run(context.Background(), broker.CascadePolicy(tiers), "order-1", []byte("pay 10 EUR")))

	var addrs []string
	if brokers == "" {
		c, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			return err
		}
		defer c.Close()
		addrs = c.ListenAddrs()
	} else {
		addrs = strings.Split(brokers, ",")
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := kafka.CreateTopics(ctx, cl, topics, 1, 1); err != nil {
		return err
	}

	var done atomic.Int32
	h := func(ctx context.Context, p []byte) error {
		err := handle(ctx, p)
		if err == nil {
			done.Add(1)
		}
		return err
	}
	c, err := kafka.NewConsumer(kafka.Options{Brokers: addrs, Topics: topics, Group: topics.Main, Handler: h})
	if err != nil {
		return err
	}
	rctx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- c.Run(rctx) }()
	defer func() { stop(); <-stopped }() // a graceful stop: the last offsets committed
	fmt.Printf("on Kafka (topics %s):\n", strings.Join(topics.All(), ", "))
	if err := kafka.Publish(ctx, cl, topics.Main, "order-1", []byte("order-1"), []byte("pay 10 EUR")); err != nil {
		return err
	}
	if err := kafka.Publish(ctx, cl, topics.Main, "order-2", []byte("order-2"), []byte("{broken")); err != nil {
		return err
	}

	dcl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topics.DLQ), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer dcl.Close()
	for dead := false; !dead; {
		f := dcl.PollFetches(ctx)
		if ctx.Err() != nil {
			return errors.New("timed out")
		}
		var perr error
		f.EachRecord(func(r *kgo.Record) {
			dl, err := kafka.ParseDeadLetter(r)
			if err != nil {
				perr = err
				return
			}
			fmt.Printf("  DLQ: %s reason=%s attempts=%d error=%q origin=%s\n", dl.ID, dl.Reason, dl.Attempts, dl.Error, dl.Origin)
			dead = true
		})
		if perr != nil {
			return perr
		}
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for done.Load() < 1 {
		select {
		case <-ctx.Done():
			return errors.New("timed out")
		case <-tick.C:
		}
	}
	fmt.Println("  order-1 succeeded on Kafka")
	return nil
}
