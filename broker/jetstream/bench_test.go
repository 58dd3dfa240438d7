package jetstream

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/broker/brokertest"
	"github.com/staggerhq/stagger/retry"
)

// The throughput benchmarks publish b.N messages first, then time from the
// first delivery to the last success: the raw client's Consume+Ack loop,
// and the stagger Consumer with 10% of messages failing transiently once
// (NakWithDelay 1 ms, then handled again). Both pull up to 512 messages
// with MaxAckPending 4096 and one handler goroutine: a message waiting out
// its NakWithDelay counts as pending, so a small MaxAckPending stalls the
// consumer behind its own retries. Run them side by side:
//
//	cd broker/jetstream && go test -run '^$' -bench . -benchtime 100000x

const benchPending = 4096

func benchStream(b *testing.B) (jetstream.JetStream, string) {
	js := connect(b)
	ctx := context.Background()
	name := fmt.Sprintf("stg-bench-%d", time.Now().UnixNano())
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".in"}}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		for _, s := range []string{name, name + "_DLQ", name + "_ADV"} {
			_ = js.DeleteStream(context.Background(), s)
		}
	})
	for i := range b.N {
		if _, err := js.PublishAsync(name+".in", []byte("payload"), jetstream.WithMsgID(fmt.Sprintf("m%d", i))); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		b.Fatal("publish did not complete")
	}
	return js, name
}

func BenchmarkRawConsumeAck(b *testing.B) {
	js, name := benchStream(b)
	ctx := context.Background()
	cons, err := js.CreateOrUpdateConsumer(ctx, name, jetstream.ConsumerConfig{Durable: "raw", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: benchPending})
	if err != nil {
		b.Fatal(err)
	}
	var (
		n        atomic.Int64
		start    time.Time
		first    sync.Once
		finished = make(chan struct{})
	)
	b.ResetTimer()
	cc, err := cons.Consume(func(m jetstream.Msg) {
		first.Do(func() { start = time.Now() })
		_ = m.Ack()
		if n.Add(1) == int64(b.N) {
			close(finished)
		}
	}, jetstream.PullMaxMessages(min(benchPending, 512)))
	if err != nil {
		b.Fatal(err)
	}
	<-finished
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
	cc.Stop()
}

func BenchmarkConsumer10PctTransient(b *testing.B) { benchConsumer(b, 10) }

// BenchmarkConsumer0PctTransient is the Consumer's own overhead: nothing fails.
func BenchmarkConsumer0PctTransient(b *testing.B) { benchConsumer(b, 0) }

func benchConsumer(b *testing.B, pct uint32) {
	js, name := benchStream(b)
	tp := brokertest.NewThroughput(b.N, pct)
	h := tp.Handler()
	c, err := NewConsumer(js, Options{Stream: name, Consumer: "stagger", Handler: h, MaxAckPending: benchPending,
		Policy: &retry.Policy{MaxAttempts: 3, Schedule: backoff.Constant(time.Millisecond)}})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	b.ResetTimer()
	go func() { done <- c.Run(ctx) }()
	<-tp.Done()
	b.ReportMetric(tp.Rate(), "msgs/s")
	cancel()
	<-done
}
