package rabbitmq

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/broker/brokertest"
)

// PublishLedger implements brokertest.LedgerPipeline: Publisher.Publish.
func (p *pipeline) PublishLedger(ctx context.Context, id string, payload []byte) error {
	return p.pub.Publish(ctx, id, payload)
}

// PublishHeader implements brokertest.LedgerPipeline.
func (p *pipeline) PublishHeader(ctx context.Context, id, key, value string) (bool, error) {
	ch, err := p.conn.Channel()
	if err != nil {
		return false, err
	}
	defer ch.Close()
	msg := amqp.Publishing{MessageId: id, Body: []byte("x"), Headers: amqp.Table{key: value}}
	return true, ch.PublishWithContext(ctx, p.topo.Exchange, p.topo.RoutingKey, false, false, msg)
}

func ledgerStart(t *testing.T) func(brokertest.Setup) brokertest.LedgerPipeline {
	return func(s brokertest.Setup) brokertest.LedgerPipeline { return start(t, s, nil) }
}

// TestLedgerCountsOn: a message Publisher.Publish sends from a context
// that carries work is handled as the work's next attempts — 3, 4 of a
// budget of 4, across a forward through the wait queue — and then
// dead-lettered as exhausted (brokertest.LedgerCountsOn).
func TestLedgerCountsOn(t *testing.T) {
	brokertest.LedgerCountsOn(t, brokertest.Setup{Name: uniqueName(t), Tiers: broker.Tiers{10 * time.Millisecond}}, ledgerStart(t))
}

// TestLedgerHostileHeaders: the worst values of every ledger header a
// producer can send are dead-lettered as malformed or handled within the
// consumer's bounds (brokertest.LedgerHostileHeaders).
func TestLedgerHostileHeaders(t *testing.T) {
	brokertest.LedgerHostileHeaders(t, brokertest.Setup{Name: uniqueName(t)}, ledgerStart(t))
}
