package kafka

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/broker/brokertest"
	"github.com/staggerhq/stagger/retry"
)

// The throughput benchmarks produce b.N records to an in-process kfake
// cluster first, then time, with brokertest.Throughput, from the first call
// of the handler to its b.N-th success:
//
//   - BenchmarkRawConsumeCommit: the raw client's loop: poll, call the
//     handler on every record, commit the poll's offsets asynchronously (one
//     commit in flight, as the Consumer commits).
//   - BenchmarkRawConsumeCommitSync: the same with a blocking commit after
//     every poll (how the Consumer committed before it pipelined its
//     commits; kept for comparison with older numbers).
//   - BenchmarkConsumer10PctTransient: the stagger Consumer with 10% of the
//     records failing transiently once: forwarded to a 1 ms retry topic,
//     held until due, handled again by the retry stage.
//   - BenchmarkConsumer0PctTransient: the Consumer's own overhead.
//
// Every loop polls at most DefaultMaxPollRecords and fetches at most
// benchFetchBytes per partition. The limit matters: the backlog's records
// are 7-byte payloads that compress to ~13 bytes each, so a default (1 MiB)
// fetch holds ~80% of a 200k backlog, fetched and decoded before the first
// delivery, and timing from the first delivery would measure a walk over a
// decoded buffer. With 64 KiB per partition the first fetch holds ~3% of
// the records and the timed span covers fetching and decoding the rest.
//
// The retry topic's 1 ms pause adds at most a few ms at the end of a run of
// hundreds; the forward's own latency is throughput the Consumer must pay.
//
// kfake is not a Kafka broker: it runs in the benchmark's process and
// shares its two cores and its garbage collector with the clients, and it
// answers from memory. The numbers compare the client loops' costs, not
// Kafka's throughput. Run them side by side:
//
//	cd broker/kafka && go test -run '^$' -bench . -benchtime 1000000x -count 3

const benchFetchBytes = 64 << 10

func benchCluster(b *testing.B) ([]string, Topics) {
	topics := NewTopics(fmt.Sprintf("stg-bench-%d", time.Now().UnixNano()), broker.Tiers{time.Millisecond})
	_, addrs := newCluster(b, 2, topics)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	const batch = 1000
	for i := 0; i < b.N; i += batch {
		var rs []*kgo.Record
		for j := i; j < min(i+batch, b.N); j++ {
			id := fmt.Sprintf("m%d", j)
			rs = append(rs, &kgo.Record{Topic: topics.Main, Key: []byte(id), Value: []byte("payload"),
				Headers: []kgo.RecordHeader{{Key: broker.HeaderID, Value: []byte(id)}}})
		}
		if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
			b.Fatal(err)
		}
	}
	return addrs, topics
}

func benchFetchOpts() []kgo.Opt {
	return []kgo.Opt{kgo.FetchMaxPartitionBytes(benchFetchBytes)}
}

func BenchmarkRawConsumeCommit(b *testing.B) { benchRaw(b, false) }

func BenchmarkRawConsumeCommitSync(b *testing.B) { benchRaw(b, true) }

func benchRaw(b *testing.B, sync bool) {
	addrs, topics := benchCluster(b)
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addrs...), kgo.ConsumerGroup("raw"), kgo.ConsumeTopics(topics.Main),
		kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, benchFetchOpts()...)...)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	tp := brokertest.NewThroughput(b.N, 0)
	h := tp.Handler()
	ctx := context.Background()
	inflight := make(chan struct{}, 1)
	b.ResetTimer()
	for n := 0; n < b.N; {
		f := cl.PollRecords(ctx, DefaultMaxPollRecords)
		f.EachRecord(func(r *kgo.Record) {
			if err := h(ctx, r.Value); err != nil {
				b.Fatal(err)
			}
			n++
		})
		if sync {
			if err := cl.CommitUncommittedOffsets(ctx); err != nil {
				b.Fatal(err)
			}
			continue
		}
		select {
		case inflight <- struct{}{}:
			cl.CommitOffsets(ctx, cl.UncommittedOffsets(), func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, _ *kmsg.OffsetCommitResponse, err error) {
				if err != nil {
					b.Error(err)
				}
				<-inflight
			})
		default: // one in flight; the next poll's commit covers these
		}
	}
	<-tp.Done()
	b.ReportMetric(tp.Rate(), "msgs/s")
	inflight <- struct{}{} // the last commit is done before the client closes
}

