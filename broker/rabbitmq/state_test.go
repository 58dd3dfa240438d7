package rabbitmq

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/broker/brokertest"
	"github.com/staggerhq/stagger/retry"
)

func TestForwardHeadersCompact(t *testing.T) {
	st := broker.State{Attempts: 2, Prev: time.Second, Due: time.UnixMilli(5000), FirstAttempt: time.UnixMilli(1000),
		FirstFailure: time.UnixMilli(1100), Error: "busy\nline 2", Origin: "orders/orders"}
	in := amqp.Table{"trace": "t", broker.HeaderAttempt: "1", "x-death": []any{}, HeaderExchange: "orders"}
	h := forwardHeaders(in, st, true)
	if len(h) != 3 || h["trace"] != "t" || h[HeaderExchange] != "orders" || h[broker.HeaderState] == nil {
		t.Fatalf("wait-queue headers %v: want trace, %s and %s only", h, HeaderExchange, broker.HeaderState)
	}
	got, err := stateOf(&amqp.Delivery{Headers: h})
	want := st
	want.Origin = "" // recomputed from the exchange and routing key headers
	if err != nil || got != want {
		t.Fatalf("compact state read back %+v, %v; want %+v", got, err, want)
	}
	dl := forwardHeaders(h, broker.State{Attempts: 3, Reason: "exhausted", Error: "e"}, false)
	if _, has := dl[broker.HeaderState]; has {
		t.Errorf("a dead letter carries %s: %v", broker.HeaderState, dl)
	}
	if d, err := ParseDeadLetter(amqp.Delivery{Headers: dl}); err != nil || d.Attempts != 3 || d.Reason != "exhausted" {
		t.Errorf("dead letter %+v, %v", d, err)
	}
	if _, err := stateOf(&amqp.Delivery{Headers: amqp.Table{broker.HeaderState: "1 x"}}); err == nil {
		t.Error("a malformed state header read without an error")
	}
}

// TestReadsSeparateStateHeaders: a message forwarded by an earlier version
// (separate state headers) still in a wait queue continues its attempts.
func TestReadsSeparateStateHeaders(t *testing.T) {
	var (
		mu   sync.Mutex
		seen []retry.Delivery
	)
	h := func(ctx context.Context, _ []byte) error {
		d, _ := retry.DeliveryFrom(ctx)
		mu.Lock()
		seen = append(seen, d)
		mu.Unlock()
		return retry.Permanent(errors.New("still bad"))
	}
	p := start(t, brokertest.Setup{Name: uniqueName(t), Handler: h, Policy: brokertest.Policy(), Tiers: brokertest.Tiers}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	ms := strconv.FormatInt(first.UnixMilli(), 10)
	wait, err := p.pub.c.publish(ctx, p.topo.Exchange, p.topo.RoutingKey, amqp.Publishing{MessageId: "legacy-1", Body: []byte("x"),
		Headers: amqp.Table{broker.HeaderAttempt: "1", broker.HeaderDelay: "200", broker.HeaderDue: ms, broker.HeaderFirstAttempt: ms,
			broker.HeaderFirstFailure: ms, broker.HeaderError: "transient", HeaderExchange: p.topo.Exchange, HeaderRoutingKey: p.topo.RoutingKey}})
	if err == nil {
		err = wait(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	dl, err := p.NextDeadLetter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if dl.ID != "legacy-1" || dl.Attempts != 2 || !dl.FirstFailure.Equal(first) {
		t.Fatalf("dead letter %+v: want legacy-1 after attempt 2 with first failure %v", dl, first)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen[0].Attempt != 2 {
		t.Errorf("deliveries %+v, want attempt 2 once", seen)
	}
}
