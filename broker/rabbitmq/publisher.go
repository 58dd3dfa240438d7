package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ErrUnroutable is returned when RabbitMQ returned a mandatory publish: no
// queue was bound to take it (a wait queue or the DLQ was deleted).
var ErrUnroutable = errors.New("rabbitmq: message unroutable")

// ErrNacked is returned when RabbitMQ refused a publish (basic.nack).
var ErrNacked = errors.New("rabbitmq: publish not confirmed (nack)")

// confirmer publishes on a channel in confirm mode and reports, for each
// publish, whether RabbitMQ took responsibility for it: confirmed and not
// returned. Publishes are serialised so a basic.return is matched to its
// publish (RabbitMQ sends the return before the ack of the same publish).
type confirmer struct {
	mu      sync.Mutex
	ch      *amqp.Channel
	returns chan amqp.Return
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
	return &confirmer{ch: ch, returns: ch.NotifyReturn(make(chan amqp.Return, 1))}, nil
}

// publish sends msg mandatory and waits for its confirm.
func (c *confirmer) publish(ctx context.Context, exchange, key string, msg amqp.Publishing) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	select { // a stale return (a publish whose wait was abandoned)
	case <-c.returns:
	default:
	}
	dc, err := c.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, true, false, msg)
	if err != nil {
		return fmt.Errorf("rabbitmq: publish to %q/%q: %w", exchange, key, err)
	}
	ok, err := dc.WaitContext(ctx)
	if err != nil {
		return fmt.Errorf("rabbitmq: wait for confirm of %q/%q: %w", exchange, key, err)
	}
	if !ok {
		return fmt.Errorf("%w: %q/%q", ErrNacked, exchange, key)
	}
	select {
	case r := <-c.returns:
		return fmt.Errorf("%w: exchange %q routing key %q: %d %s", ErrUnroutable, exchange, key, r.ReplyCode, r.ReplyText)
	default:
	}
	return nil
}

// Publisher publishes original messages to a Topology's exchange, with
// mandatory and publisher confirms: Publish returns nil only when RabbitMQ
// has routed and confirmed the message. Safe for concurrent use.
type Publisher struct {
	c    *confirmer
	topo Topology
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

// Publish sends body as a persistent message with MessageId id (the key an
// inbox deduplicates on) and waits for the confirm.
func (p *Publisher) Publish(ctx context.Context, id string, body []byte) error {
	return p.c.publish(ctx, p.topo.Exchange, p.topo.RoutingKey, amqp.Publishing{
		MessageId:    id,
		DeliveryMode: amqp.Persistent,
		Body:         body,
	})
}

// Close closes the publisher's channel.
func (p *Publisher) Close() error { return p.c.ch.Close() }
