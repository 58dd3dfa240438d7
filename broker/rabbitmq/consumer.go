package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/internal/brokerwire"
	"github.com/staggerhq/stagger/internal/redact"
	"github.com/staggerhq/stagger/internal/wait"
	"github.com/staggerhq/stagger/retry"
)

// Defaults for zero Options fields, the largest Prefetch (the AMQP
// prefetch count is 16 bits) and the largest WaitInPlace (a longer hold
// stalls the prefetch window).
const (
	DefaultPrefetch    = 32    // Options.Prefetch
	DefaultConcurrency = 1     // Options.Concurrency
	MaxPrefetch        = 65535 // the largest Options.Prefetch

	DefaultWaitInPlace = 10 * time.Millisecond // Options.WaitInPlace
	MaxWaitInPlace     = time.Second           // the largest Options.WaitInPlace
)

// DefaultReconnect paces reconnection attempts after a connection drop.
var DefaultReconnect backoff.Schedule = backoff.Exponential{Base: 100 * time.Millisecond, Cap: 10 * time.Second, Jitter: backoff.Full}

// Options configure a Consumer.
type Options struct {
	// URL is the AMQP URL, amqp://user:pass@host:port/vhost. The password
	// never appears in logs or errors.
	URL string
	// Topology names the queues; the consumer declares it on every
	// (re)connect.
	Topology Topology
	// Handler runs once per delivery, with a retry.Delivery (Source
	// "rabbitmq", ID = the message's MessageId) in its context.
	Handler retry.Handler
	// Policy decides retries; nil means broker.CascadePolicy(Tiers): attempt
	// n waits tier n, dead-lettered after len(Tiers)+1 attempts.
	Policy *retry.Policy
	// Inbox, if set, wraps Handler keyed by MessageId so a redelivered
	// message whose effect was applied is acknowledged without running the
	// handler again. Messages without a MessageId bypass it.
	Inbox broker.Inbox
	// Trace, if set, runs each handler in the trace context the message
	// carries (broker.Processor.Trace); contrib/otel's Propagator is one.
	Trace retry.Propagator
	// Prefetch is the channel's QoS: unacknowledged deliveries at once
	// (0: DefaultPrefetch).
	Prefetch int
	// Concurrency is the number of handlers running at once (0:
	// DefaultConcurrency); at most Prefetch.
	Concurrency int
	// WaitInPlace: a retry due within WaitInPlace of its failure, and a
	// delivery back from a wait queue at most WaitInPlace before its due
	// time, is held by the Consumer instead of taking a round trip through
	// a wait queue (which takes longer than so short a wait): it stays
	// unacknowledged, keeping its prefetch slot, and a handler goroutine
	// handles it again when it is due (no goroutine sleeps), with the state
	// a wait queue's copy would carry (attempt count, previous delay, first
	// attempt, deadline). When Run's ctx ends, each held delivery is
	// forwarded to its wait queue (confirmed, then acknowledged) by a
	// handler goroutine: at once when one is free, else when a running
	// handler returns (its context has ended). So no attempt is lost or
	// repeated, unless that forward fails: the delivery is then left to
	// RabbitMQ's requeue, as on a drop. Held deliveries are forwarded so
	// too when the server cancels the consumer (its queue deleted) while
	// the connection stays up. Before the stop, a connection drop, a
	// closed channel or the failed forward of any delivery (the Consumer
	// drops the connection then) abandons them: RabbitMQ redelivers each
	// with the state of its headers, so the attempts made in place since
	// its last forward run again (a drop can repeat in-place attempts; it
	// loses nothing). 0 means DefaultWaitInPlace; negative sends every
	// retry through the wait queues. At most MaxWaitInPlace: a longer hold
	// stalls the prefetch window.
	WaitInPlace time.Duration
	// Dial opens the TCP connection; nil means net.DialTimeout with 30 s.
	Dial func(network, addr string) (net.Conn, error)
	// Reconnect paces reconnection after a drop (nil: DefaultReconnect).
	Reconnect backoff.Schedule
	// Logger receives connection events and forwarding failures (nil:
	// discarded).
	Logger *slog.Logger
	// Now is the clock for decisions and due times (nil: time.Now).
	Now func() time.Time

	// afterForward and afterSuccess, in tests, run after a forward was
	// confirmed, or after a handler success, and before the original is
	// acknowledged; afterHold after a delivery was held in place.
	afterForward, afterSuccess, afterHold func()
}

