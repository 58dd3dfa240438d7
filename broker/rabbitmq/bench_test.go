package rabbitmq

import (
	"context"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/broker/brokertest"
	"github.com/staggerhq/stagger/retry"
)

// The throughput benchmarks publish b.N messages first, then time how long
// a consumer takes to finish them all: the raw client's consume+ack loop,
// and the stagger Consumer with 10% of messages failing transiently once
// (forwarded through a 1 ms wait queue and handled again). Both use prefetch
// 128 and one handler goroutine, and time from the first delivery to the
// last success (connection setup excluded). Run them side by side:
//
//	cd broker/rabbitmq && go test -run '^$' -bench . -benchtime 10000x

const benchPrefetch = 128

func benchSetup(b *testing.B) (*amqp.Connection, Topology) {
	conn := dial(b)
	topo := NewTopology(fmt.Sprintf("stg-bench-%d", time.Now().UnixNano()), broker.Tiers{time.Millisecond})
	ch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	if err := topo.Declare(ch); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if ch, err := conn.Channel(); err == nil {
			_ = topo.Delete(ch)
		}
	})
	pub, err := NewPublisher(conn, topo)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for i := range b.N {
		if err := pub.Publish(ctx, fmt.Sprintf("m%d", i), []byte("payload")); err != nil {
			b.Fatal(err)
		}
	}
	return conn, topo
}

func BenchmarkRawConsumeAck(b *testing.B) {
	conn, topo := benchSetup(b)
	ch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	if err := ch.Qos(benchPrefetch, 0, false); err != nil {
		b.Fatal(err)
	}
	ds, err := ch.Consume(topo.Queue, "", false, false, false, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	var start time.Time
	n := 0
	for d := range ds {
		if n == 0 {
			start = time.Now() // from the first delivery, as for the Consumer
		}
		if err := d.Ack(false); err != nil {
			b.Fatal(err)
		}
		if n++; n == b.N {
			break
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}

func BenchmarkConsumer10PctTransient(b *testing.B) { benchConsumer(b, 10) }

// BenchmarkConsumer0PctTransient is the Consumer's own overhead over the raw
// loop: nothing fails.
func BenchmarkConsumer0PctTransient(b *testing.B) { benchConsumer(b, 0) }

func benchConsumer(b *testing.B, pct uint32) {
	_, topo := benchSetup(b)
	tp := brokertest.NewThroughput(b.N, pct)
	h := tp.Handler()
	c, err := NewConsumer(Options{URL: amqpURL(), Topology: topo, Handler: h, Prefetch: benchPrefetch,
		Policy: &retry.Policy{MaxAttempts: 3, Schedule: backoff.Constant(time.Millisecond)}})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.ResetTimer()
	go func() { _ = c.Run(ctx) }()
	<-tp.Done()
	b.ReportMetric(tp.Rate(), "msgs/s")
}