// BenchmarkRawForward10Pct is the raw client retrying through a retry
// topic without a library: the same 10% of records fail once and are
// produced to the retry topic (async, no linger) with an attempt header; a
// second group consumes the retry topic and handles them again. Both loops
// commit asynchronously after each poll, one commit in flight, and the
// main loop does not wait for its forwards before committing, so it is
// not at-least-once (a crash can lose a forward): the most generous
// ceiling for any retry-topic consumer, not a correct one.
func BenchmarkRawForward10Pct(b *testing.B) {
	addrs, topics := benchCluster(b)
	tp := brokertest.NewThroughput(b.N, 10)
	h := tp.Handler()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	loop := func(attempt int, cl *kgo.Client) {
		inflight := make(chan struct{}, 1)
		for ctx.Err() == nil {
			f := cl.PollRecords(ctx, DefaultMaxPollRecords)
			f.EachRecord(func(r *kgo.Record) {
				var id string
				for _, hd := range r.Headers {
					if hd.Key == broker.HeaderID {
						id = string(hd.Value)
					}
				}
				dctx := retry.Delivery{ID: id, Attempt: attempt}.NewContext(ctx)
				if h(dctx, r.Value) != nil {
					out := &kgo.Record{Topic: topics.Retry[0], Key: r.Key, Value: r.Value,
						Headers: append(r.Headers[:len(r.Headers):len(r.Headers)], kgo.RecordHeader{Key: broker.HeaderAttempt, Value: []byte("2")})}
					cl.Produce(ctx, out, func(_ *kgo.Record, err error) {
						if err != nil && ctx.Err() == nil {
							b.Error(err)
						}
					})
				}
			})
			select {
			case inflight <- struct{}{}:
				cl.CommitOffsets(ctx, cl.UncommittedOffsets(), func(*kgo.Client, *kmsg.OffsetCommitRequest, *kmsg.OffsetCommitResponse, error) { <-inflight })
			default:
			}
		}
		inflight <- struct{}{}
	}
	var clients []*kgo.Client
	for _, s := range []struct{ group, topic string }{{"raw", topics.Main}, {"raw-retry", topics.Retry[0]}} {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addrs...), kgo.ConsumerGroup(s.group), kgo.ConsumeTopics(s.topic),
			kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.ProducerLinger(0),
			kgo.FetchMaxWait(10 * time.Millisecond)}, benchFetchOpts()...)...)
		if err != nil {
			b.Fatal(err)
		}
		defer cl.Close()
		clients = append(clients, cl)
	}
	var wg sync.WaitGroup
	b.ResetTimer()
	for i, cl := range clients {
		wg.Add(1)
		go func() { defer wg.Done(); loop(i+1, cl) }() // main: attempt 1; retry: attempt 2
	}
	<-tp.Done()
	b.ReportMetric(tp.Rate(), "msgs/s")
	cancel()
	wg.Wait()
}

func BenchmarkConsumer10PctTransient(b *testing.B) { benchConsumer(b, 10) }

// BenchmarkConsumer0PctTransient is the Consumer's own overhead: nothing fails.
func BenchmarkConsumer0PctTransient(b *testing.B) { benchConsumer(b, 0) }

func benchConsumer(b *testing.B, pct uint32) {
	addrs, topics := benchCluster(b)
	tp := brokertest.NewThroughput(b.N, pct)
	h := tp.Handler()
	c, err := NewConsumer(Options{Brokers: addrs, Topics: topics, Group: "stagger", Handler: h, ClientOpts: benchFetchOpts(),
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