// Consumer consumes a Topology's main queue and retries failures through the
// wait queues, or holds a retry due within Options.WaitInPlace in place.
// Create it with NewConsumer and call Run.
type Consumer struct {
	opts Options
	proc *broker.Processor
	log  *slog.Logger
}

// NewConsumer validates opts and returns a Consumer.
func NewConsumer(opts Options) (*Consumer, error) {
	if _, err := amqp.ParseURI(opts.URL); err != nil {
		return nil, fmt.Errorf("%w: URL must be an amqp:// or amqps:// URL: %v", broker.ErrInvalid, redact.Error(err, opts.URL))
	}
	if err := opts.Topology.Validate(); err != nil {
		return nil, err
	}
	if opts.Handler == nil {
		return nil, fmt.Errorf("%w: Handler must not be nil", broker.ErrInvalid)
	}
	if opts.Prefetch == 0 {
		opts.Prefetch = DefaultPrefetch
	}
	if opts.Concurrency == 0 {
		opts.Concurrency = DefaultConcurrency
	}
	switch {
	case opts.Prefetch < 0 || opts.Prefetch > MaxPrefetch:
		return nil, fmt.Errorf("%w: Prefetch must be in [1, %d], got %d", broker.ErrInvalid, MaxPrefetch, opts.Prefetch)
	case opts.Concurrency < 0 || opts.Concurrency > opts.Prefetch:
		return nil, fmt.Errorf("%w: Concurrency must be in [1, Prefetch=%d], got %d", broker.ErrInvalid, opts.Prefetch, opts.Concurrency)
	case opts.WaitInPlace > MaxWaitInPlace:
		return nil, fmt.Errorf("%w: WaitInPlace must be at most MaxWaitInPlace (%v), got %v (negative sends every retry through the wait queues)", broker.ErrInvalid, MaxWaitInPlace, opts.WaitInPlace)
	}
	if opts.WaitInPlace == 0 {
		opts.WaitInPlace = DefaultWaitInPlace
	}
	if opts.Policy == nil {
		opts.Policy = broker.CascadePolicy(opts.Topology.Tiers)
	}
	if err := opts.Policy.Validate(); err != nil {
		return nil, err
	}
	if opts.Reconnect == nil {
		opts.Reconnect = DefaultReconnect
	}
	if err := backoff.Validate(opts.Reconnect); err != nil {
		return nil, fmt.Errorf("%w: Reconnect: %w", broker.ErrInvalid, err)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Consumer{
		opts: opts,
		log:  log,
		proc: &broker.Processor{Handler: opts.Handler, Policy: opts.Policy, Inbox: opts.Inbox, Source: "rabbitmq", Now: opts.Now, Trace: opts.Trace},
	}, nil
}

// Run consumes until ctx is done, reconnecting (paced by Options.Reconnect)
// whenever the connection or channel drops. Unacknowledged deliveries of a
// dropped connection are requeued by RabbitMQ and handled again after the
// reconnect: a drop can duplicate work, never lose it. A drop ends the
// context of the handlers still running (their deliveries are requeued
// already): Run reconnects once they return, so a handler must honour its
// context for the reconnect not to wait for it; deliveries held in place
// (Options.WaitInPlace) are abandoned to the requeue. On ctx's end Run
// stops taking deliveries, lets running handlers finish and acknowledge,
// forwards the held deliveries to their wait queues (one whose forward
// fails is left to the requeue), and returns ctx.Err(). It returns at
// once, with the error, when the topology exists with other arguments
// (RabbitMQ's PRECONDITION_FAILED, for example a wait queue declared with
// another TTL).
func (c *Consumer) Run(ctx context.Context) error {
	var (
		fails int
		prev  time.Duration
		w     wait.Waiter
	)
	defer w.Stop()
	for {
		connected, err := c.session(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var fatal fatalError
		if errors.As(err, &fatal) {
			return fatal.err
		}
		if connected {
			fails, prev = 0, 0
		}
		fails++
		prev = c.opts.Reconnect.Delay(fails, prev, nil)
		c.log.Warn("rabbitmq: connection lost, reconnecting", slog.Any("error", err), slog.Duration("in", prev), slog.Int("failures", fails))
		if err := w.Wait(ctx, nil, prev); err != nil {
			return err
		}
	}
}

// fatalError ends Run: retrying cannot help.
type fatalError struct{ err error }

func (f fatalError) Error() string { return f.err.Error() }

// session runs one connection until it drops or ctx ends. connected reports
// whether it got as far as consuming.
func (c *Consumer) session(ctx context.Context) (connected bool, err error) {
	var cc *corkConn
	conn, err := amqp.DialConfig(c.opts.URL, amqp.Config{
		Dial:       corkingDial(c.dial(), &cc),
		Heartbeat:  10 * time.Second,
		Properties: amqp.Table{"connection_name": "stagger-rabbitmq " + c.opts.Topology.Queue},
	})
	if err != nil {
		return false, fmt.Errorf("rabbitmq: dial: %w", redact.Error(err, c.opts.URL))
	}
	defer conn.Close()
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	ch, err := conn.Channel()
	if err != nil {
		return false, fmt.Errorf("rabbitmq: open channel: %w", err)
	}
	chClosed := ch.NotifyClose(make(chan *amqp.Error, 1))
	if err := c.opts.Topology.Declare(ch); err != nil {
		var aerr *amqp.Error
		if errors.As(err, &aerr) && aerr.Code == amqp.PreconditionFailed {
			// The queues exist with other arguments (a changed tier TTL):
			// reconnecting cannot fix it.
			return false, fatalError{err}
		}
		return false, err
	}
	if err := ch.Qos(c.opts.Prefetch, 0, false); err != nil {
		return false, fmt.Errorf("rabbitmq: qos: %w", err)
	}
	conf, err := newConfirmer(conn)
	if err != nil {
		return false, err
	}
	const tag = "stagger"
	deliveries, err := ch.Consume(c.opts.Topology.Queue, tag, false, false, false, false, nil)
	if err != nil {
		return false, fmt.Errorf("rabbitmq: consume %q: %w", c.opts.Topology.Queue, err)
	}
	c.log.Info("rabbitmq: consuming", slog.String("queue", c.opts.Topology.Queue))

	// hctx is the running handlers' context: it ends with ctx, and when
	// the connection is lost, since RabbitMQ has requeued their deliveries
	// then and a hung handler must not hold up the reconnect.
	hctx, lost := context.WithCancelCause(ctx)
	defer lost(nil)
	s := &session{conf: conf, failed: make(chan error, 1), ch: ch, acks: newAcker(ch, c.opts.Prefetch, cc), holds: c.newHolder(),
		fwds: make(chan forwarded, c.opts.Prefetch)}
	confirmsDone := make(chan struct{})
	go func() { defer close(confirmsDone); c.confirms(s) }()
	var wg sync.WaitGroup
	for range c.opts.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.work(hctx, s, deliveries)
		}()
	}
	// drained closes when every worker has returned: the delivery channel
	// was closed, by our Cancel, by the connection's end, or by the server
	// (a basic.cancel when the queue is deleted, or a channel exception)
	// while the connection stays up; and the held deliveries were released.
	drained := make(chan struct{})
	go func() { wg.Wait(); close(drained) }()
	// settle lets running handlers finish and forwards be confirmed and
	// acknowledged, unless the connection goes first.
	settle := func() {
		done := make(chan struct{})
		go func() { <-drained; s.pending.Wait(); s.flush(); close(done) }()
		select {
		case <-done:
		case <-closed:
		}
	}
	select {
	case <-ctx.Done():
		err = ctx.Err()
		_ = ch.Cancel(tag, false) // no new deliveries; running handlers finish
		settle()
	case e := <-closed:
		err = fmt.Errorf("rabbitmq: connection closed: %v", e)
		s.dropped.Store(true)
		lost(err)
	case e := <-s.failed:
		err = e // a forward failed: drop the connection so RabbitMQ requeues
		s.dropped.Store(true)
		lost(err)
	case <-drained:
		// The server ended the consumer, not the connection: reconnect and
		// declare the topology again.
		err = fmt.Errorf("rabbitmq: consumer of %q cancelled by the server", c.opts.Topology.Queue)
		select {
		case e := <-chClosed:
			if e != nil {
				err = fmt.Errorf("rabbitmq: channel closed: %v", e)
			}
		default:
		}
		settle()
	}
	conn.Close()
	wg.Wait()
	close(s.fwds) // the workers, who forward, are done
	s.pending.Wait()
	<-confirmsDone
	return true, err
}

