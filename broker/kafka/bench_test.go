package kafka

import (
	"context"
	"flag"
	"fmt"
	"math"
	"runtime"
	"runtime/pprof"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
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
//     every poll.
//   - BenchmarkRawForward10Pct, BenchmarkConsumer10PctTransient: the raw
//     client retrying through a retry topic itself, and the stagger
//     Consumer, with 10% of the records failing transiently once (see
//     rawForward for the raw loop's guarantee).
//   - BenchmarkConsumer0PctTransient: the Consumer's own overhead.
//   - BenchmarkPaired10Pct: the raw loop and the Consumer in turns on one
//     cluster, each turn on fresh topics, and the ratio of each pair; the
//     measure to quote, since the loops' own rates swing between runs.
//
// Every loop polls at most DefaultMaxPollRecords and fetches at most
// benchFetchBytes per partition. The limit matters: the backlog's records
// are 7-byte payloads that compress to ~13 bytes each, so a default (1 MiB)
// fetch holds ~80% of a 200k backlog, fetched and decoded before the first
// delivery, and timing from the first delivery would measure a walk over a
// decoded buffer. With 64 KiB per partition the first fetch holds ~3% of
// the records and the timed span covers fetching and decoding the rest.
//
// kfake is not a Kafka broker: it runs in the benchmark's process and
// shares its two cores and its garbage collector with the clients, and it
// answers from memory. The numbers compare the client loops' costs, not
// Kafka's throughput.
//
//	cd broker/kafka && go test -run '^$' -bench Paired -benchtime 300000x -v

const benchFetchBytes = 64 << 10

var (
	benchPairs  = flag.Int("kafka.pairs", 6, "BenchmarkPaired10Pct: raw/Consumer pairs per run")
	rawTxnPolls = flag.Int("kafka.rawtxnpolls", 1, "the raw transactional loop: polls already fetched per transaction, at most (the Consumer takes up to 4)")
)

// benchTopics names a fresh set of topics with a 1 ms retry tier.
func benchTopics(i int) Topics {
	return NewTopics(fmt.Sprintf("stg-bench-%d-%d", time.Now().UnixNano(), i), broker.Tiers{time.Millisecond})
}

func benchCluster(b *testing.B) ([]string, Topics) {
	topics := benchTopics(0)
	_, addrs := newCluster(b, 2, topics)
	fillBacklog(b, addrs, topics.Main, b.N)
	return addrs, topics
}

// fillBacklog produces n records, IDs m0…, to topic.
func fillBacklog(b *testing.B, addrs []string, topic string, n int) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	const batch = 1000
	for i := 0; i < n; i += batch {
		var rs []*kgo.Record
		for j := i; j < min(i+batch, n); j++ {
			id := fmt.Sprintf("m%d", j)
			rs = append(rs, &kgo.Record{Topic: topic, Key: []byte(id), Value: []byte("payload"),
				Headers: []kgo.RecordHeader{{Key: broker.HeaderID, Value: []byte(id)}}})
		}
		if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
			b.Fatal(err)
		}
	}
}

// benchFetchOpts are both loops' client options beside their own: the
// fetch limit, and no client telemetry (KIP-714). kfake asks every client
// for its metrics, and a client's first push makes an lz4 writer with a
// 4 MiB block: ~10 ms of CPU and a 4 MiB allocation per client, at a
// moment that falls inside the timed span of some turns and not others.
func benchFetchOpts() []kgo.Opt {
	return []kgo.Opt{kgo.FetchMaxPartitionBytes(benchFetchBytes), kgo.DisableClientMetrics()}
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
	c := newAsyncCommitter(b, cl)
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
		c.commit(ctx)
	}
	<-tp.Done()
	b.ReportMetric(tp.Rate(), "msgs/s")
	c.wait()
}

// asyncCommitter commits a client's polled offsets asynchronously, one
// commit in flight: a poll's commit skipped while one is in flight is
// covered by the next poll's.
type asyncCommitter struct {
	b        *testing.B
	cl       *kgo.Client
	inflight chan struct{}
}

func newAsyncCommitter(b *testing.B, cl *kgo.Client) *asyncCommitter {
	return &asyncCommitter{b: b, cl: cl, inflight: make(chan struct{}, 1)}
}

