package rabbitmq

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/broker/brokertest"
	"github.com/staggerhq/stagger/retry"
)

// The throughput benchmarks publish b.N persistent messages first, then
// time, with brokertest.Throughput, from the first call of the handler to
// its b.N-th success: the raw client's consume+ack loop (call the handler,
// ack the delivery), and the stagger Consumer with 10% of messages failing
// transiently once, retried after 1 ms. With the default WaitInPlace the
// Consumer holds such a retry in place and handles it again when due
// (BenchmarkConsumer10PctTransient); with WaitInPlace negative it forwards
// it, confirmed, through a 1 ms wait queue back to the main queue
// (BenchmarkConsumer10PctWaitQueue, to compare with
// BenchmarkRawWaitQueue10Pct). All use prefetch 128 and one handler
// goroutine; the raw loops ack each delivery alone, the Consumer coalesces
// its acks (acker).
//
// A forwarded retry must be confirmed before its original is acked, and it
// takes the wait queue's TTL and a dead-letter hop to come back: the last
// retries arrive ~100 ms after the last first attempt. With 50k messages
// that tail is ~2% of a run (with 10k it was ~10%). Run them side by side:
//
//	cd broker/rabbitmq && go test -run '^$' -bench . -benchtime 50000x -count 5
//
// Separate runs drift apart (the raw loop's own rate swings up to 1.8×
// between runs): BenchmarkWaitQueuePairs alternates the two within one run.

const benchPrefetch = 128

func benchSetup(b *testing.B) (*amqp.Connection, Topology) {
	conn := benchDial(b)
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
	benchPublish(b, conn, topo, b.N)
	return conn, topo
}

// countFrames, set by STAGGER_BENCH_FRAMES=1, has the benchmarks count
// their connections' frames (frames): the pairs benchmark reports them
// per message.
var countFrames = os.Getenv("STAGGER_BENCH_FRAMES") != ""

// benchDial is dial, through countingDial when countFrames is set.
func benchDial(b *testing.B) *amqp.Connection {
	if !countFrames {
		return dial(b)
	}
	conn, err := amqp.DialConfig(amqpURL(), amqp.Config{Dial: countingDial})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return conn
}

// benchPublish publishes n persistent messages m0..m(n-1) to topo, with
// confirms in windows: the setup is not measured, and a confirm per message
// (an fsync) would make it slow.
func benchPublish(b *testing.B, conn *amqp.Connection, topo Topology, n int) {
	conf, err := newConfirmer(conn)
	if err != nil {
		b.Fatal(err)
	}
	defer conf.ch.Close()
	ctx := context.Background()
	var waits []func(context.Context) error
	for i := range n {
		wait, err := conf.publish(ctx, topo.Exchange, topo.RoutingKey, amqp.Publishing{
			MessageId: fmt.Sprintf("m%d", i), DeliveryMode: amqp.Persistent, Body: []byte("payload")})
		if err != nil {
			b.Fatal(err)
		}
		if waits = append(waits, wait); len(waits) == 1000 || i == n-1 {
			for _, w := range waits {
				if err := w(ctx); err != nil {
					b.Fatal(err)
				}
			}
			waits = waits[:0]
		}
	}
}

// benchConsume starts the raw loops' consumer of topo's main queue: a
// channel of its own with prefetch benchPrefetch, manual acks.
func benchConsume(b *testing.B, conn *amqp.Connection, topo Topology) <-chan amqp.Delivery {
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
	return ds
}

func BenchmarkRawConsumeAck(b *testing.B) {
	conn, topo := benchSetup(b)
	ds := benchConsume(b, conn, topo)
	tp := brokertest.NewThroughput(b.N, 0)
	h := tp.Handler()
	ctx := context.Background()
	b.ResetTimer()
	n := 0
	for d := range ds {
		if err := h(ctx, d.Body); err != nil {
			b.Fatal(err)
		}
		if err := d.Ack(false); err != nil {
			b.Fatal(err)
		}
		if n++; n == b.N {
			break
		}
	}
	<-tp.Done()
	b.ReportMetric(tp.Rate(), "msgs/s")
}