// dial is Options.Dial, or the client library's default: a 30 s timeout
// (the URL's connection_timeout, when it has one) for the connection and
// the handshake.
func (c *Consumer) dial() func(network, addr string) (net.Conn, error) {
	if c.opts.Dial != nil {
		return c.opts.Dial
	}
	timeout := 30 * time.Second
	if u, err := amqp.ParseURI(c.opts.URL); err == nil && u.ConnectionTimeout > 0 {
		timeout = time.Duration(u.ConnectionTimeout) * time.Millisecond
	}
	return amqp.DefaultDial(timeout)
}

// newHolder is a session's holder: room for Prefetch held deliveries, or
// for none when holding is off (WaitInPlace negative), as ready's buffer
// takes 8 bytes a slot, 512 KB at MaxPrefetch.
func (c *Consumer) newHolder() *holder {
	if c.opts.WaitInPlace < 0 {
		return newHolder(0)
	}
	return newHolder(c.opts.Prefetch)
}

// session is one connection's forwarding state.
type session struct {
	conf    *confirmer
	pending sync.WaitGroup // forwards waiting for their confirm
	fwds    chan forwarded // to the confirm loop; Prefetch room, one per unacknowledged delivery
	failed  chan error
	ch      *amqp.Channel // the consuming channel
	acks    *acker        // ch's acks
	holds   *holder
	dropped atomic.Bool // the connection is lost, or is being dropped
}

