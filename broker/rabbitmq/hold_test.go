package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/broker/brokertest"
	"github.com/staggerhq/stagger/retry"
)

// runLog records a handler's runs.
type runLog struct {
	mu      sync.Mutex
	runs    []retry.Delivery
	starts  []time.Time
	ends    []time.Time
	changed chan struct{}
}

func newRunLog() *runLog { return &runLog{changed: make(chan struct{})} }

// handler records each run and returns fail(attempt)'s error.
func (l *runLog) handler(fail func(attempt int) error) retry.Handler {
	return func(ctx context.Context, _ []byte) error {
		begun := time.Now()
		d, _ := retry.DeliveryFrom(ctx)
		err := fail(d.Attempt)
		l.mu.Lock()
		l.runs = append(l.runs, d)
		l.starts = append(l.starts, begun)
		l.ends = append(l.ends, time.Now())
		close(l.changed)
		l.changed = make(chan struct{})
		l.mu.Unlock()
		return err
	}
}

func (l *runLog) deliveries() []retry.Delivery {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]retry.Delivery(nil), l.runs...)
}

func (l *runLog) attempts() []int {
	var a []int
	for _, d := range l.deliveries() {
		a = append(a, d.Attempt)
	}
	return a
}

// gap is how long after run i-1 ended run i started.
func (l *runLog) gap(i int) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.starts[i].Sub(l.ends[i-1])
}

// waitRuns waits until the handler ran n times.
func (l *runLog) waitRuns(t *testing.T, ctx context.Context, n int) {
	t.Helper()
	for {
		l.mu.Lock()
		got, ch := len(l.runs), l.changed
		l.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("want %d handler runs, got attempts %v", n, l.attempts())
		}
	}
}

// allStacks is the stack dump of every goroutine, in a buffer grown until
// the dump fits: a fixed one would cut it short, dropping goroutines.
func allStacks() []byte {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return buf[:n]
		}
		buf = make([]byte, 2*len(buf))
	}
}

// consumerGoroutines counts the goroutines running Consumer code: its
// handler goroutines, confirm waits and hold timers.
func consumerGoroutines() int {
	n := 0
	for _, g := range strings.Split(string(allStacks()), "\n\n") {
		if strings.Contains(g, "broker/rabbitmq.(*Consumer)") || strings.Contains(g, "broker/rabbitmq.(*holder)") {
			n++
		}
	}
	return n
}

