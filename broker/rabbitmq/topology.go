// Package rabbitmq runs a stagger retry.Handler on a RabbitMQ queue with
// broker-side delayed retries: no consumer ever sleeps.
//
// The topology is a delay-queue cascade. A failed message is
// published (with publisher confirms and mandatory) to the wait queue of its
// delay tier; the wait queue has no consumer, a queue-level x-message-ttl and
// x-dead-letter-exchange pointing back at the main exchange, so when the
// TTL expires RabbitMQ routes the message to the main queue again:
//
//	                 ┌──────────────────────── x-dead-letter-exchange ─────────────┐
//	                 ▼                                                             │
//	producer ──► [exchange] ──routing key──► (queue) ──► Consumer ──nil──► ack     │
//	                                                       │                       │
//	            retryable, after the publish is confirmed: │                       │
//	              attempt 1 ──► (queue.retry.10s)  ttl 10s ├───────────────────────┤
//	              attempt 2 ──► (queue.retry.1m)   ttl 1m  ├───────────────────────┤
//	              attempt 3 ──► (queue.retry.10m)  ttl 10m ├───────────────────────┘
//	            permanent, unknown, exhausted ──► (queue.dlq)
//
// One wait queue per tier, because RabbitMQ only expires messages at the
// head of a queue: a shared queue with per-message TTLs would hold a
// 10-second retry behind a 10-minute one. The tier is chosen from the delay
// the shared decision (retry.Policy.Decide) returns: the first tier at least
// that long, so a message is never delivered early; with the default policy
// (broker.CascadePolicy) attempt n waits tier n.
//
// A retry due within Options.WaitInPlace (10 ms by default), sooner than
// a wait-queue round trip could bring it back, is held by the Consumer
// instead, unacknowledged, and handled again when due.
//
// The attempt count travels in our own header (broker.HeaderAttempt), not
// in x-death, whose counting changed in RabbitMQ 3.13.
package rabbitmq

import (
	"fmt"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/staggerhq/stagger/broker"
)

// Topology names the exchange and queues of one retrying queue.
type Topology struct {
	// Exchange is the main (direct) exchange producers publish to, and the
	// wait queues' dead-letter exchange.
	Exchange string
	// Queue is the main queue the consumer reads.
	Queue string
	// RoutingKey binds Queue to Exchange; expired retries come back with it.
	RoutingKey string
	// Tiers are the wait queues' delays, shortest first.
	Tiers broker.Tiers
	// DLQ is the dead-letter queue.
	DLQ string
}

// NewTopology names everything after name: exchange, queue and routing key
// name, wait queues name.retry.<tier> (name.retry.10s …), DLQ name.dlq.
// tiers nil means broker.DefaultTiers.
func NewTopology(name string, tiers broker.Tiers) Topology {
	if tiers == nil {
		tiers = broker.DefaultTiers
	}
	return Topology{Exchange: name, Queue: name, RoutingKey: name, Tiers: tiers, DLQ: name + ".dlq"}
}

// TierQueue is the name of tier i's wait queue: Queue.retry.<tier name>.
func (t Topology) TierQueue(i int) string {
	return t.Queue + ".retry." + t.Tiers.Name(i)
}

// Validate checks the names and the tiers, and that the DLQ is neither the
// main queue nor a wait queue.
func (t Topology) Validate() error {
	for _, f := range []struct{ name, v string }{{"Exchange", t.Exchange}, {"Queue", t.Queue}, {"DLQ", t.DLQ}} {
		if f.v == "" || len(f.v) > 200 {
			return fmt.Errorf("%w: Topology.%s must be 1..200 bytes, got %d", broker.ErrInvalid, f.name, len(f.v))
		}
		if strings.HasPrefix(f.v, "amq.") {
			return fmt.Errorf("%w: Topology.%s must not start with the reserved prefix amq., got %q", broker.ErrInvalid, f.name, f.v)
		}
	}
	if len(t.RoutingKey) > 255 {
		return fmt.Errorf("%w: Topology.RoutingKey must be at most 255 bytes, got %d", broker.ErrInvalid, len(t.RoutingKey))
	}
	if err := t.Tiers.Validate(); err != nil {
		return fmt.Errorf("Topology: %w", err)
	}
	// The DLQ must be a queue of its own: as the main queue, dead letters
	// would be consumed and dead-lettered again in a loop; as a wait queue,
	// they would expire back into the main queue.
	if t.DLQ == t.Queue {
		return fmt.Errorf("%w: Topology.DLQ must differ from Topology.Queue, both %q", broker.ErrInvalid, t.DLQ)
	}
	for i := range t.Tiers {
		if q := t.TierQueue(i); t.DLQ == q {
			return fmt.Errorf("%w: Topology.DLQ must differ from the wait queue of Tiers[%d], both %q", broker.ErrInvalid, i, q)
		}
	}
	return nil
}

// Declare declares the exchange, the main queue and its binding, one wait
// queue per tier and the DLQ, all durable. It is idempotent; RabbitMQ
// refuses (PRECONDITION_FAILED) a queue that exists with other arguments,
// such as a changed tier TTL.
func (t Topology) Declare(ch *amqp.Channel) error {
	if err := t.Validate(); err != nil {
		return err
	}
	if err := ch.ExchangeDeclare(t.Exchange, amqp.ExchangeDirect, true, false, false, false, nil); err != nil {
		return fmt.Errorf("rabbitmq: declare exchange %q: %w", t.Exchange, err)
	}
	if _, err := ch.QueueDeclare(t.Queue, true, false, false, false, nil); err != nil {
		return fmt.Errorf("rabbitmq: declare queue %q: %w", t.Queue, err)
	}
	if err := ch.QueueBind(t.Queue, t.RoutingKey, t.Exchange, false, nil); err != nil {
		return fmt.Errorf("rabbitmq: bind queue %q: %w", t.Queue, err)
	}
	for i, d := range t.Tiers {
		args := amqp.Table{
			"x-message-ttl":             d.Milliseconds(),
			"x-dead-letter-exchange":    t.Exchange,
			"x-dead-letter-routing-key": t.RoutingKey,
		}
		if _, err := ch.QueueDeclare(t.TierQueue(i), true, false, false, false, args); err != nil {
			return fmt.Errorf("rabbitmq: declare wait queue %q: %w", t.TierQueue(i), err)
		}
	}
	if _, err := ch.QueueDeclare(t.DLQ, true, false, false, false, nil); err != nil {
		return fmt.Errorf("rabbitmq: declare DLQ %q: %w", t.DLQ, err)
	}
	return nil
}

// Delete removes the queues and the exchange Declare made, messages
// included. For tests and tear-downs.
func (t Topology) Delete(ch *amqp.Channel) error {
	var errs []error
	names := []string{t.Queue, t.DLQ}
	for i := range t.Tiers {
		names = append(names, t.TierQueue(i))
	}
	for _, q := range names {
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			errs = append(errs, fmt.Errorf("delete queue %q: %w", q, err))
		}
	}
	if err := ch.ExchangeDelete(t.Exchange, false, false); err != nil {
		errs = append(errs, fmt.Errorf("delete exchange %q: %w", t.Exchange, err))
	}
	if len(errs) > 0 {
		return fmt.Errorf("rabbitmq: %v", errs)
	}
	return nil
}
