package kafka

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/broker/brokertest"
	"github.com/staggerhq/stagger/retry"
)

// The throughput benchmarks produce b.N records to an in-process kfake
// cluster first, then time from the first record handled to the last
// success: the raw client's poll + commit loop (one commit per poll), and
// the stagger Consumer with 10% of records failing transiently once
// (forwarded to a 1 ms retry topic, paused until due, handled again). kfake
// is not a Kafka broker: the numbers compare the two clients' overheads,
// not Kafka's throughput. Run them side by side:
//
//	cd broker/kafka && go test -run '^$' -bench . -benchtime 200000x

func benchCluster(b *testing.B) ([]string, Topics) {
	topics := NewTopics(fmt.Sprintf("stg-bench-%d", time.Now().UnixNano()), broker.Tiers{time.Millisecond})
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, topics.All()...))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cluster.Close)
	addrs := cluster.ListenAddrs()
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

func BenchmarkRawConsumeCommit(b *testing.B) {
	addrs, topics := benchCluster(b)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumerGroup("raw"), kgo.ConsumeTopics(topics.Main),
		kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	b.ResetTimer()
	var start time.Time
	n := 0
	for n < b.N {
		f := cl.PollRecords(ctx, DefaultMaxPollRecords)
		if n == 0 {
			start = time.Now()
		}
		n += f.NumRecords()
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}

func BenchmarkConsumer10PctTransient(b *testing.B) { benchConsumer(b, 10) }

// BenchmarkConsumer0PctTransient is the Consumer's own overhead: nothing fails.
func BenchmarkConsumer0PctTransient(b *testing.B) { benchConsumer(b, 0) }

func benchConsumer(b *testing.B, pct uint32) {
	addrs, topics := benchCluster(b)
	tp := brokertest.NewThroughput(b.N, pct)
	h := tp.Handler()
	c, err := NewConsumer(Options{Brokers: addrs, Topics: topics, Group: "stagger", Handler: h,
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
