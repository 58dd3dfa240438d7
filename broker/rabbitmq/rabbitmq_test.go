package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/broker/brokertest"
	"github.com/staggerhq/stagger/internal/redact"
	"github.com/staggerhq/stagger/internal/wait"
	"github.com/staggerhq/stagger/retry"
)

func amqpURL() string {
	if u := os.Getenv("STAGGER_AMQP_URL"); u != "" {
		return u
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}

// dial connects to the test RabbitMQ, skipping (failing under CI=true)
// when it is unreachable.
func dial(t testing.TB) *amqp.Connection {
	t.Helper()
	conn, err := amqp.DialConfig(amqpURL(), amqp.Config{Dial: amqp.DefaultDial(3 * time.Second)})
	if err != nil {
		unavailable(t, fmt.Sprintf("RabbitMQ unreachable at STAGGER_AMQP_URL (default amqp://guest:***@127.0.0.1:5672/): %v", redact.Error(err, amqpURL())))
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// unavailable skips the test for a missing service or tool, and fails it
// under CI=true, where CI provides them.
func unavailable(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// await fails t with msg unless ch is closed (or sent on) before ctx ends.
func await(t *testing.T, ctx context.Context, ch <-chan struct{}, msg string) {
	t.Helper()
	select {
	case <-ch:
	case <-ctx.Done():
		t.Fatal(msg)
	}
}

// tcpTracker remembers the consumer's TCP connections so a test can drop
// them, as a network failure or a broker restart would.
type tcpTracker struct {
	mu    sync.Mutex
	conns []net.Conn
	drops atomic.Int32
}

func (tr *tcpTracker) dial(network, addr string) (net.Conn, error) {
	c, err := net.DialTimeout(network, addr, 3*time.Second)
	if err == nil {
		tr.mu.Lock()
		tr.conns = append(tr.conns, c)
		tr.mu.Unlock()
	}
	return c, err
}

func (tr *tcpTracker) drop() {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, c := range tr.conns {
		c.Close()
	}
	tr.conns = nil
	tr.drops.Add(1)
}

// pipeline is the brokertest.Pipeline of a RabbitMQ consumer.
type pipeline struct {
	pub  *Publisher
	dlq  <-chan amqp.Delivery
	topo Topology
	tcp  *tcpTracker
	conn *amqp.Connection

	stopDLQ func() // stops reading (and so removing) dead letters

	mu   sync.Mutex
	stop func() error // stops the running consumer; nil when stopped
	run  func()       // starts it (again)
}

// halt stops the consumer, if it runs, and waits for Run to return: its
// handlers finished, their forwards confirmed and originals acknowledged,
// and RabbitMQ requeued what was prefetched.
func (p *pipeline) halt() error {
	p.mu.Lock()
	stop := p.stop
	p.stop = nil
	p.mu.Unlock()
	if stop == nil {
		return nil
	}
	return stop()
}

// Settle stops the consumer and counts the messages left in the main and
// wait queues; while there are some, it runs the consumer again for a
// while. It returns with the consumer stopped and every queue but the DLQ
// empty: AMQP does not report unacknowledged deliveries of a running
// consumer, so only a stopped one proves none is left.
func (p *pipeline) Settle(ctx context.Context) error {
	var w wait.Waiter
	defer w.Stop()
	ch, err := p.conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	queues := []string{p.topo.Queue}
	for i := range p.topo.Tiers {
		queues = append(queues, p.topo.TierQueue(i))
	}
	for {
		if err := p.halt(); err != nil {
			return err
		}
		left, where := 0, ""
		for _, q := range queues {
			qi, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
			if err != nil {
				return err
			}
			if qi.Messages > 0 {
				left += qi.Messages
				where += fmt.Sprintf(" %s:%d", q, qi.Messages)
			}
		}
		if left == 0 {
			return nil
		}
		p.run()
		if err := w.Wait(ctx, nil, 100*time.Millisecond); err != nil {
			return fmt.Errorf("%d messages left in%s: %w", left, where, err)
		}
	}
}

func (p *pipeline) Publish(ctx context.Context, id string, payload []byte) error {
	return p.pub.Publish(ctx, id, payload)
}

func (p *pipeline) NextDeadLetter(ctx context.Context) (broker.DeadLetter, error) {
	select {
	case d, ok := <-p.dlq:
		if !ok {
			return broker.DeadLetter{}, errors.New("DLQ consumer closed")
		}
		return ParseDeadLetter(d)
	case <-ctx.Done():
		return broker.DeadLetter{}, ctx.Err()
	}
}

// start declares s's topology, starts a consumer on it and returns the
// pipeline; everything is torn down when the test ends.
func start(t *testing.T, s brokertest.Setup, tweak func(*Options)) *pipeline {
	t.Helper()
	conn := dial(t)
	topo := NewTopology(s.Name, s.Tiers)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := topo.Declare(ch); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ch, err := conn.Channel()
		if err == nil {
			err = topo.Delete(ch)
		}
		if err != nil {
			t.Errorf("tear down: %v", err)
		}
	})
	pub, err := NewPublisher(conn, topo)
	if err != nil {
		t.Fatal(err)
	}
	tcp := &tcpTracker{}
	opts := Options{
		URL: amqpURL(), Topology: topo, Handler: s.Handler, Policy: s.Policy, Inbox: s.Inbox, Trace: s.Trace,
		Dial: tcp.dial, Reconnect: backoff.Constant(50 * time.Millisecond),
	}
	var once sync.Once
	if s.Crash {
		opts.afterForward = func() { once.Do(tcp.drop) } // forwarded and confirmed, not acked
	}
	if s.Crash {
		opts.afterHold = func() { once.Do(tcp.drop) } // held in place, not forwarded
	}
	if s.CrashAfterSuccess {
		opts.afterSuccess = func() { once.Do(tcp.drop) } // effect applied, not acked
	}
	if tweak != nil {
		tweak(&opts)
	}
	cons, err := NewConsumer(opts)
	if err != nil {
		t.Fatal(err)
	}
	p := &pipeline{pub: pub, topo: topo, tcp: tcp, conn: conn}
	p.run = func() {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- cons.Run(ctx) }()
		p.mu.Lock()
		p.stop = func() error {
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				return fmt.Errorf("Run returned %v, want context.Canceled", err)
			}
			return nil
		}
		p.mu.Unlock()
	}
	p.run()
	t.Cleanup(func() {
		if err := p.halt(); err != nil {
			t.Error(err)
		}
	})
	dch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	dlq, err := dch.Consume(topo.DLQ, "dlq-reader", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	p.dlq = dlq
	p.stopDLQ = func() {
		if err := dch.Cancel("dlq-reader", false); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// TestConformance runs the suite with the default WaitInPlace, shorter
// than the suite's delays: every retry goes through a wait queue.
func TestConformance(t *testing.T) {
	brokertest.Run(t, func(t *testing.T, s brokertest.Setup) brokertest.Pipeline {
		return start(t, s, nil)
	})
}

// TestConformanceWaitQueues runs the suite with holding in place turned
// off (WaitInPlace negative).
func TestConformanceWaitQueues(t *testing.T) {
	brokertest.Run(t, func(t *testing.T, s brokertest.Setup) brokertest.Pipeline {
		return start(t, s, func(o *Options) { o.WaitInPlace = -1 })
	})
}

// TestConformanceHeldInPlace runs the suite with WaitInPlace at its
// largest, longer than every delay of the suite: every retry is held in
// place, and the suite's crash between forward and acknowledgement is a
// connection drop while the retry is held.
func TestConformanceHeldInPlace(t *testing.T) {
	if brokertest.Tiers[len(brokertest.Tiers)-1] > MaxWaitInPlace {
		t.Fatalf("the suite's longest delay %v exceeds MaxWaitInPlace %v: this variant would not hold every retry", brokertest.Tiers[len(brokertest.Tiers)-1], MaxWaitInPlace)
	}
	brokertest.Run(t, func(t *testing.T, s brokertest.Setup) brokertest.Pipeline {
		return start(t, s, func(o *Options) { o.WaitInPlace = MaxWaitInPlace })
	})
}

func uniqueName(t *testing.T) string {
	return fmt.Sprintf("stg-%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), time.Now().UnixNano()%1e9)
}

// TestReconnectLosesNothing drops the consumer's TCP connection while
// deliveries are unacknowledged (one in a running handler, others
// prefetched) and requires every message to be handled successfully
// afterwards.
func TestReconnectLosesNothing(t *testing.T) {
	testDropLosesNothing(t, func(t *testing.T, p *pipeline) { p.tcp.drop() })
}

// TestServerClosedConnectionLosesNothing has RabbitMQ itself close the
// consumer's connection (rabbitmqctl close_connection, CONNECTION_FORCED),
// as an operator or a node shutdown would.
func TestServerClosedConnectionLosesNothing(t *testing.T) {
	ctl, err := exec.LookPath("rabbitmqctl")
	if err != nil {
		unavailable(t, "rabbitmqctl not installed: the server-side close needs it (TestReconnectLosesNothing covers the client-side drop)")
	}
	testDropLosesNothing(t, func(t *testing.T, p *pipeline) {
		name := "stagger-rabbitmq " + p.topo.Queue
		out, err := exec.Command(ctl, "-q", "list_connections", "pid", "client_properties").CombinedOutput()
		if err != nil {
			unavailable(t, fmt.Sprintf("rabbitmqctl cannot reach the broker (%v): %s", err, out))
		}
		var pids []string
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, `"`+name+`"`) {
				pids = append(pids, strings.Fields(line)[0])
			}
		}
		if len(pids) != 1 {
			t.Fatalf("want exactly one connection named %q, found %d in:\n%s", name, len(pids), out)
		}
		if out, err := exec.Command(ctl, "-q", "close_connection", pids[0], "stagger test: server-side close").CombinedOutput(); err != nil {
			t.Fatalf("close_connection: %v: %s", err, out)
		}
	})
}

func testDropLosesNothing(t *testing.T, drop func(*testing.T, *pipeline)) {
	const n = 20
	var (
		mu    sync.Mutex
		ok    = map[string]int{}
		block = make(chan struct{})
		inH   = make(chan struct{})
		once  sync.Once
	)
	h := func(ctx context.Context, payload []byte) error {
		d, _ := retry.DeliveryFrom(ctx)
		if d.ID == "m5" {
			once.Do(func() { close(inH); <-block }) // first delivery of m5 waits for the drop
		}
		mu.Lock()
		ok[d.ID]++
		mu.Unlock()
		return nil
	}
	p := start(t, brokertest.Setup{Name: uniqueName(t), Handler: h, Tiers: brokertest.Tiers}, func(o *Options) { o.Prefetch = 8 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range n {
		if err := p.Publish(ctx, fmt.Sprintf("m%d", i), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	await(t, ctx, inH, "m5 never reached the handler")
	drop(t, p) // m5 is in the handler, m6.. are prefetched: all unacknowledged
	close(block)
	for {
		mu.Lock()
		missing := []string{}
		for i := range n {
			if ok[fmt.Sprintf("m%d", i)] == 0 {
				missing = append(missing, fmt.Sprintf("m%d", i))
			}
		}
		m5 := ok["m5"]
		mu.Unlock()
		if len(missing) == 0 && m5 >= 2 {
			break // m5 ran twice: its ack was lost with the connection, so it was redelivered
		}
		select {
		case <-ctx.Done():
			t.Fatalf("after a connection drop: missing %v, m5 handled %d times (want >= 2)", missing, m5)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestUnroutableRetryIsDeadLettered deletes a wait queue under a running
// consumer: the retry's publish is returned (mandatory), and the message
// goes to the DLQ instead of vanishing.
func TestUnroutableRetryIsDeadLettered(t *testing.T) {
	okSeen := make(chan struct{}, 1)
	h := func(ctx context.Context, payload []byte) error {
		if string(payload) == "ok" {
			okSeen <- struct{}{}
			return nil
		}
		return retry.Retryable(errors.New("try later"))
	}
	p := start(t, brokertest.Setup{Name: uniqueName(t), Handler: h, Tiers: brokertest.Tiers}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Publish(ctx, "warm", []byte("ok")); err != nil {
		t.Fatal(err)
	}
	<-okSeen // the consumer is up and has declared its topology
	ch, err := dial(t).Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDelete(p.topo.TierQueue(0), false, false, false); err != nil {
		t.Fatal(err)
	}
	if err := p.Publish(ctx, "lost?", []byte("fail")); err != nil {
		t.Fatal(err)
	}
	dl, err := p.NextDeadLetter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if dl.ID != "lost?" || dl.Reason != "unroutable" || dl.Attempts != 1 || !strings.Contains(dl.Error, "unroutable") {
		t.Fatalf("dead letter %+v, want lost? with reason unroutable after 1 attempt", dl)
	}
}

// TestOwnAttemptHeader checks that forwarded copies count attempts in our
// header and drop x-death, and that the original destination is kept.
func TestOwnAttemptHeader(t *testing.T) {
	h := func(ctx context.Context, _ []byte) error { return retry.Retryable(errors.New("no")) }
	p := start(t, brokertest.Setup{Name: uniqueName(t), Handler: h, Tiers: brokertest.Tiers,
		Policy: &retry.Policy{MaxAttempts: 3, Schedule: backoff.Constant(time.Millisecond)}}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Publish(ctx, "x", []byte("x")); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-p.dlq:
		if _, ok := d.Headers["x-death"]; ok {
			t.Error("dead letter carries x-death; the attempt count must be our own")
		}
		if d.Headers[broker.HeaderAttempt] != "3" || d.Headers[HeaderExchange] != p.topo.Exchange || d.Headers[HeaderRoutingKey] != p.topo.RoutingKey {
			t.Errorf("headers %v", d.Headers)
		}
		if d.Headers[broker.HeaderReason] != "exhausted" {
			t.Errorf("reason %v", d.Headers[broker.HeaderReason])
		}
	case <-ctx.Done():
		t.Fatal("no dead letter")
	}
}

func TestBadOptions(t *testing.T) {
	h := func(context.Context, []byte) error { return nil }
	good := Options{URL: "amqp://guest:guest@127.0.0.1:5672/", Topology: NewTopology("q", nil), Handler: h}
	for _, c := range []struct {
		name string
		mod  func(*Options)
		want string
	}{
		{"url", func(o *Options) { o.URL = "http://u:s3cret@host/" }, "URL must be"},
		{"url-port", func(o *Options) { o.URL = "amqp://u:s3cret@host:port/" }, "URL must be"},
		{"handler", func(o *Options) { o.Handler = nil }, "Handler must not be nil"},
		{"prefetch", func(o *Options) { o.Prefetch = -1 }, "Prefetch must be in"},
		{"prefetch-big", func(o *Options) { o.Prefetch = 70000 }, "Prefetch must be in"},
		{"concurrency", func(o *Options) { o.Prefetch, o.Concurrency = 2, 3 }, "Concurrency must be in"},
		{"tiers", func(o *Options) { o.Topology.Tiers = broker.Tiers{time.Second, time.Second} }, "Tiers must increase"},
		{"queue", func(o *Options) { o.Topology.Queue = "" }, "Topology.Queue must be"},
		{"reserved", func(o *Options) { o.Topology.DLQ = "amq.x" }, "reserved prefix"},
		{"dlq-is-queue", func(o *Options) { o.Topology.DLQ = o.Topology.Queue }, "Topology.DLQ must differ from Topology.Queue"},
		{"dlq-is-wait-queue", func(o *Options) { o.Topology.DLQ = o.Topology.TierQueue(1) }, "Topology.DLQ must differ from the wait queue of Tiers[1]"},
		{"policy", func(o *Options) { o.Policy = &retry.Policy{MaxAttempts: -1} }, "MaxAttempts must be"},
		{"reconnect", func(o *Options) { o.Reconnect = backoff.Constant(-time.Second) }, "Reconnect: backoff: invalid"},
		{"wait-in-place", func(o *Options) { o.WaitInPlace = MaxWaitInPlace + time.Millisecond }, "WaitInPlace must be at most MaxWaitInPlace (1s), got 1.001s"},
	} {
		o := good
		c.mod(&o)
		_, err := NewConsumer(o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: error leaks the password: %v", c.name, err)
		}
	}
	o := good
	o.WaitInPlace = 2 * time.Second
	if _, err := NewConsumer(o); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("WaitInPlace 2s: err = %v, want broker.ErrInvalid", err)
	}
	for _, w := range []time.Duration{0, -1, MaxWaitInPlace} {
		o := good
		o.WaitInPlace = w
		if _, err := NewConsumer(o); err != nil {
			t.Fatalf("good options with WaitInPlace %v: %v", w, err)
		}
	}
}

// TestLongDelayReparked asks for a wait longer than the longest tier: the
// message bounces through the last wait queue until it is due, without
// running the handler early.
func TestLongDelayReparked(t *testing.T) {
	var (
		mu    sync.Mutex
		calls []time.Time
		ok    = make(chan struct{})
	)
	const wait = 1500 * time.Millisecond // > the longest tier, 800 ms
	h := func(ctx context.Context, _ []byte) error {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, time.Now())
		if len(calls) == 1 {
			return retry.After(errors.New("come back later"), wait)
		}
		close(ok)
		return nil
	}
	p := start(t, brokertest.Setup{Name: uniqueName(t), Handler: h, Tiers: brokertest.Tiers,
		Policy: &retry.Policy{MaxAttempts: 2, Schedule: backoff.Constant(time.Millisecond), MaxAfter: time.Minute}}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Publish(ctx, "later", []byte("x")); err != nil {
		t.Fatal(err)
	}
	await(t, ctx, ok, "never retried")
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 2 {
		t.Fatalf("handler ran %d times, want 2 (bounces through the wait queue are not attempts)", len(calls))
	}
	if gap := calls[1].Sub(calls[0]); gap < wait {
		t.Fatalf("retried after %v, before the requested %v", gap, wait)
	}
}

// TestMismatchedQueueRefused: a main queue that exists with other
// arguments makes Run fail at once with RabbitMQ's PRECONDITION_FAILED,
// instead of reconnecting forever.
func TestMismatchedQueueRefused(t *testing.T) {
	conn := dial(t)
	topo := NewTopology(uniqueName(t), brokertest.Tiers)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(topo.Queue, true, false, false, false, amqp.Table{"x-max-length": int64(10)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if ch, err := conn.Channel(); err == nil {
			_ = topo.Delete(ch)
		}
	})
	c, err := NewConsumer(Options{URL: amqpURL(), Topology: topo, Handler: func(context.Context, []byte) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = c.Run(ctx)
	var aerr *amqp.Error
	if !errors.As(err, &aerr) || aerr.Code != amqp.PreconditionFailed || !strings.Contains(err.Error(), topo.Queue) {
		t.Fatalf("Run = %v, want PRECONDITION_FAILED naming queue %q", err, topo.Queue)
	}
}

// TestConsumerCancelledByServerReconnects deletes the main queue under a
// running consumer: RabbitMQ cancels the consumer (basic.cancel) and closes
// its delivery channel while the connection stays up. The consumer must
// reconnect, declare its topology again and go on consuming.
func TestConsumerCancelledByServerReconnects(t *testing.T) {
	seen := make(chan string, 4)
	h := func(ctx context.Context, _ []byte) error {
		d, _ := retry.DeliveryFrom(ctx)
		seen <- d.ID
		return nil
	}
	p := start(t, brokertest.Setup{Name: uniqueName(t), Handler: h, Tiers: brokertest.Tiers}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waitID := func(id string) {
		t.Helper()
		for {
			select {
			case got := <-seen:
				if got == id {
					return
				}
			case <-ctx.Done():
				t.Fatalf("%s never reached the handler", id)
			}
		}
	}
	if err := p.Publish(ctx, "before", []byte("x")); err != nil {
		t.Fatal(err)
	}
	waitID("before")
	ch, err := dial(t).Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDelete(p.topo.Queue, false, false, false); err != nil {
		t.Fatal(err)
	}
	// The publisher's mandatory publish fails until the consumer has
	// declared the queue again.
	for {
		err := p.Publish(ctx, "after", []byte("x"))
		if err == nil {
			break
		}
		if !errors.Is(err, ErrUnroutable) {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the consumer never declared its queue again after the server cancelled it: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	waitID("after")
}

// TestMalformedHeaderDeadLettered: a message whose stagger headers do not
// parse (a foreign producer's) goes to the DLQ with reason malformed, and
// the dead letter itself parses: the bad header is not copied onto it.
func TestMalformedHeaderDeadLettered(t *testing.T) {
	ran := make(chan struct{}, 1)
	h := func(context.Context, []byte) error { ran <- struct{}{}; return nil }
	p := start(t, brokertest.Setup{Name: uniqueName(t), Handler: h, Tiers: brokertest.Tiers}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wait, err := p.pub.c.publish(ctx, p.topo.Exchange, p.topo.RoutingKey, amqp.Publishing{
		MessageId: "bad", Body: []byte("x"),
		Headers: amqp.Table{broker.HeaderAttempt: "two", broker.HeaderDelay: strings.Repeat("9", 4096)},
	})
	if err == nil {
		err = wait(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	dl, err := p.NextDeadLetter(ctx)
	if err != nil {
		t.Fatalf("the dead letter does not parse: %v", err)
	}
	if dl.ID != "bad" || dl.Reason != broker.ReasonMalformed || !strings.Contains(dl.Error, broker.HeaderAttempt) || len(dl.Error) > 300 {
		t.Fatalf("dead letter %+v, want bad with reason malformed naming %s", dl, broker.HeaderAttempt)
	}
	select {
	case <-ran:
		t.Fatal("the handler ran on a message with malformed headers")
	default:
	}
}

// TestAbandonedPublishesLeaveNothingBehind: a publish whose wait gives up
// before its confirm (ctx ended) and whose message RabbitMQ returns
// (unroutable) must not leave the return in the confirmer for ever; nor
// may an abandoned routable publish leave its tag. Routed and returned
// publishes waited for as usual are reported as before.
func TestAbandonedPublishesLeaveNothingBehind(t *testing.T) {
	conn := dial(t)
	conf, err := newConfirmer(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer conf.ch.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gone, stop := context.WithCancel(ctx)
	stop()
	abandoned := 0
	for range 40 {
		// The default exchange has no such queue: the message is returned.
		wait, err := conf.publish(ctx, "", "stg-nowhere", amqp.Publishing{Body: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		if err := wait(gone); errors.Is(err, context.Canceled) {
			abandoned++
		}
	}
	if abandoned == 0 {
		t.Fatal("no wait gave up before its confirm: the test exercised nothing")
	}
	// A routable publish waited for: confirms come in publish order, so
	// its drain settles every abandoned one.
	q, err := conf.ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	wait, err := conf.publish(ctx, "", q.Name, amqp.Publishing{Body: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	if err := wait(ctx); err != nil {
		t.Fatalf("routable publish: %v", err)
	}
	wait, err = conf.publish(ctx, "", "stg-nowhere", amqp.Publishing{Body: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	if err := wait(ctx); !errors.Is(err, ErrUnroutable) {
		t.Fatalf("unroutable publish waited for: %v, want ErrUnroutable", err)
	}
	conf.rmu.Lock()
	defer conf.rmu.Unlock()
	if len(conf.returned) != 0 || len(conf.abandoned) != 0 {
		t.Fatalf("after %d abandoned publishes: %d returns and %d abandoned tags kept", abandoned, len(conf.returned), len(conf.abandoned))
	}
}

// TestConfirmWaitAfterClose: a confirm wait that ends after its channel
// closed — a connection drop while a forward waits for its confirm — must
// return. The client closes the returns channel then, and draining it
// read zero Returns for ever, holding the lock every wait takes: the
// session's teardown waited on that forward, so the Consumer never
// reconnected.
func TestConfirmWaitAfterClose(t *testing.T) {
	conn := dial(t)
	conf, err := newConfirmer(conn)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q, err := conf.ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var waits []func(context.Context) error
	for range 2 {
		wait, err := conf.publish(ctx, "", q.Name, amqp.Publishing{Body: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		waits = append(waits, wait)
	}
	if err := waits[0](ctx); err != nil {
		t.Fatalf("confirm before the close: %v", err)
	}
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- waits[1](ctx) }() // confirmed or not before the close
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a confirm wait after the channel closed never returned")
	}
}