// work is a handler goroutine of a session: it handles deliveries and the
// held deliveries that come due, until the delivery channel is closed; then
// it releases what is still held (release) and returns once nothing is.
func (c *Consumer) work(ctx context.Context, s *session, deliveries <-chan amqp.Delivery) {
	ready := s.holds.ready
	for {
		var (
			d       amqp.Delivery
			x       *held
			ok, isD bool
		)
		select {
		case d, ok = <-deliveries:
			isD = true
		case x, ok = <-ready:
		default:
			// Nothing to do: the acks that wait go out first.
			if err := s.acks.idle(); err != nil {
				s.fail(err)
			}
			select {
			case d, ok = <-deliveries:
				isD = true
			case x, ok = <-ready:
			}
		}
		if isD {
			if !ok {
				s.holds.close()
				for x := range s.holds.ready {
					c.release(ctx, s, x)
				}
				s.flush()
				return
			}
			if ctx.Err() != nil {
				continue // shutting down: left unacknowledged, requeued on close
			}
			if err := c.handle(ctx, s, &d); err != nil {
				s.fail(err)
			}
			continue
		}
		switch {
		case !ok:
			ready = nil // closed: the delivery channel is closed too
		case ctx.Err() != nil:
			c.release(ctx, s, x)
		default:
			if err := c.resume(ctx, s, x); err != nil {
				s.fail(err)
			}
		}
	}
}

// release hands on a held delivery whose session ends: forwarded to its
// wait queue (confirmed, then acknowledged) on a stop; abandoned when the
// connection is lost or being dropped, or the channel closed, as RabbitMQ
// requeues it then.
func (c *Consumer) release(ctx context.Context, s *session, x *held) {
	if s.dropped.Load() || s.ch.IsClosed() {
		return
	}
	if err := c.park(ctx, s, x.d, x.from, x.st); err != nil {
		s.fail(err)
	}
}

// flush sends the acks that wait (acker), once the consuming ends.
func (s *session) flush() {
	if err := s.acks.flush(); err != nil {
		s.fail(err)
	}
}

func (s *session) fail(err error) {
	select {
	case s.failed <- err:
	default:
	}
}

// withTrace is ctx with the delivery's trace context, when Options.Trace
// is set.
func (c *Consumer) withTrace(ctx context.Context, d *amqp.Delivery) context.Context {
	if c.proc.Trace == nil {
		return ctx
	}
	return c.proc.WithTrace(ctx, tableGet(d.Headers))
}

// handle processes one delivery. A success is acknowledged (coalesced by
// the channel's acker: its ack may wait for the next multiple ack). A
// retry due within WaitInPlace is held (hold). A forward (retry or dead
// letter) is published, and a goroutine acknowledges the original once
// RabbitMQ confirmed the copy, so the handler goroutine goes on with the
// next delivery meanwhile (prefetch bounds how many wait). An error means
// the delivery was neither acknowledged nor handed on; the session must end
// so that RabbitMQ requeues it.
func (c *Consumer) handle(ctx context.Context, s *session, d *amqp.Delivery) error {
	var o broker.Outcome
	st, from, err := readState(d)
	if err != nil {
		o = broker.Outcome{Action: broker.Dead, State: broker.State{Reason: broker.ReasonMalformed, Error: err.Error()}}
	} else {
		o = c.proc.Process(c.withTrace(ctx, d), d.MessageId, d.Body, st)
	}
	if broker.Interrupted(ctx, o) {
		// Shutting down, and the failure is the cancellation itself. Not
		// an attempt: requeue as it was.
		return s.acks.nack(d.DeliveryTag, true)
	}
	return c.apply(ctx, s, d, from, o, nil)
}