// BenchmarkRawRepublish10Pct is the raw client retrying without a
// library and without sleeping: the same 10% of messages fail once, and
// each failure is republished (persistent, mandatory, confirmed, pipelined
// as the Consumer does) straight back into the main queue with an attempt
// header, and the original acked once the copy is confirmed. No wait queue,
// no dead-lettering: the cheapest retry RabbitMQ offers, so the ceiling for
// any delayed-retry topology.
func BenchmarkRawRepublish10Pct(b *testing.B) { benchRawRetry(b, false) }

// BenchmarkRawWaitQueue10Pct is the raw client doing the delayed retry the
// Consumer does, without a library: each failure is republished the same
// way but into the topology's 1 ms wait queue, whose TTL dead-letters it
// back to the main queue; then the original is acked. The same broker work
// per retry as the Consumer's (a persistent confirmed publish, the expiry
// and the dead-letter hop), with one header of its own.
func BenchmarkRawWaitQueue10Pct(b *testing.B) { benchRawRetry(b, true) }

func benchRawRetry(b *testing.B, viaWaitQueue bool) {
	conn, topo := benchSetup(b)
	target := topo.Queue
	if viaWaitQueue {
		target = topo.TierQueue(0)
	}
	pub := benchConfirmChannel(b, conn)
	b.ResetTimer()
	b.ReportMetric(benchRawSegment(b, conn, pub, topo, target, b.N), "msgs/s")
}

// benchConfirmChannel opens the raw loop's publishing channel, in confirm
// mode.
func benchConfirmChannel(b *testing.B, conn *amqp.Connection) *amqp.Channel {
	pub, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	if err := pub.Confirm(false); err != nil {
		b.Fatal(err)
	}
	return pub
}

