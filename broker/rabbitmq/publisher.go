package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/retry"
)

// ErrUnroutable is returned when RabbitMQ returned a mandatory publish: no
// queue was bound to take it (a wait queue or the DLQ was deleted).
var ErrUnroutable = errors.New("rabbitmq: message unroutable")

// ErrNacked is returned when RabbitMQ refused a publish (basic.nack).
var ErrNacked = errors.New("rabbitmq: publish not confirmed (nack)")

// headerPublishTag marks each publish of a confirmer so that a basic.return
// is matched to its publish while several are in flight.
const headerPublishTag = "x-stagger-publish-tag"

// returnsBuffer holds basic.returns until a confirm wait reads them. The
// client library gives up on a full buffer after 5 s, so it must not fill:
// every returned publish is also confirmed, and each confirm wait drains it.
const returnsBuffer = 1024

// confirmer publishes on a channel in confirm mode and reports, for each
// publish, whether RabbitMQ took responsibility for it: confirmed and not
// returned. Publishes are pipelined: publish returns at once with a wait
// function, so a handler goroutine need not sit out the broker's fsync.
type confirmer struct {
	mu       sync.Mutex // publish order = delivery tag order
	ch       *amqp.Channel
	seq      atomic.Uint64 // the last publish tag
	rmu      sync.Mutex
	returns  chan amqp.Return
	returned map[string]amqp.Return
	// abandoned are publishes whose wait gave up before their confirm
	// (ctx ended): a return that comes for one later is dropped instead of
	// kept for a waiter that will never read it.
	abandoned map[string]*amqp.DeferredConfirmation
}

func newConfirmer(conn *amqp.Connection) (*confirmer, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: open channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		ch.Close()
		return nil, fmt.Errorf("rabbitmq: confirm mode: %w", err)
	}
	return &confirmer{
		ch:        ch,
		returns:   ch.NotifyReturn(make(chan amqp.Return, returnsBuffer)),
		returned:  map[string]amqp.Return{},
		abandoned: map[string]*amqp.DeferredConfirmation{},
	}, nil
}

// publish sends msg mandatory and returns a function that waits for its
// confirm: nil when RabbitMQ confirmed and routed it, ErrNacked or
// ErrUnroutable (wrapped) otherwise. msg.Headers is not modified.
func (c *confirmer) publish(ctx context.Context, exchange, key string, msg amqp.Publishing) (wait func(context.Context) error, err error) {
	h := make(amqp.Table, len(msg.Headers)+1)
	for k, v := range msg.Headers {
		h[k] = v
	}
	tag := c.nextTag()
	h[headerPublishTag] = tag
	msg.Headers = h
	wait, _, err = c.send(ctx, exchange, key, msg, tag)
	return wait, err
}

// nextTag is a new publish tag: unique among the confirmer's publishes.
func (c *confirmer) nextTag() string {
	return strconv.FormatUint(c.seq.Add(1), 10)
}

// send is publish for a message whose headers already carry tag (from
// nextTag), in headerPublishTag or in its compact state (returnTag reads
// both), and that the confirmer may keep. done is closed once wait would
// not block: the confirm came, or the channel closed.
func (c *confirmer) send(ctx context.Context, exchange, key string, msg amqp.Publishing, tag string) (wait func(context.Context) error, done <-chan struct{}, err error) {
	c.mu.Lock()
	dc, err := c.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, true, false, msg)
	c.mu.Unlock()
	if err != nil {
		return nil, nil, fmt.Errorf("rabbitmq: publish to %q/%q: %w", exchange, key, err)
	}
	return func(ctx context.Context) error {
		ok, err := dc.WaitContext(ctx)
		if err != nil {
			c.abandon(tag, dc)
			return fmt.Errorf("rabbitmq: wait for confirm of %q/%q: %w", exchange, key, err)
		}
		if !ok {
			c.abandon(tag, dc)
			return fmt.Errorf("%w: %q/%q", ErrNacked, exchange, key)
		}
		// RabbitMQ sends a publish's basic.return before its basic.ack, and
		// the client hands returns over before it resolves confirms: a
		// return for this publish is in the buffer or the map by now.
		c.rmu.Lock()
		defer c.rmu.Unlock()
		c.drainLocked()
		if r, ok := c.returned[tag]; ok {
			delete(c.returned, tag)
			return fmt.Errorf("%w: exchange %q routing key %q: %d %s", ErrUnroutable, exchange, key, r.ReplyCode, r.ReplyText)
		}
		return nil
	}, dc.Done(), nil
}