func (c *asyncCommitter) commit(ctx context.Context) {
	select {
	case c.inflight <- struct{}{}:
		c.cl.CommitOffsets(ctx, c.cl.UncommittedOffsets(), func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, _ *kmsg.OffsetCommitResponse, err error) {
			if err != nil && ctx.Err() == nil {
				c.b.Error(err)
			}
			<-c.inflight
		})
	default:
	}
}

// wait waits for the commit in flight (before the client closes).
func (c *asyncCommitter) wait() { c.inflight <- struct{}{} }

// BenchmarkRawForward10Pct is rawForward, at-least-once.
func BenchmarkRawForward10Pct(b *testing.B) {
	addrs, topics := benchCluster(b)
	b.ResetTimer()
	b.ReportMetric(rawForward(b, addrs, topics, "raw", false).rate, "msgs/s")
}

// rawForward is the raw client retrying through a retry topic without a
// library, until n successes, and returns their rate: 10% of records fail
// once and are produced to the retry topic with an attempt header; a
// second group consumes the retry topic and handles them again (without
// waiting for the tier's 1 ms: a generous ceiling). It keeps the
// Consumer's guarantee the plain way a franz-go user would:
//
//   - at-least-once: after each poll the loop waits for its forwards'
//     acknowledgement (Flush) before it commits the poll's offsets
//     (asynchronously, one commit in flight);
//   - transactional: each poll's forwards and offsets are one transaction
//     of a GroupTransactSession, read committed, as the Consumer's
//     Transactional mode.
func rawForward(b *testing.B, addrs []string, topics Topics, group string, transactional bool) segment {
	cpu0 := processCPU()
	n := b.N
	tp := brokertest.NewThroughput(n, 10)
	h := tp.Handler()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	handle := func(attempt int, r *kgo.Record) *kgo.Record {
		var id string
		for _, hd := range r.Headers {
			if hd.Key == broker.HeaderID {
				id = string(hd.Value)
			}
		}
		dctx := retry.Delivery{ID: id, Attempt: attempt}.NewContext(ctx)
		if h(dctx, r.Value) == nil {
			return nil
		}
		return &kgo.Record{Topic: topics.Retry[0], Key: r.Key, Value: r.Value,
			Headers: append(r.Headers[:len(r.Headers):len(r.Headers)], kgo.RecordHeader{Key: broker.HeaderAttempt, Value: []byte("2")})}
	}
	stages := []struct{ group, topic string }{{group, topics.Main}, {group + "-retry", topics.Retry[0]}}
	var wg sync.WaitGroup
	defer wg.Wait() // before cancel: the loops end on ctx
	for i, s := range stages {
		opts := append([]kgo.Opt{kgo.SeedBrokers(addrs...), kgo.ConsumerGroup(s.group), kgo.ConsumeTopics(s.topic),
			kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.ProducerLinger(0),
			kgo.FetchMaxWait(10 * time.Millisecond)}, benchFetchOpts()...)
		attempt := i + 1 // main: attempt 1; retry: attempt 2
		wg.Add(1)
		if transactional {
			sess, err := kgo.NewGroupTransactSession(append(opts, kgo.TransactionalID(fmt.Sprintf("%s-%d", s.group, time.Now().UnixNano())),
				kgo.FetchIsolationLevel(kgo.ReadCommitted()))...)
			if err != nil {
				b.Fatal(err)
			}
			go func() {
				defer wg.Done()
				defer sess.Close()
				for ctx.Err() == nil {
					f := sess.PollRecords(ctx, DefaultMaxPollRecords)
					if ctx.Err() != nil {
						return
					}
					if err := sess.Begin(); err != nil {
						b.Error(err)
						return
					}
					var fwd []*kgo.Record
					each := func(r *kgo.Record) {
						if out := handle(attempt, r); out != nil {
							fwd = append(fwd, out)
						}
					}
					f.EachRecord(each)
					// -kafka.rawtxnpolls: the Consumer's rule, polls
					// already fetched join the transaction.
					for polls := 1; polls < *rawTxnPolls && sess.Client().BufferedFetchRecords() > 0; polls++ {
						pctx, pcancel := context.WithTimeout(ctx, time.Millisecond)
						f = sess.PollRecords(pctx, DefaultMaxPollRecords)
						pcancel()
						if ctx.Err() != nil || f.NumRecords() == 0 {
							break
						}
						f.EachRecord(each)
					}
					if len(fwd) > 0 {
						if err := sess.Client().ProduceSync(ctx, fwd...).FirstErr(); err != nil {
							_, _ = sess.End(context.Background(), kgo.TryAbort)
							return
						}
					}
					if _, err := sess.End(ctx, kgo.TryCommit); err != nil && ctx.Err() == nil {
						b.Error(err)
						return
					}
				}
			}()
			continue
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			defer wg.Done()
			defer cl.Close()
			c := newAsyncCommitter(b, cl)
			defer c.wait()
			for ctx.Err() == nil {
				f := cl.PollRecords(ctx, DefaultMaxPollRecords)
				fwd := false
				f.EachRecord(func(r *kgo.Record) {
					if out := handle(attempt, r); out != nil {
						fwd = true
						cl.Produce(ctx, out, func(_ *kgo.Record, err error) {
							if err != nil && ctx.Err() == nil {
								b.Error(err)
							}
						})
					}
				})
				if fwd && cl.Flush(ctx) != nil {
					return // ctx ended: these offsets are not committed
				}
				c.commit(ctx)
			}
		}()
	}
	<-tp.Done()
	seg := segment{rate: tp.Rate(), cpu: processCPU() - cpu0}
	cancel()
	return seg
}