// resume handles a held delivery that came due, with the state it was held
// with.
func (c *Consumer) resume(ctx context.Context, s *session, x *held) error {
	o := c.proc.Process(c.withTrace(ctx, x.d), x.d.MessageId, x.d.Body, x.st)
	if broker.Interrupted(ctx, o) {
		// Not an attempt, but its headers lack the attempts made in place:
		// forwarded with the state it was held with, not requeued.
		c.release(ctx, s, x)
		return nil
	}
	return c.apply(ctx, s, x.d, x.from, o, x)
}

// apply carries out o for d: ack, hold, or forward to a wait queue or the
// DLQ. x is d's held record when d was held before, else nil.
func (c *Consumer) apply(ctx context.Context, s *session, d *amqp.Delivery, from route, o broker.Outcome, x *held) error {
	switch o.Action {
	case broker.Ack:
		if c.opts.afterSuccess != nil {
			c.opts.afterSuccess()
		}
		return s.acks.ack(d.DeliveryTag, true)
	case broker.Retry, broker.Park:
		if c.hold(s, d, from, o, x) {
			return nil
		}
		return c.send(ctx, s, d, from, c.opts.Topology.TierQueue(c.opts.Topology.Tiers.For(o.Delay)), o.State)
	}
	return c.send(ctx, s, d, from, c.opts.Topology.DLQ, o.State)
}

// hold holds d in place when o's wait is within WaitInPlace, until
// o.State.Due by the Consumer's clock. It reports false when d must be
// forwarded instead: the wait is longer, or the session is ending.
func (c *Consumer) hold(s *session, d *amqp.Delivery, from route, o broker.Outcome, x *held) bool {
	if o.Delay > c.opts.WaitInPlace {
		return false // also when WaitInPlace is negative
	}
	if x == nil {
		dc := *d // a copy: a handler goroutine's delivery stays on its stack
		x = &held{d: &dc, from: from}
	}
	x.st = o.State
	if !s.holds.hold(x, o.State.Due.Sub(c.now())) {
		return false
	}
	if c.opts.afterHold != nil {
		c.opts.afterHold()
	}
	return true
}

// park forwards d, held with state st, to the wait queue of the time left
// until st.Due.
func (c *Consumer) park(ctx context.Context, s *session, d *amqp.Delivery, from route, st broker.State) error {
	left := st.Due.Sub(c.now())
	return c.send(ctx, s, d, from, c.opts.Topology.TierQueue(c.opts.Topology.Tiers.For(left)), st)
}

func (c *Consumer) now() time.Time {
	if c.opts.Now != nil {
		return c.opts.Now()
	}
	return time.Now()
}

// send forwards d with state st to queue q, and hands it to the connection's
// confirm loop (confirms), which acknowledges it once RabbitMQ confirmed
// the copy. The publish and the confirm ignore ctx's end: a retry decided
// for an attempt that ran must be forwarded, or the attempt would run
// again, and a confirmed copy whose original is never acknowledged is a
// duplicate.
func (c *Consumer) send(ctx context.Context, s *session, d *amqp.Delivery, from route, q string, st broker.State) error {
	ctx = context.WithoutCancel(ctx)
	wait, done, err := c.forward(ctx, s.conf, d, from, q, st)
	if err != nil {
		return err
	}
	s.acks.forwarding(d.DeliveryTag)
	s.pending.Add(1)
	dc := *d // a copy: a handler goroutine's delivery stays on its stack
	s.fwds <- forwarded{ctx: ctx, d: &dc, from: from, q: q, st: st, wait: wait, done: done}
	return nil
}

// forwarded is a forward waiting for its confirm, and what a dead letter
// in its place needs, should it come back unroutable.
type forwarded struct {
	ctx  context.Context
	d    *amqp.Delivery
	from route
	q    string
	st   broker.State
	wait func(context.Context) error
	done <-chan struct{} // closed once wait does not block
}

