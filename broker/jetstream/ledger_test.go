package jetstream

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/staggerhq/stagger/broker/brokertest"
)

// PublishLedger implements brokertest.LedgerPipeline: Publish.
func (p *pipeline) PublishLedger(ctx context.Context, id string, payload []byte) error {
	_, err := Publish(ctx, p.js, p.subject, id, payload)
	return err
}

// PublishHeader implements brokertest.LedgerPipeline: a message the
// server or the client refuses is not sent.
func (p *pipeline) PublishHeader(ctx context.Context, id, key, value string) (bool, error) {
	m := nats.NewMsg(p.subject)
	m.Data = []byte("x")
	m.Header.Set(key, value)
	m.Header.Set("Nats-Msg-Id", id)
	_, err := p.js.PublishMsg(ctx, m)
	return err == nil, nil
}

func ledgerStart(t *testing.T) func(brokertest.Setup) brokertest.LedgerPipeline {
	return func(s brokertest.Setup) brokertest.LedgerPipeline { return start(t, s, nil) }
}

// TestLedgerCountsOn: a message published with a ledger (Publish) is
// handled as the work's next attempts — 3, 4 of a budget of 4 — with the
// producer's deadline in every Delivery, the last delivery's included
// (whose context the ack wait bounds), and is then dead-lettered
// (brokertest.LedgerCountsOn).
func TestLedgerCountsOn(t *testing.T) {
	brokertest.LedgerCountsOn(t, brokertest.Setup{Name: uniqueName(t)}, ledgerStart(t))
}

// TestLedgerHostileHeaders: the worst values of every ledger header a
// producer can send never give the consumer more attempts than its Policy
// allows or a deadline later than the one its Policy.Timeout sets
// (brokertest.LedgerHostileHeaders).
func TestLedgerHostileHeaders(t *testing.T) {
	brokertest.LedgerHostileHeaders(t, brokertest.Setup{Name: uniqueName(t)}, ledgerStart(t))
}

// TestAckBoundedBothTimers: the handler's deadline and bound's timer end
// the attempt at the same instant; when bound's has already ended the
// Processor's context by the time the handler returns, the error still
// carries bound's cause, so the attempt reads as interrupted.
func TestAckBoundedBothTimers(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.WithValue(context.Background(), ackKey{}, time.Now().Add(time.Millisecond)))
	defer cancel(nil)
	h := ackBounded(func(hctx context.Context, _ []byte) error {
		<-hctx.Done()      // the handler's own deadline
		cancel(errAckWait) // bound's timer fires before the handler returns
		return hctx.Err()
	})
	if err := h(ctx, nil); !errors.Is(err, errAckWait) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v: want the handler's deadline wrapped with the ack wait's cause", err)
	}
}