// noConsumerGoroutines fails t unless every Consumer goroutine ends soon
// after Run returned.
func noConsumerGoroutines(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for consumerGoroutines() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("Consumer goroutines left after Run returned:\n%s", allStacks())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRetryHeldInPlace: a retry due within WaitInPlace is held by the
// Consumer, not forwarded: the handler runs again with attempt 2 and the
// same deadline, not before the decided delay, and nothing is published
// (the only tier, 10 s, would have delayed the retry by 10 s).
func TestRetryHeldInPlace(t *testing.T) {
	const delay = 50 * time.Millisecond
	log := newRunLog()
	h := log.handler(func(attempt int) error {
		if attempt == 1 {
			return retry.Retryable(errors.New("once"))
		}
		return nil
	})
	var forwards, holds atomic.Int32
	p := start(t, brokertest.Setup{Name: uniqueName(t), Handler: h, Tiers: broker.Tiers{10 * time.Second},
		Policy: &retry.Policy{MaxAttempts: 3, Schedule: backoff.Constant(delay), Timeout: time.Hour}},
		func(o *Options) {
			o.WaitInPlace = 200 * time.Millisecond
			o.afterForward = func() { forwards.Add(1) }
			o.afterHold = func() { holds.Add(1) }
		})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Publish(ctx, "held", []byte("x")); err != nil {
		t.Fatal(err)
	}
	log.waitRuns(t, ctx, 2)
	if err := p.halt(); err != nil {
		t.Fatal(err)
	}
	runs := log.deliveries()
	if len(runs) != 2 || runs[0].Attempt != 1 || runs[1].Attempt != 2 {
		t.Fatalf("attempts %v, want [1 2]", log.attempts())
	}
	if d0, d1 := runs[0].Deadline, runs[1].Deadline; d0.IsZero() || d1.Sub(d0).Abs() > time.Millisecond {
		t.Errorf("attempt 2's deadline %v, want attempt 1's %v (Policy.Timeout from the first attempt)", d1, d0)
	}
	gap := log.gap(1)
	if gap < delay {
		t.Errorf("attempt 2 started %v after attempt 1 failed, before the decided %v", gap, delay)
	}
	if n := forwards.Load(); n != 0 {
		t.Errorf("%d forwards confirmed, want 0: the retry went through a wait queue", n)
	}
	if n := holds.Load(); n != 1 {
		t.Errorf("held %d times, want 1", n)
	}
	ch, err := p.conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if qi, err := ch.QueueDeclarePassive(p.topo.TierQueue(0), true, false, false, false, nil); err != nil || qi.Messages != 0 {
		t.Errorf("wait queue: %+v, %v; want empty", qi, err)
	}
	noConsumerGoroutines(t)
}

// TestExhaustedInPlace: with the default WaitInPlace and 5 ms waits every
// retry is held; the message runs exactly MaxAttempts times, with attempts
// 1..MaxAttempts, and is dead-lettered once with that attempt count. The
// dead letter is the only forward.
func TestExhaustedInPlace(t *testing.T) {
	const maxAttempts = 4
	log := newRunLog()
	h := log.handler(func(attempt int) error { return retry.Retryable(fmt.Errorf("fails on attempt %d", attempt)) })
	var forwards atomic.Int32
	p := start(t, brokertest.Setup{Name: uniqueName(t), Handler: h, Tiers: broker.Tiers{10 * time.Second},
		Policy: &retry.Policy{MaxAttempts: maxAttempts, Schedule: backoff.Constant(5 * time.Millisecond)}},
		func(o *Options) { o.afterForward = func() { forwards.Add(1) } })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Publish(ctx, "tired", []byte("always")); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-p.dlq:
		if got := d.Headers[broker.HeaderAttempt]; got != fmt.Sprint(maxAttempts) {
			t.Errorf("dead letter %s = %v, want %d", broker.HeaderAttempt, got, maxAttempts)
		}
		if got := d.Headers[broker.HeaderReason]; got != "exhausted" {
			t.Errorf("dead letter reason %v, want exhausted", got)
		}
		if d.MessageId != "tired" {
			t.Errorf("dead letter of %q, want tired", d.MessageId)
		}
	case <-ctx.Done():
		t.Fatal("no dead letter")
	}
	// A sentinel, failing every attempt as tired did, must be the next
	// dead letter: tired was not dead-lettered twice.
	if err := p.Publish(ctx, "sentinel", []byte("x")); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-p.dlq:
		if d.MessageId != "sentinel" {
			t.Fatalf("next dead letter %q, want the sentinel", d.MessageId)
		}
	case <-ctx.Done():
		t.Fatal("no dead letter for the sentinel")
	}
	if err := p.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	want := []int{1, 2, 3, 4, 1, 2, 3, 4} // tired, then the sentinel (it fails too)
	if got := log.attempts(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("attempts %v, want %v", got, want)
	}
	if n := forwards.Load(); n != 2 {
		t.Errorf("%d forwards, want 2 (the dead letters)", n)
	}
}

