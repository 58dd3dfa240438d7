package jetstream

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/broker/brokertest"
	"github.com/staggerhq/stagger/retry"
)

// The throughput benchmarks publish b.N messages first, then time, with
// brokertest.Throughput, from the first call of the handler to its b.N-th
// success: the raw client's Consume loop (call the handler, Ack), and the
// stagger Consumer with 10% of the messages failing transiently once
// (NakWithDelay 1 ms, then handled again). Both run the handler in the
// consume callback, pull up to 512 messages with MaxAckPending 4096 (a
// message waiting out its NakWithDelay counts as pending, so a small
// MaxAckPending stalls the consumer behind its own retries) and ack each
// message on its own (fire and forget; JetStream has no batch ack that
// leaves naked messages pending).
//
// The last retries are redelivered a few tens of ms after the last first
// attempt (the server's redelivery timer, not the handler's work); with
// 300k messages that tail is ~1% of a run. Run them side by side:
//
//	cd broker/jetstream && go test -run '^$' -bench . -benchtime 300000x -count 3

const benchPending = 4096

func benchStream(b *testing.B) (jetstream.JetStream, string) {
	js := connect(b)
	name := fmt.Sprintf("stg-bench-%d", time.Now().UnixNano())
	createStream(b, js, name)
	const window = 1000 // below the client's limit of outstanding async publishes
	for i := range b.N {
		if _, err := js.PublishAsync(name+".in", []byte("payload"), jetstream.WithMsgID(fmt.Sprintf("m%d", i))); err != nil {
			b.Fatal(err)
		}
		if (i+1)%window == 0 || i == b.N-1 {
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(time.Minute):
				b.Fatal("publish did not complete")
			}
		}
	}
	return js, name
}

func BenchmarkRawConsumeAck(b *testing.B) {
	benchRaw(b, 0, func(ctx context.Context, h retry.Handler, m jetstream.Msg) {
		if err := h(ctx, m.Data()); err != nil {
			b.Error(err)
			return
		}
		_ = m.Ack()
	})
}

// BenchmarkRawNak10Pct is the raw client retrying without a library: the
// same 10% of messages fail once and are NakWithDelay(1 ms)'d, the attempt
// read from the message's metadata. The server's own cost of a retry (the
// nak, the redelivery timer, a second delivery) is all there is: the
// ceiling for any JetStream consumer that retries without sleeping.
func BenchmarkRawNak10Pct(b *testing.B) {
	benchRaw(b, 10, func(ctx context.Context, h retry.Handler, m jetstream.Msg) {
		md, err := m.Metadata()
		if err != nil {
			b.Error(err)
			return
		}
		d := retry.Delivery{ID: m.Headers().Get(jetstream.MsgIDHeader), Attempt: int(md.NumDelivered)}
		if err := h(d.NewContext(ctx), m.Data()); err != nil {
			_ = m.NakWithDelay(time.Millisecond)
			return
		}
		_ = m.Ack()
	})
}

// benchRaw times the raw client's Consume loop on a durable consumer of
// its own: handle gets each message and the Throughput handler, failPct%
// of whose IDs fail once.
func benchRaw(b *testing.B, failPct uint32, handle func(ctx context.Context, h retry.Handler, m jetstream.Msg)) {
	js, name := benchStream(b)
	ctx := context.Background()
	cons, err := js.CreateOrUpdateConsumer(ctx, name, jetstream.ConsumerConfig{Durable: "raw", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: benchPending})
	if err != nil {
		b.Fatal(err)
	}
	tp := brokertest.NewThroughput(b.N, failPct)
	h := tp.Handler()
	b.ResetTimer()
	cc, err := cons.Consume(func(m jetstream.Msg) { handle(ctx, h, m) }, jetstream.PullMaxMessages(min(benchPending, 512)))
	if err != nil {
		b.Fatal(err)
	}
	<-tp.Done()
	b.ReportMetric(tp.Rate(), "msgs/s")
	cc.Stop()
	<-cc.Closed()
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