// drainLocked moves the returns the client has handed over into the map,
// dropping those of abandoned publishes, until none is buffered or the
// channel closed. An abandoned publish whose confirm had arrived before
// the drain began can get no return any more (its return, if any, came
// first and was just drained): it is forgotten, so neither map grows with
// publishes nobody waits for.
func (c *confirmer) drainLocked() {
	var settled []string
	for t, dc := range c.abandoned {
		select {
		case <-dc.Done():
			settled = append(settled, t)
		default:
		}
	}
	for drained := false; !drained; {
		select {
		case r, open := <-c.returns:
			if !open {
				// The channel closed (the client closes its returns
				// channel then): no return will come any more.
				c.returns, drained = nil, true
				continue
			}
			t, ok := returnTag(r.Headers)
			if !ok {
				continue
			}
			if _, gone := c.abandoned[t]; gone {
				delete(c.abandoned, t)
				continue
			}
			c.returned[t] = r
		default:
			drained = true
		}
	}
	for _, t := range settled {
		delete(c.abandoned, t)
	}
}

// abandon records that nobody will wait for tag's outcome any more.
func (c *confirmer) abandon(tag string, dc *amqp.DeferredConfirmation) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	settled := false // confirmed before the drain: its return, if any, is drained now
	select {
	case <-dc.Done():
		settled = true
	default:
	}
	c.drainLocked()
	if _, ok := c.returned[tag]; ok {
		delete(c.returned, tag)
		return
	}
	if !settled {
		c.abandoned[tag] = dc
	}
}

// Publisher publishes original messages to a Topology's exchange, with
// mandatory and publisher confirms: Publish returns nil only when RabbitMQ
// has routed and confirmed the message. Safe for concurrent use.
type Publisher struct {
	c     *confirmer
	topo  Topology
	trace retry.Propagator
}

// NewPublisher opens a confirm-mode channel on conn for topo.
func NewPublisher(conn *amqp.Connection, topo Topology) (*Publisher, error) {
	if err := topo.Validate(); err != nil {
		return nil, err
	}
	c, err := newConfirmer(conn)
	if err != nil {
		return nil, err
	}
	return &Publisher{c: c, topo: topo}, nil
}

// WithTrace returns a publisher on p's channel whose messages carry the
// trace context of the publishing code (traceparent, tracestate) through
// t, as broker.StartPublish writes it: when t is a broker.PublishTracer
// (contrib/otel's Tracer.Broker) each Publish records a producer span,
// from the publish to the broker's confirm, and the message carries that
// span's context, so the consumer's spans (Options.Trace set to the same
// t) are its children. nil turns tracing off. The two publishers share
// the channel: Close either once.
func (p *Publisher) WithTrace(t retry.Propagator) *Publisher {
	c := *p
	c.trace = t
	return &c
}

// Publish sends body as a persistent message with MessageId id (the key an
// inbox deduplicates on) and waits for the confirm. When ctx carries work
// ([retry.DeliveryFrom]: a handler handing its work on), the message
// carries its ledger in the state headers (broker.EncodeLedger): the
// consumer counts on from the attempts made, within the attempts and the
// deadline that are left. With a trace (WithTrace) it carries the trace
// context too, and the publish is a producer span.
func (p *Publisher) Publish(ctx context.Context, id string, body []byte) error {
	msg := amqp.Publishing{
		MessageId:    id,
		DeliveryMode: amqp.Persistent,
		Body:         body,
	}
	var h amqp.Table
	end := broker.StartPublish(ctx, p.trace, broker.PublishInfo{System: "rabbitmq", Destination: p.topo.Exchange, ID: id, Size: len(body)},
		func(k, v string) {
			if h == nil {
				h = amqp.Table{}
			}
			h[k] = v
		})
	msg.Headers = h
	err := p.send(ctx, msg)
	end(err)
	return err
}

func (p *Publisher) send(ctx context.Context, msg amqp.Publishing) error {
	wait, err := p.c.publish(ctx, p.topo.Exchange, p.topo.RoutingKey, msg)
	if err != nil {
		return err
	}
	return wait(ctx)
}

// Close closes the publisher's channel.
func (p *Publisher) Close() error { return p.c.ch.Close() }