// TestStopWhileHeldForwards stops the consumer while a retry is held: the
// stop forwards it to its wait queue (confirmed, then acknowledged), and a
// new Consumer runs it with attempt 2. Every attempt runs once: MaxAttempts
// runs in all, then one dead letter.
func TestStopWhileHeldForwards(t *testing.T) {
	const maxAttempts = 3
	log := newRunLog()
	h := log.handler(func(attempt int) error { return retry.Retryable(fmt.Errorf("fails on attempt %d", attempt)) })
	var (
		forwards atomic.Int32
		heldOnce sync.Once
		opts     *Options
	)
	isHeld := make(chan struct{})
	p := start(t, brokertest.Setup{Name: uniqueName(t), Handler: h, Tiers: brokertest.Tiers,
		Policy: &retry.Policy{MaxAttempts: maxAttempts, Schedule: backoff.Constant(400 * time.Millisecond)}},
		func(o *Options) {
			o.WaitInPlace = 500 * time.Millisecond
			o.afterForward = func() { forwards.Add(1) }
			o.afterHold = func() { heldOnce.Do(func() { close(isHeld) }) }
			opts = o
		})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Publish(ctx, "stopped", []byte("x")); err != nil {
		t.Fatal(err)
	}
	await(t, ctx, isHeld, "the retry was never held")
	// That the stop hands a held delivery over at once, without waiting
	// for its timer, is TestHolder's (on synctest's clock).
	if err := p.halt(); err != nil {
		t.Fatal(err)
	}
	if got := log.attempts(); fmt.Sprint(got) != "[1]" {
		t.Fatalf("attempts before the stop returned %v, want [1]", got)
	}
	if n := forwards.Load(); n != 1 {
		t.Fatalf("%d forwards confirmed by the stop, want 1 (the held retry)", n)
	}
	noConsumerGoroutines(t)

	runToDeadLetter(t, ctx, opts, p, log, maxAttempts, "")
	gap := log.gap(1)
	if gap < 400*time.Millisecond {
		t.Errorf("attempt 2 started %v after attempt 1 failed, before the decided 400ms", gap)
	}
}

// TestDropWhileHeld drops the connection while a retry is held: the held
// delivery is abandoned (nothing forwarded), RabbitMQ redelivers it with
// the state of its headers, so the attempt made in place runs again, and
// the message then succeeds: nothing is lost.
func TestDropWhileHeld(t *testing.T) {
	log := newRunLog()
	h := log.handler(func(attempt int) error {
		if attempt == 1 {
			return retry.Retryable(errors.New("once"))
		}
		return nil
	})
	var (
		forwards atomic.Int32
		dropOnce sync.Once
		p        *pipeline
	)
	p = start(t, brokertest.Setup{Name: uniqueName(t), Handler: h, Tiers: brokertest.Tiers,
		Policy: &retry.Policy{MaxAttempts: 3, Schedule: backoff.Constant(400 * time.Millisecond)}},
		func(o *Options) {
			o.WaitInPlace = 500 * time.Millisecond
			o.afterForward = func() { forwards.Add(1) }
			o.afterHold = func() { dropOnce.Do(func() { p.tcp.drop() }) }
		})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Publish(ctx, "dropped", []byte("x")); err != nil {
		t.Fatal(err)
	}
	log.waitRuns(t, ctx, 3)
	if err := p.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	if got := log.attempts(); fmt.Sprint(got) != "[1 1 2]" {
		t.Fatalf("attempts %v, want [1 1 2]: the in-place attempt again after the drop, then the retry", got)
	}
	if n := p.tcp.drops.Load(); n != 1 {
		t.Fatalf("%d drops, want 1", n)
	}
	if n := forwards.Load(); n != 0 {
		t.Errorf("%d forwards, want 0: a held delivery of a dropped connection is abandoned", n)
	}
	noConsumerGoroutines(t)
}