// confirms is a connection's confirm loop: it takes the forwards in publish
// order, waits for each one's confirm and acknowledges its original. The
// forwards whose confirms have come by then (RabbitMQ confirms in batches,
// one multiple basic.ack for many) are acknowledged together: one multiple
// ack (acker.ackAll) for the run they free, where a goroutine per forward
// sent one each. It returns once s.fwds is closed and drained.
func (c *Consumer) confirms(s *session) {
	var (
		batch   []forwarded
		tags    []uint64
		next    forwarded // taken from s.fwds, its confirm not come yet, if hasNext
		hasNext bool
	)
	for {
		var f forwarded
		if hasNext {
			f, hasNext = next, false
		} else {
			var ok bool
			if f, ok = <-s.fwds; !ok {
				return
			}
		}
		<-f.done
		batch = append(batch[:0], f)
	more:
		for {
			select {
			case g, ok := <-s.fwds:
				if !ok {
					break more
				}
				select {
				case <-g.done:
					batch = append(batch, g)
				default:
					next, hasNext = g, true
					break more
				}
			default:
				break more
			}
		}
		tags = tags[:0]
		for _, f := range batch {
			err := f.wait(f.ctx)
			if errors.Is(err, ErrUnroutable) && f.q != c.opts.Topology.DLQ {
				go c.unroutable(s, f, err)
				continue
			}
			if err != nil {
				s.fail(err)
				s.pending.Done()
				continue
			}
			if c.opts.afterForward != nil {
				c.opts.afterForward()
			}
			tags = append(tags, f.d.DeliveryTag)
		}
		if len(tags) > 0 {
			if err := s.acks.ackAll(tags); err != nil {
				s.fail(err)
			}
			for range tags {
				s.pending.Done()
			}
		}
	}
}

// unroutable dead-letters f, returned unroutable (its wait queue is gone:
// the retry must not vanish), and acknowledges the original once the dead
// letter is confirmed.
func (c *Consumer) unroutable(s *session, f forwarded, err error) {
	defer s.pending.Done()
	c.log.Error("rabbitmq: retry unroutable, dead-lettering", slog.String("queue", f.q), slog.Any("error", err))
	st := f.st
	st.Due, st.Reason, st.Error = time.Time{}, "unroutable", brokerwire.ErrorText(err)
	wait, _, err := c.forward(f.ctx, s.conf, f.d, f.from, c.opts.Topology.DLQ, st)
	if err == nil {
		err = wait(f.ctx)
	}
	if err == nil && c.opts.afterForward != nil {
		c.opts.afterForward()
	}
	if err == nil {
		err = s.acks.ack(f.d.DeliveryTag, false)
	}
	if err != nil {
		s.fail(err)
	}
}

// forward publishes a copy of d with state st to queue q (through the
// default exchange, mandatory, in confirm mode) and returns the wait for
// its confirm and a channel closed once the wait would not block. from is
// where d was first delivered from: a wait queue's copy carries it in its
// compact state, a dead letter in HeaderExchange and HeaderRoutingKey and
// as its origin.
func (c *Consumer) forward(ctx context.Context, conf *confirmer, d *amqp.Delivery, from route, q string, st broker.State) (wait func(context.Context) error, done <-chan struct{}, err error) {
	tag := conf.nextTag()
	var h amqp.Table
	if q != c.opts.Topology.DLQ {
		h = waitHeaders(d.Headers, st, from, tag)
	} else {
		if st.Origin == "" {
			st.Origin = from.exchange + "/" + from.key
		}
		h = forwardHeaders(d.Headers, st)
		h[HeaderExchange], h[HeaderRoutingKey] = from.exchange, from.key
		h[headerPublishTag] = tag
	}
	return conf.send(ctx, "", q, republishing(d, h), tag)
}

// republishing is d's body and properties with headers h.
func republishing(d *amqp.Delivery, h amqp.Table) amqp.Publishing {
	return amqp.Publishing{
		Headers:         h,
		ContentType:     d.ContentType,
		ContentEncoding: d.ContentEncoding,
		DeliveryMode:    d.DeliveryMode,
		Priority:        d.Priority,
		CorrelationId:   d.CorrelationId,
		ReplyTo:         d.ReplyTo,
		MessageId:       d.MessageId,
		Timestamp:       d.Timestamp,
		Type:            d.Type,
		AppId:           d.AppId,
		Body:            d.Body,
	}
}
