package rabbitmq

import (
	"context"
	"fmt"
	"io"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/staggerhq/stagger/broker"
)

// RedriveSource reads a DLQ queue for broker.Redrive. It takes each dead
// letter with basic.get and holds it unacknowledged: a moved one is
// acknowledged (removed) after its republish to the original exchange and
// routing key was confirmed and routed (mandatory); the others are returned
// to the DLQ by Close. It reads at most the messages the queue held when it
// was opened, so a redriven message that is dead-lettered again is not read
// twice. Use it from one goroutine.
type RedriveSource struct {
	ch   *amqp.Channel
	conf *confirmer
	dlq  string
	left int // messages still to read of those there at open
}

// NewRedriveSource opens channels on conn to read the queue dlq, which must
// exist. Close it to return the dead letters that were not moved.
func NewRedriveSource(conn *amqp.Connection, dlq string) (*RedriveSource, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: open channel: %w", err)
	}
	q, err := ch.QueueDeclarePassive(dlq, true, false, false, false, nil)
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: DLQ %q: %w", dlq, err)
	}
	conf, err := newConfirmer(conn)
	if err != nil {
		ch.Close()
		return nil, err
	}
	return &RedriveSource{ch: ch, conf: conf, dlq: dlq, left: q.Messages}, nil
}

// Close returns the dead letters read and not moved to the DLQ (RabbitMQ
// requeues a closed channel's unacknowledged deliveries).
func (s *RedriveSource) Close() error {
	err := s.ch.Close()
	if cerr := s.conf.ch.Close(); err == nil {
		err = cerr
	}
	return err
}

// Next takes the next dead letter, or returns io.EOF.
func (s *RedriveSource) Next(ctx context.Context) (broker.RedriveMessage, error) {
	if s.left <= 0 {
		return nil, io.EOF
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d, ok, err := s.ch.Get(s.dlq, false)
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: get from %q: %w", s.dlq, err)
	}
	if !ok {
		return nil, io.EOF // emptied by someone else meanwhile
	}
	s.left--
	m := &redriveMsg{s: s, d: d}
	if dl, err := ParseDeadLetter(d); err == nil {
		m.dl = dl
	} else {
		m.dl = broker.DeadLetter{ID: d.MessageId, Payload: d.Body, State: broker.State{Reason: broker.ReasonMalformed, Error: err.Error()}}
	}
	m.exchange, m.key, m.ok = originOf(d.Headers, m.dl.Origin)
	return m, nil
}

// originOf is where a dead letter came from: the exchange and routing key
// headers of its first forward, else its origin header ("exchange/key").
func originOf(h amqp.Table, origin string) (exchange, key string, ok bool) {
	get := tableGet(h)
	if ex, found := get(HeaderExchange); found {
		key, _ = get(HeaderRoutingKey)
		return ex, key, true
	}
	if ex, key, found := strings.Cut(origin, "/"); found {
		return ex, key, true
	}
	return "", "", false
}

type redriveMsg struct {
	s             *RedriveSource
	d             amqp.Delivery
	dl            broker.DeadLetter
	exchange, key string
	ok            bool
}

func (m *redriveMsg) DeadLetter() broker.DeadLetter { return m.dl }

func (m *redriveMsg) Destination() string {
	if !m.ok {
		return ""
	}
	return m.exchange + "/" + m.key
}

// Republish sends the dead letter back to its exchange and routing key,
// mandatory and confirmed, with st as its state. A reset state (no
// attempts) also drops the first forward's exchange and routing key, so
// the message is as new.
func (m *redriveMsg) Republish(ctx context.Context, st broker.State) error {
	h := forwardHeaders(m.d.Headers, st)
	if st.Attempts == 0 {
		delete(h, HeaderExchange)
		delete(h, HeaderRoutingKey)
	}
	wait, err := m.s.conf.publish(ctx, m.exchange, m.key, republishing(&m.d, h))
	if err != nil {
		return err
	}
	return wait(ctx)
}

// Remove acknowledges the dead letter: RabbitMQ deletes it from the DLQ.
func (m *redriveMsg) Remove(context.Context) error { return m.d.Ack(false) }