// TestStopInterruptsResumedAttempt stops the consumer while a held retry
// runs again and its handler honours the stop (returns ctx's error): that
// run is no attempt, and the delivery's headers lack attempt 1 made in
// place, so the stop forwards it with the state it was held with instead
// of requeueing it. A new Consumer runs attempt 2 again, then 3: every
// attempt once, attempt 1 not repeated.
func TestStopInterruptsResumedAttempt(t *testing.T) {
	const maxAttempts = 3
	log := newRunLog()
	record := log.handler(func(attempt int) error { return retry.Retryable(fmt.Errorf("fails on attempt %d", attempt)) })
	var (
		forwards    atomic.Int32
		blockedOnce sync.Once
		opts        *Options
	)
	blocked := make(chan struct{})
	h := func(ctx context.Context, payload []byte) error {
		d, _ := retry.DeliveryFrom(ctx)
		interrupt := false
		if d.Attempt == 2 {
			blockedOnce.Do(func() { interrupt = true })
		}
		if interrupt {
			close(blocked)
			<-ctx.Done() // honours the stop: not an attempt, not recorded
			return ctx.Err()
		}
		return record(ctx, payload)
	}
	p := start(t, brokertest.Setup{Name: uniqueName(t), Handler: h, Tiers: brokertest.Tiers,
		Policy: &retry.Policy{MaxAttempts: maxAttempts, Schedule: backoff.Constant(50 * time.Millisecond)}},
		func(o *Options) {
			o.WaitInPlace = MaxWaitInPlace
			o.afterForward = func() { forwards.Add(1) }
			opts = o
		})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Publish(ctx, "interrupted", []byte("x")); err != nil {
		t.Fatal(err)
	}
	await(t, ctx, blocked, "the held retry never ran again")
	if err := p.halt(); err != nil {
		t.Fatal(err)
	}
	if got := log.attempts(); fmt.Sprint(got) != "[1]" {
		t.Fatalf("attempts before the stop returned %v, want [1]", got)
	}
	if n := forwards.Load(); n != 1 {
		t.Fatalf("%d forwards confirmed by the stop, want 1 (the interrupted retry, with its held state)", n)
	}
	noConsumerGoroutines(t)

	runToDeadLetter(t, ctx, opts, p, log, maxAttempts, " (attempt 2's interrupted run is no attempt)")
}

// closeDelayer dials the consumer's connections. Once armed, it holds
// back the next connection.close frame the client writes: that frame goes
// out right after the next write, or after closeDelay when there is none.
// So a frame the Consumer writes while it is closing the connection
// reaches RabbitMQ, and the frames it writes after that one (an
// acknowledgement) are discarded with the closed connection — the race
// between a close and a forward, widened from microseconds to closeDelay.
type closeDelayer struct {
	armed    atomic.Bool
	onHold   func() // runs when a close frame is held back
	overtook atomic.Int32
}

const closeDelay = 1500 * time.Millisecond

func (cd *closeDelayer) dial(network, addr string) (net.Conn, error) {
	c, err := net.DialTimeout(network, addr, 3*time.Second)
	if err != nil {
		return nil, err
	}
	return &delayedClose{Conn: c, cd: cd}, nil
}

type delayedClose struct {
	net.Conn
	cd   *closeDelayer
	mu   sync.Mutex
	held []byte // a connection.close frame not yet sent
}

// isConnectionClose reports whether b starts with a connection.close
// frame: a method frame (type 1) on channel 0 of class 10, method 50.
func isConnectionClose(b []byte) bool {
	return len(b) >= 11 && b[0] == 1 && b[1] == 0 && b[2] == 0 && b[7] == 0 && b[8] == 10 && b[9] == 0 && b[10] == 50
}

func (c *delayedClose) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if isConnectionClose(b) && c.cd.armed.CompareAndSwap(true, false) {
		c.held = append([]byte(nil), b...)
		if c.cd.onHold != nil {
			c.cd.onHold()
		}
		time.AfterFunc(closeDelay, c.sendHeld)
		return len(b), nil
	}
	n, err := c.Conn.Write(b)
	if c.held != nil {
		c.cd.overtook.Add(1)
		_, _ = c.Conn.Write(c.held)
		c.held = nil
	}
	return n, err
}

func (c *delayedClose) sendHeld() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held != nil {
		_, _ = c.Conn.Write(c.held)
		c.held = nil
	}
}

