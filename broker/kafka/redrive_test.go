package kafka

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/broker/brokertest"
)

type redrivePipeline struct {
	*pipeline
	group string
}

func (p redrivePipeline) WaitDeadLetters(ctx context.Context, n int) error {
	for range n {
		if _, err := p.NextDeadLetter(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (p redrivePipeline) Source(ctx context.Context) (broker.RedriveSource, func(), error) {
	src, err := NewRedriveSource(ctx, RedriveSourceOptions{Brokers: p.cluster.ListenAddrs(), DLQ: p.topics.DLQ, Group: p.group, Idle: 500 * time.Millisecond})
	if err != nil {
		return nil, nil, err
	}
	return src, src.Close, nil
}

func TestRedrive(t *testing.T) {
	brokertest.RunRedrive(t, func(t *testing.T, s brokertest.Setup) brokertest.RedrivePipeline {
		return redrivePipeline{start(t, s, nil), s.Name + "-redrive"}
	})
}

func TestRedriveTransactional(t *testing.T) {
	brokertest.RunRedrive(t, func(t *testing.T, s brokertest.Setup) brokertest.RedrivePipeline {
		p := start(t, s, func(o *Options) { o.Transactional, o.TransactionalID = true, s.Name })
		return redrivePipeline{p, s.Name + "-redrive"}
	})
}

// dlqCluster is a one-broker kfake cluster whose topic dlq holds values,
// produced in one transaction when transactional (its tail is then a
// commit marker); closed when t ends.
func dlqCluster(ctx context.Context, t *testing.T, dlq string, transactional bool, values ...string) *kfake.Cluster {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, dlq))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	opts := []kgo.Opt{kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.DefaultProduceTopic(dlq)}
	if transactional {
		opts = append(opts, kgo.TransactionalID(dlq+"-writer"))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if transactional {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range values {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if transactional {
		if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
	}
	return cluster
}

// TestRedriveSlowGroupJoin: a group join slower than Idle (Kafka holds a
// new group's first rebalance for 3 s by default) is not taken for an
// empty DLQ: the source reads every record once its partitions are its
// own. A group that never gets them fails after JoinWait, naming it.
func TestRedriveSlowGroupJoin(t *testing.T) {
	const dlq = "orders.dlq"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cluster := dlqCluster(ctx, t, dlq, false, "a", "b", "c")
	addrs := cluster.ListenAddrs()
	const idle = 100 * time.Millisecond
	// The first join is answered after six idle polls' time.
	holdFirst(cluster, kmsg.JoinGroup, 6*idle)
	src, err := NewRedriveSource(ctx, RedriveSourceOptions{Brokers: addrs, DLQ: dlq, Group: "slow-join", Idle: idle})
	if err != nil {
		t.Fatal(err)
	}
	got := readToEnd(ctx, t, src)
	src.Close()
	if strings.Join(got, ",") != "a,b,c" {
		t.Fatalf("read %q through a slow group join; want a,b,c", got)
	}

	// A member that holds the only partition: the second source waits
	// JoinWait for it, then fails naming the group.
	holder, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumerGroup("held"), kgo.ConsumeTopics(dlq))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if f := holder.PollRecords(ctx, 1); f.NumRecords() != 1 {
		t.Fatalf("the holder read %d records", f.NumRecords())
	}
	src, err = NewRedriveSource(ctx, RedriveSourceOptions{Brokers: addrs, DLQ: dlq, Group: "held", Idle: idle, JoinWait: 3 * idle})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if _, err := src.Next(ctx); err == nil || !strings.Contains(err.Error(), `"held"`) {
		t.Fatalf("Next with the partition held elsewhere = %v; want an error naming the group", err)
	}
}

// TestRedriveSlowFirstFetch: a first fetch slower than Idle, once the group
// gave the source its partitions (a loaded broker or client), is not taken
// for an empty DLQ: the source reads every record, and a transactional
// DLQ, whose tail is a commit marker, ends at its end without an idle wait.
func TestRedriveSlowFirstFetch(t *testing.T) {
	const dlq = "orders.dlq"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cluster := dlqCluster(ctx, t, dlq, true, "a", "b", "c")
	addrs := cluster.ListenAddrs()
	const idle = 100 * time.Millisecond
	// The source's first fetch is answered after six idle polls' time.
	holdFirst(cluster, kmsg.Fetch, 6*idle)
	src, err := NewRedriveSource(ctx, RedriveSourceOptions{Brokers: addrs, DLQ: dlq, Group: "slow-fetch", Idle: idle, JoinWait: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if got := readToEnd(ctx, t, src); strings.Join(got, ",") != "a,b,c" {
		t.Fatalf("read %q through a slow first fetch; want a,b,c", got)
	}
	if len(src.end) != 0 {
		t.Fatalf("ended with partitions not read to their end (%v): an idle wait, not the end", src.end)
	}
}

// Bad options name the field and the rule, before any connection.
func TestRedriveSourceBadOptions(t *testing.T) {
	ok := RedriveSourceOptions{Brokers: []string{"127.0.0.1:1"}, DLQ: "d", Group: "g"}
	for _, c := range []struct {
		tweak func(*RedriveSourceOptions)
		want  string
	}{
		{func(o *RedriveSourceOptions) { o.DLQ = "" }, "DLQ must name a topic"},
		{func(o *RedriveSourceOptions) { o.Group = "" }, "Group must name a consumer group"},
		{func(o *RedriveSourceOptions) { o.Idle = -time.Second }, "Idle must be >= 0"},
		{func(o *RedriveSourceOptions) { o.JoinWait = -time.Nanosecond }, "JoinWait must be >= 0"},
	} {
		o := ok
		c.tweak(&o)
		if _, err := NewRedriveSource(context.Background(), o); !errors.Is(err, broker.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v; want broker.ErrInvalid with %q", o, err, c.want)
		}
	}
}

// holdFirst makes kfake answer the first request of kind key after d (the
// request held in kfake's run loop; nothing else waits on it).
func holdFirst(cluster *kfake.Cluster, key kmsg.Key, d time.Duration) {
	var held atomic.Int32
	cluster.ControlKey(int16(key), func(kmsg.Request) (kmsg.Response, error, bool) {
		if held.Add(1) == 1 {
			cluster.SleepControl(func() { <-time.After(d) })
		}
		return nil, nil, false
	})
}

// readToEnd reads src until io.EOF and returns the records' values.
func readToEnd(ctx context.Context, t *testing.T, src *RedriveSource) []string {
	t.Helper()
	var got []string
	for {
		m, err := src.Next(ctx)
		if errors.Is(err, io.EOF) {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(m.(*redriveMsg).r.Value))
	}
}
