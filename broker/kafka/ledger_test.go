package kafka

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/broker/brokertest"
)

// PublishLedger implements brokertest.LedgerPipeline: Publish.
func (p *pipeline) PublishLedger(ctx context.Context, id string, payload []byte) error {
	return Publish(ctx, p.cl, p.topics.Main, id, nil, payload)
}

// PublishHeader implements brokertest.LedgerPipeline.
func (p *pipeline) PublishHeader(ctx context.Context, id, key, value string) (bool, error) {
	r := &kgo.Record{Topic: p.topics.Main, Value: []byte("x"), Headers: []kgo.RecordHeader{
		{Key: broker.HeaderID, Value: []byte(id)}, {Key: key, Value: []byte(value)}}}
	return true, p.cl.ProduceSync(ctx, r).FirstErr()
}

func ledgerStart(t *testing.T) func(brokertest.Setup) brokertest.LedgerPipeline {
	return func(s brokertest.Setup) brokertest.LedgerPipeline { return start(t, s, nil) }
}

// TestLedgerCountsOn: a record published with a ledger (Publish) is
// handled as the work's next attempts — 3, 4 of a budget of 4 — through
// the retry topic (the budget travels in the compact state), and is then
// dead-lettered as exhausted (brokertest.LedgerCountsOn).
func TestLedgerCountsOn(t *testing.T) {
	brokertest.LedgerCountsOn(t, brokertest.Setup{Name: "ledger", Tiers: broker.Tiers{10 * time.Millisecond}}, ledgerStart(t))
}

// TestLedgerHostileHeaders: the worst values of every ledger header a
// producer can send are dead-lettered as malformed or handled within the
// consumer's bounds (brokertest.LedgerHostileHeaders).
func TestLedgerHostileHeaders(t *testing.T) {
	brokertest.LedgerHostileHeaders(t, brokertest.Setup{Name: "hostile"}, ledgerStart(t))
}