// benchRawSegment runs the raw loop on a consuming channel of its own until
// n messages succeeded, republishing each failure to target on pub, and
// returns its rate. The channel is closed on return: nothing is left
// unacknowledged by then.
func benchRawSegment(b *testing.B, conn *amqp.Connection, pub *amqp.Channel, topo Topology, target string, n int) float64 {
	ch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	defer ch.Close()
	if err := ch.Qos(benchPrefetch, 0, false); err != nil {
		b.Fatal(err)
	}
	ds, err := ch.Consume(topo.Queue, "", false, false, false, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	tp := brokertest.NewThroughput(n, 10)
	h := tp.Handler()
	ctx := context.Background()
	var pending sync.WaitGroup
	for d := range ds {
		attempt := 1
		if _, ok := d.Headers["x-raw-attempt"]; ok {
			attempt = 2
		}
		err := h(retry.Delivery{ID: d.MessageId, Attempt: attempt}.NewContext(ctx), d.Body)
		if err == nil {
			if err := d.Ack(false); err != nil {
				b.Fatal(err)
			}
			select {
			case <-tp.Done():
			default:
				continue
			}
			break
		}
		dc, err := pub.PublishWithDeferredConfirmWithContext(ctx, "", target, true, false, amqp.Publishing{
			Headers: amqp.Table{"x-raw-attempt": int32(2)}, MessageId: d.MessageId, DeliveryMode: amqp.Persistent, Body: d.Body})
		if err != nil {
			b.Fatal(err)
		}
		pending.Add(1)
		go func(d amqp.Delivery) {
			defer pending.Done()
			if ok, err := dc.WaitContext(ctx); err != nil || !ok {
				b.Errorf("confirm: %v %v", ok, err)
				return
			}
			if err := d.Ack(false); err != nil {
				b.Error(err)
			}
		}(d)
	}
	<-tp.Done()
	pending.Wait()
	return tp.Rate()
}

// BenchmarkConsumer10PctTransient is the Consumer with its defaults: the
// 1 ms retries are held in place (WaitInPlace).
func BenchmarkConsumer10PctTransient(b *testing.B) { benchConsumer(b, 10, 0) }

// BenchmarkConsumer10PctWaitQueue is the Consumer with every retry through
// the 1 ms wait queue (WaitInPlace negative): the broker work of
// BenchmarkRawWaitQueue10Pct.
func BenchmarkConsumer10PctWaitQueue(b *testing.B) { benchConsumer(b, 10, -1) }

// BenchmarkConsumer0PctTransient is the Consumer's own overhead over the raw
// loop: nothing fails.
func BenchmarkConsumer0PctTransient(b *testing.B) { benchConsumer(b, 0, 0) }

func benchConsumer(b *testing.B, pct uint32, waitInPlace time.Duration) {
	_, topo := benchSetup(b)
	b.ResetTimer()
	b.ReportMetric(benchConsumerSegment(b, topo, pct, waitInPlace, b.N), "msgs/s")
}

// benchConsumerSegment runs a Consumer of topo until n messages succeeded,
// stops it, and returns its rate.
func benchConsumerSegment(b *testing.B, topo Topology, pct uint32, waitInPlace time.Duration, n int) float64 {
	tp := brokertest.NewThroughput(n, pct)
	opts := Options{URL: amqpURL(), Topology: topo, Handler: tp.Handler(), Prefetch: benchPrefetch, WaitInPlace: waitInPlace,
		Policy: &retry.Policy{MaxAttempts: 3, Schedule: backoff.Constant(time.Millisecond)}}
	if countFrames {
		opts.Dial = countingDial
	}
	c, err := NewConsumer(opts)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	<-tp.Done()
	// Stopped before the next segment or round starts and before the
	// cleanup deletes the topology (a consumer left running would share
	// the next one's cores, and could declare the deleted queues again).
	cancel()
	<-done
	return tp.Rate()
}

// benchPairs is the number of consumer/raw pairs of
// BenchmarkWaitQueuePairs, 16 unless STAGGER_BENCH_PAIRS sets it. A pair
// of 10,000-message segments lasts about a second, and single pairs range
// from 0.6 to 1.8 on the same code (the broker's long garbage collections
// fall on one segment or the other: its dirty-CPU threads' time per message
// differs up to 5× between the sides of a pair), so the median of 8 pairs
// moved by ±0.1 from run to run.
var benchPairs = func() int {
	if n, err := strconv.Atoi(os.Getenv("STAGGER_BENCH_PAIRS")); err == nil && n > 0 {
		return n
	}
	return 16
}()

// BenchmarkWaitQueuePairs compares BenchmarkConsumer10PctWaitQueue with
// BenchmarkRawWaitQueue10Pct within one run: benchPairs pairs of segments
// of b.N messages each (the same IDs, so the same 10% fail), the Consumer
// first in even pairs and the raw loop first in odd ones, against the same
// broker and queues, after a warm-up pair that is not counted. Each
// segment's messages are published (untimed) before it starts, and each
// side dials a connection of its own in each segment (the Consumer in Run),
// with the same prefetch, persistent messages and confirmed, mandatory
// publishes. Broker-side drift and machine load between rounds hit both
// sides of a pair alike. It reports the Consumer ÷ raw rate ratio of the
// pairs (min, median, max), both sides' median rates, the client process's
// CPU time per message (raw ÷ Consumer: above 1 when the Consumer costs
// less), which load moves far less than rates, and, where the local
// RabbitMQ's /proc can be read, the server's (serverCPU). With
// STAGGER_BENCH_FRAMES=1 it logs each segment's frames per message (acks,
// writes, how often a delivery filled the prefetch window).
func BenchmarkWaitQueuePairs(b *testing.B) {
	conn, topo := benchSetup(b) // publishes the first segment
	first := true
	// seg runs one segment and returns its rate, the process's CPU time
	// (user and system) per message, which the machine's load barely
	// moves, and RabbitMQ's (0 where it cannot be read).
	seg := func(raw bool, pair int) (rate, cpu, srv float64) {
		if !first {
			benchPublish(b, conn, topo, b.N)
		}
		first = false
		side := [2]string{"stagger", "raw"}[b2i(raw)]
		c0, f0 := cpuTime(b), frames.snapshot()
		s0, srvOK := serverCPU()
		pprof.Do(context.Background(), pprof.Labels("side", side, "pair", strconv.Itoa(pair)), func(context.Context) {
			if raw {
				// A connection of its own each segment, as the Consumer
				// dials one in Run: both sides start with the broker's
				// connection and channel processes fresh, and a CPU
				// profile (-test.cpuprofile, then go tool pprof -tags)
				// puts the client library's goroutines on their side.
				rawConn := benchDial(b)
				defer rawConn.Close()
				pub := benchConfirmChannel(b, rawConn)
				rate = benchRawSegment(b, rawConn, pub, topo, topo.TierQueue(0), b.N)
			} else {
				rate = benchConsumerSegment(b, topo, 10, -1, b.N)
			}
		})
		per := func(d time.Duration) float64 { return d.Seconds() * 1e6 / float64(b.N) }
		cpu = per(cpuTime(b) - c0)
		if s1, ok := serverCPU(); ok && srvOK {
			srv = per(s1 - s0)
		}
		if countFrames {
			f, n := frames.snapshot().sub(f0), float64(b.N)
			b.Logf("pair %d %-7s %6.0f msgs/s, CPU %5.1f µs/msg, server %5.1f; per msg: acks %.3f (multiple %.3f), publishes %.3f, writes %.3f, deliveries %.3f, confirms %.3f (multiple %.3f); window full %.3f, near %.3f",
				pair, side, rate, cpu, srv, float64(f.acks)/n, float64(f.multiAcks)/n, float64(f.publishes)/n, float64(f.writes)/n,
				float64(f.deliveries)/n, float64(f.confirms)/n, float64(f.multiConfs)/n, float64(f.full)/n, float64(f.near)/n)
		}
		return rate, cpu, srv
	}
	var ratios, cpuRatios, srvRatios, stg, raw, stgCPU, rawCPU, stgSrv, rawSrv []float64
	// A warm-up pair, not counted: the first segments of a run meet the
	// queues, the connections and the broker's processes cold.
	seg(true, -1)
	seg(false, -1)
	b.ResetTimer()
	for i := range benchPairs {
		var s, r, sc, rc, ss, rs float64
		if i%2 == 0 {
			s, sc, ss = seg(false, i)
			r, rc, rs = seg(true, i)
		} else {
			r, rc, rs = seg(true, i)
			s, sc, ss = seg(false, i)
		}
		stg, raw, ratios = append(stg, s), append(raw, r), append(ratios, s/r)
		stgCPU, rawCPU, cpuRatios = append(stgCPU, sc), append(rawCPU, rc), append(cpuRatios, rc/sc)
		stgSrv, rawSrv = append(stgSrv, ss), append(rawSrv, rs)
		if ss > 0 {
			srvRatios = append(srvRatios, rs/ss)
		}
	}
	b.StopTimer()
	b.Logf("%d msgs/segment, consumer/raw rate per pair: %.2f; raw/consumer CPU per message: %.2f; server CPU: %.2f", b.N, ratios, cpuRatios, srvRatios)
	slices.Sort(ratios)
	b.ReportMetric(ratios[0], "ratio-min")
	b.ReportMetric(median(ratios), "ratio-median")
	b.ReportMetric(ratios[len(ratios)-1], "ratio-max")
	b.ReportMetric(median(cpuRatios), "cpu-ratio-median")
	b.ReportMetric(median(stg), "stagger-msgs/s")
	b.ReportMetric(median(raw), "raw-msgs/s")
	b.ReportMetric(median(stgCPU), "stagger-cpu-µs/msg")
	b.ReportMetric(median(rawCPU), "raw-cpu-µs/msg")
	if len(srvRatios) > 0 {
		b.ReportMetric(median(srvRatios), "server-cpu-ratio-median")
		b.ReportMetric(median(stgSrv), "stagger-server-µs/msg")
		b.ReportMetric(median(rawSrv), "raw-server-µs/msg")
	}
}

func b2i(v bool) int {
	if v {
		return 1
	}
	return 0
}

// median is xs's median; it sorts xs.
func median(xs []float64) float64 {
	slices.Sort(xs)
	if n := len(xs); n%2 == 0 {
		return (xs[n/2-1] + xs[n/2]) / 2
	}
	return xs[len(xs)/2]
}