// TestFailedForwardAbandonsHeld: a forward fails (the DLQ was deleted)
// while another message is held, so the Consumer drops the connection.
// The held delivery comes due while the connection is being closed: it
// must be abandoned to RabbitMQ's requeue like on any drop, not forwarded,
// since a forward's publish may still reach RabbitMQ while its
// acknowledgement does not (closeDelayer lets exactly that happen), and
// the confirmed copy would then run as well as the requeued original: the
// effect applied twice.
func TestFailedForwardAbandonsHeld(t *testing.T) {
	const delay = 300 * time.Millisecond
	var (
		successes, successesAtClose atomic.Int32
		heldOnce                    sync.Once
	)
	isHeld, closing := make(chan struct{}), make(chan struct{})
	h := func(ctx context.Context, _ []byte) error {
		d, _ := retry.DeliveryFrom(ctx)
		switch {
		case d.ID == "doomed":
			return retry.Permanent(errors.New("to a DLQ that is gone"))
		case d.Attempt == 1:
			return retry.Retryable(errors.New("once"))
		}
		successes.Add(1) // the effect
		return nil
	}
	cd := &closeDelayer{onHold: func() { successesAtClose.Store(successes.Load()); close(closing) }}
	p := start(t, brokertest.Setup{Name: uniqueName(t), Handler: h, Tiers: brokertest.Tiers,
		Policy: &retry.Policy{MaxAttempts: 3, Schedule: backoff.Constant(delay)}},
		func(o *Options) {
			o.WaitInPlace = MaxWaitInPlace
			o.Dial = cd.dial
			o.afterHold = func() { heldOnce.Do(func() { close(isHeld) }) }
		})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Publish(ctx, "held", []byte("x")); err != nil {
		t.Fatal(err)
	}
	await(t, ctx, isHeld, "the retry was never held")
	ch, err := p.conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if _, err := ch.QueueDelete(p.topo.DLQ, false, false, false); err != nil {
		t.Fatal(err)
	}
	cd.armed.Store(true)
	if err := p.Publish(ctx, "doomed", []byte("x")); err != nil {
		t.Fatal(err)
	}
	await(t, ctx, closing, "the failed dead-letter forward did not drop the connection")
	if n := successesAtClose.Load(); n != 0 {
		t.Fatalf("the held retry ran before the connection was dropped (%d successes): the test exercised nothing; make its delay longer", n)
	}
	for successes.Load() == 0 {
		select {
		case <-ctx.Done():
			t.Fatal("the held message never succeeded after the reconnect")
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := p.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	if n := successes.Load(); n != 1 {
		t.Fatalf("the held message's effect was applied %d times, want once: it was forwarded while the connection was being dropped (%d frames written during the close)", n, cd.overtook.Load())
	}
}

// runToDeadLetter runs a new Consumer with opts, after a stop, until p's
// message is dead-lettered with maxAttempts attempts, and checks the log
// holds each of its attempts once (why explains the rule if it fails).
func runToDeadLetter(t *testing.T, ctx context.Context, opts *Options, p *pipeline, log *runLog, maxAttempts int, why string) {
	t.Helper()
	next, err := NewConsumer(*opts)
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- next.Run(rctx) }()
	defer func() {
		stop()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run = %v, want context.Canceled", err)
		}
	}()
	select {
	case d := <-p.dlq:
		if got := d.Headers[broker.HeaderAttempt]; got != fmt.Sprint(maxAttempts) {
			t.Errorf("dead letter %s = %v, want %d", broker.HeaderAttempt, got, maxAttempts)
		}
	case <-ctx.Done():
		t.Fatalf("no dead letter; attempts %v", log.attempts())
	}
	var want []int
	for a := range maxAttempts {
		want = append(want, a+1)
	}
	if got := log.attempts(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("attempts %v, want %v: each once, across the stop%s", got, want, why)
	}
}
