package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/broker/brokertest"
	"github.com/staggerhq/stagger/retry"
)

// wireLog is an acknowledger that checks the frames an acker sends, as
// RabbitMQ would: a tag is settled once (a second settlement closes the
// channel with PRECONDITION_FAILED), a multiple ack settles every
// unsettled tag up to its own, which must be unsettled itself, and nothing may settle a tag before the
// Consumer decided it.
type wireLog struct {
	t       *testing.T
	decided map[uint64]string // tag: "ack" or "nack", once decided
	wire    map[uint64]string // tag: how it was settled on the wire
	frames  int
	// As a batcher: the cork depth, the frames held back by it, and the
	// writes (a frame alone, or an uncork's held frames).
	corked, held, writes int
}

func (w *wireLog) cork() { w.corked++ }

func (w *wireLog) uncork() error {
	if w.corked--; w.corked < 0 {
		w.t.Fatal("uncork without cork")
	}
	if w.corked == 0 && w.held > 0 {
		w.writes++
		w.held = 0
	}
	return nil
}

// write counts a frame's write, or holds it back while corked.
func (w *wireLog) write() {
	w.frames++
	if w.corked > 0 {
		w.held++
	} else {
		w.writes++
	}
}

func (w *wireLog) settle(tag uint64, how string) {
	if w.wire[tag] != "" {
		w.t.Fatalf("tag %d settled twice (%s, then %s)", tag, w.wire[tag], how)
	}
	if w.decided[tag] != how {
		w.t.Fatalf("tag %d settled by %s on the wire, decided %q", tag, how, w.decided[tag])
	}
	w.wire[tag] = how
}

func (w *wireLog) Ack(tag uint64, multiple bool) error {
	w.write()
	if !multiple {
		w.settle(tag, "ack")
		return nil
	}
	if w.wire[tag] != "" {
		w.t.Fatalf("multiple ack of tag %d, settled already (%s): unknown delivery tag", tag, w.wire[tag])
	}
	for t := uint64(1); t <= tag; t++ {
		if w.wire[t] == "" {
			w.settle(t, "ack")
		}
	}
	return nil
}

func (w *wireLog) Nack(tag uint64, multiple, requeue bool) error {
	w.write()
	if multiple {
		w.t.Fatal("multiple nack")
	}
	w.settle(tag, "nack")
	return nil
}

// TestAckerCoalesces settles tags in random orders, acks lazy or not and
// some nacks, flushing at random, and checks that no tag is settled on the
// wire before it was decided, none twice, a nack is never covered by an
// ack, at most limit acks wait at once, and after a flush every decided
// tag is settled on the wire.
func TestAckerCoalesces(t *testing.T) {
	for run := range uint64(300) {
		t.Run(fmt.Sprint(run), func(t *testing.T) {
			r := rand.New(rand.NewPCG(run, 7))
			n := 1 + r.IntN(200)
			prefetch := 1 + r.IntN(64)
			w := &wireLog{t: t, decided: map[uint64]string{}, wire: map[uint64]string{}}
			a := newAcker(w, prefetch, w)
			order := r.Perm(n)
			if r.IntN(2) == 0 {
				// Mostly in order, as one handler goroutine settles them.
				for i := range order {
					order[i] = i
				}
				for range n / 10 {
					i, j := r.IntN(n), r.IntN(n)
					order[i], order[j] = order[j], order[i]
				}
			}
			for _, i := range order {
				tag := uint64(i + 1)
				var err error
				if r.IntN(20) == 0 {
					w.decided[tag] = "nack"
					err = a.nack(tag, true)
				} else {
					w.decided[tag] = "ack"
					err = a.ack(tag, r.IntN(4) != 0)
				}
				if err != nil {
					t.Fatal(err)
				}
				if w.corked != 0 {
					t.Fatalf("corked %d deep after a settle", w.corked)
				}
				if waiting := a.waitBase + a.waitLoose; waiting >= a.limit {
					t.Fatalf("%d acks wait, limit %d", waiting, a.limit)
				}
				if len(a.waiting) > 2*a.limit {
					t.Fatalf("%d tags in waiting, limit %d", len(a.waiting), a.limit)
				}
				if next := tag + 1; r.IntN(10) == 0 && next <= uint64(n) && w.decided[next] == "" {
					a.forwarding(next) // its forward waits for the confirm
				}
				if r.IntN(5) == 0 {
					if err := a.idle(); err != nil {
						t.Fatal(err)
					}
				}
				if r.IntN(10) == 0 {
					if err := a.flush(); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := a.flush(); err != nil {
				t.Fatal(err)
			}
			for tag := uint64(1); tag <= uint64(n); tag++ {
				if w.wire[tag] == "" {
					t.Fatalf("tag %d never settled on the wire", tag)
				}
			}
			if w.frames > n {
				t.Fatalf("%d frames for %d tags", w.frames, n)
			}
		})
	}
}

// TestAckerInOrderCoalesces: one handler goroutine settling in order
// sends one frame per limit acks.
func TestAckerInOrderCoalesces(t *testing.T) {
	w := &wireLog{t: t, decided: map[uint64]string{}, wire: map[uint64]string{}}
	a := newAcker(w, 128, w)
	for tag := uint64(1); tag <= 320; tag++ {
		w.decided[tag] = "ack"
		if err := a.ack(tag, true); err != nil {
			t.Fatal(err)
		}
	}
	if w.frames != 10 {
		t.Fatalf("%d frames for 320 acks in order, limit 32: want 10", w.frames)
	}
}

// TestAckerBatchesFlush: the acks a flush sends (a multiple ack and the
// single acks above a forward waiting for its confirm) go out in one
// write.
func TestAckerBatchesFlush(t *testing.T) {
	w := &wireLog{t: t, decided: map[uint64]string{}, wire: map[uint64]string{}}
	a := newAcker(w, 128, w)
	settle := func(tag uint64) {
		w.decided[tag] = "ack"
		if err := a.ack(tag, true); err != nil {
			t.Fatal(err)
		}
	}
	for tag := uint64(1); tag <= 5; tag++ {
		settle(tag)
	}
	a.forwarding(6)
	for tag := uint64(7); tag <= 20; tag++ {
		settle(tag)
	}
	if w.frames != 0 {
		t.Fatalf("%d frames before the flush", w.frames)
	}
	if err := a.flush(); err != nil {
		t.Fatal(err)
	}
	if w.frames != 15 || w.writes != 1 || w.corked != 0 {
		t.Fatalf("flush: %d frames in %d writes (corked %d): want 15 in 1", w.frames, w.writes, w.corked)
	}
	// The forward's confirm: its ack alone, one frame, one write.
	w.decided[6] = "ack"
	if err := a.ack(6, false); err != nil {
		t.Fatal(err)
	}
	if w.frames != 16 || w.writes != 2 {
		t.Fatalf("after the forward's ack: %d frames in %d writes, want 16 in 2", w.frames, w.writes)
	}
}

// TestAckerAckAll: forwards confirmed together free their run with one
// multiple ack.
func TestAckerAckAll(t *testing.T) {
	w := &wireLog{t: t, decided: map[uint64]string{}, wire: map[uint64]string{}}
	a := newAcker(w, 128, w)
	a.forwarding(3)
	a.forwarding(5)
	for _, tag := range []uint64{1, 2, 4, 6} {
		w.decided[tag] = "ack"
		if err := a.ack(tag, true); err != nil {
			t.Fatal(err)
		}
	}
	if w.frames != 0 {
		t.Fatalf("%d frames before the confirms", w.frames)
	}
	w.decided[3], w.decided[5] = "ack", "ack"
	if err := a.ackAll([]uint64{3, 5}); err != nil {
		t.Fatal(err)
	}
	if w.frames != 1 || w.wire[6] != "ack" || a.waitBase+a.waitLoose != 0 {
		t.Fatalf("%d frames, tag 6 %q, %d acks wait: want one multiple ack up to 6", w.frames, w.wire[6], a.waitBase+a.waitLoose)
	}
}

// warnCounter is a slog.Handler counting the records at Warn and above.
type warnCounter struct{ n atomic.Int32 }

func (w *warnCounter) Enabled(context.Context, slog.Level) bool { return true }
func (w *warnCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		w.n.Add(1)
	}
	return nil
}
func (w *warnCounter) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnCounter) WithGroup(string) slog.Handler      { return w }