func BenchmarkConsumer10PctTransient(b *testing.B) {
	addrs, topics := benchCluster(b)
	b.ResetTimer()
	b.ReportMetric(consumerRate(b, addrs, topics, "stagger", 10, false).rate, "msgs/s")
}

// BenchmarkConsumer0PctTransient is the Consumer's own overhead: nothing fails.
func BenchmarkConsumer0PctTransient(b *testing.B) {
	addrs, topics := benchCluster(b)
	b.ResetTimer()
	b.ReportMetric(consumerRate(b, addrs, topics, "stagger", 0, false).rate, "msgs/s")
}

// consumerRate runs a Consumer on topics until b.N successes, pct% of the
// records failing once, and returns their rate.
func consumerRate(b *testing.B, addrs []string, topics Topics, group string, pct uint32, transactional bool) segment {
	cpu0 := processCPU()
	tp := brokertest.NewThroughput(b.N, pct)
	opts := Options{Brokers: addrs, Topics: topics, Group: group, Handler: tp.Handler(), ClientOpts: benchFetchOpts(),
		Policy: &retry.Policy{MaxAttempts: 3, Schedule: backoff.Constant(time.Millisecond)}}
	if transactional {
		opts.Transactional, opts.TransactionalID = true, fmt.Sprintf("%s-%d", group, time.Now().UnixNano())
	}
	c, err := NewConsumer(opts)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	<-tp.Done()
	seg := segment{rate: tp.Rate(), cpu: processCPU() - cpu0}
	cancel()
	<-done
	return seg
}

// segment is one turn of a loop: its rate, and the process's CPU time from
// the loop's start (clients made, groups joined) to its last success.
type segment struct {
	rate float64 // successes per second, first delivery to the last success
	cpu  time.Duration
}

// processCPU is the process's user and system CPU time so far: the clients'
// and kfake's, which run in the benchmark's process. Unlike the rates it
// does not count the time other processes hold the cores.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPaired10Pct runs the raw loop (rawForward) and the Consumer in
// turns, -kafka.pairs pairs of b.N records each, on one kfake cluster,
// each turn on fresh topics and groups with its backlog produced first;
// the pairs alternate which side goes first (AB BA AB …). It reports the
// Consumer ÷ raw ratio of each pair (logged) and their minimum, median and
// maximum, and the median rates. The cpu-ratio metrics compare the
// process's CPU time per turn (raw ÷ Consumer), which other processes'
// load does not inflate as it does the rates.
func BenchmarkPaired10Pct(b *testing.B) {
	for _, mode := range []struct {
		name          string
		transactional bool
	}{{"atLeastOnce", false}, {"transactional", true}} {
		b.Run(mode.name, func(b *testing.B) { benchPaired(b, mode.transactional) })
	}
}