// TestCoalescedAcksKeepTheChannel runs Consumers whose acks coalesce
// (successes, held retries and forwards settling out of order, four
// handler goroutines) against RabbitMQ, which closes the channel on an ack
// it does not expect: every message must succeed on the first connection,
// with no reconnect, and leave no queue holding anything.
func TestCoalescedAcksKeepTheChannel(t *testing.T) {
	for _, wip := range []time.Duration{-1, MaxWaitInPlace} {
		t.Run(fmt.Sprint(wip), func(t *testing.T) {
			conn := dial(t)
			topo := NewTopology(uniqueName(t), broker.Tiers{time.Millisecond})
			ch, err := conn.Channel()
			if err != nil {
				t.Fatal(err)
			}
			if err := topo.Declare(ch); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = topo.Delete(ch) })
			pub, err := NewPublisher(conn, topo)
			if err != nil {
				t.Fatal(err)
			}
			const n = 600
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for i := range n {
				if err := pub.Publish(ctx, fmt.Sprintf("m%d", i), []byte("x")); err != nil {
					t.Fatal(err)
				}
			}
			tp := brokertest.NewThroughput(n, 30)
			tcp := &tcpTracker{}
			warns := &warnCounter{}
			c, err := NewConsumer(Options{URL: amqpURL(), Topology: topo, Handler: tp.Handler(), Prefetch: 16, Concurrency: 4,
				WaitInPlace: wip, Dial: tcp.dial, Logger: slog.New(warns),
				Policy: &retry.Policy{MaxAttempts: 3, Schedule: backoff.Constant(time.Millisecond)}})
			if err != nil {
				t.Fatal(err)
			}
			rctx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- c.Run(rctx) }()
			await(t, ctx, tp.Done(), "not every message succeeded")
			stop()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("Run returned %v", err)
			}
			if got := warns.n.Load(); got != 0 {
				t.Errorf("%d warnings (a reconnect: RabbitMQ closed the channel)", got)
			}
			if got := len(tcp.conns); got != 1 {
				t.Errorf("%d connections, want 1", got)
			}
			for _, q := range []string{topo.Queue, topo.TierQueue(0), topo.DLQ} {
				st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
				if err != nil {
					t.Fatal(err)
				}
				if st.Messages != 0 {
					t.Errorf("%s holds %d messages", q, st.Messages)
				}
			}
		})
	}
}