func benchPaired(b *testing.B, transactional bool) {
	if b.N == 1 {
		return // the framework's probe run: a ratio of one record is noise
	}
	pairs := max(*benchPairs, 1)
	sets := make([]Topics, 2*pairs)
	var all []string
	for i := range sets {
		sets[i] = benchTopics(i)
		all = append(all, sets[i].All()...)
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, all...))
	if err != nil {
		b.Fatal(err)
	}
	defer cluster.Close()
	addrs := cluster.ListenAddrs()
	var ratios, cpuRatios, raws, cons []float64
	b.ResetTimer()
	for p := range pairs {
		var seg [2]segment // raw, Consumer
		for k := range 2 {
			side := k ^ p&1 // even pairs: raw first; odd: the Consumer first
			i := 2*p + side
			b.StopTimer()
			fillBacklog(b, addrs, sets[i].Main, b.N)
			runtime.GC() // each turn starts from a collected heap
			b.StartTimer()
			group := fmt.Sprintf("g%d", i)
			// The labels split a CPU profile (-test.cpuprofile) by side
			// and pair (-tagfocus 'pair=^3$' -tagignore side=raw): the
			// clients' goroutines, started in the turn, inherit them;
			// kfake's are unlabelled.
			pprof.Do(context.Background(), pprof.Labels("side", [2]string{"raw", "stagger"}[side], "pair", fmt.Sprint(p)), func(context.Context) {
				if side == 0 {
					seg[0] = rawForward(b, addrs, sets[i], group, transactional)
				} else {
					seg[1] = consumerRate(b, addrs, sets[i], group, 10, transactional)
				}
			})
		}
		raws, cons = append(raws, seg[0].rate), append(cons, seg[1].rate)
		ratios = append(ratios, seg[1].rate/seg[0].rate)
		// CPU per record, raw ÷ Consumer: above 1 the Consumer spends less.
		cpuRatios = append(cpuRatios, float64(seg[0].cpu)/float64(seg[1].cpu))
		b.Logf("pair %d: raw %.0f msgs/s %v CPU, Consumer %.0f msgs/s %v CPU; ratio %.2f, by CPU %.2f",
			p, seg[0].rate, seg[0].cpu, seg[1].rate, seg[1].cpu, ratios[p], cpuRatios[p])
	}
	b.ReportMetric(median(raws), "raw-msgs/s")
	b.ReportMetric(median(cons), "stagger-msgs/s")
	b.ReportMetric(slices.Min(ratios), "ratio-min")
	b.ReportMetric(median(ratios), "ratio-median")
	b.ReportMetric(slices.Max(ratios), "ratio-max")
	b.ReportMetric(slices.Min(cpuRatios), "cpu-ratio-min")
	b.ReportMetric(median(cpuRatios), "cpu-ratio-median")
}

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// BenchmarkTxnHandlePoll is the transactional loop's work per record
// without a cluster: a poll of DefaultMaxPollRecords fresh records (an
// x-stagger-id header each, as the paired runs' backlog) on two
// partitions, handled by the benchmark's handler, none failing. An op is
// one record.
func BenchmarkTxnHandlePoll(b *testing.B) {
	topics := benchTopics(0)
	tp := brokertest.NewThroughput(math.MaxInt, 0)
	c, err := NewConsumer(Options{Brokers: []string{"127.0.0.1:1"}, Topics: topics, Group: "g", Handler: tp.Handler(),
		Policy: &retry.Policy{MaxAttempts: 3, Schedule: backoff.Constant(time.Millisecond)}})
	if err != nil {
		b.Fatal(err)
	}
	var parts [2]kgo.FetchPartition
	for i := range DefaultMaxPollRecords {
		id := fmt.Sprintf("m%d", i)
		p := &parts[i%2]
		p.Partition = int32(i % 2)
		p.Records = append(p.Records, &kgo.Record{Topic: topics.Main, Partition: p.Partition, Offset: int64(len(p.Records)),
			Key: []byte(id), Value: []byte("payload"), Headers: []kgo.RecordHeader{{Key: broker.HeaderID, Value: []byte(id)}}})
	}
	fetches := kgo.Fetches{{Topics: []kgo.FetchTopic{{Topic: topics.Main, Partitions: parts[:]}}}}
	t := txn{c: c, paused: &pauser{topic: topics.Main, due: map[int32]time.Time{}}}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; n < b.N; n += DefaultMaxPollRecords {
		t.reset()
		if t.handlePoll(ctx, fetches, time.Now()) {
			b.Fatal("kept")
		}
	}
}
