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
	in := amqp.Table{"trace": "t", broker.HeaderAttempt: "1", "x-death": []any{}, HeaderExchange: "orders", headerPublishTag: "9"}
	for _, r := range []route{{"orders", "eu new"}, {"", "q"}, {"a b", " "}} {
		h := waitHeaders(in, st, r, "17")
		if len(h) != 2 || h["trace"] != "t" || h[broker.HeaderState] == nil {
			t.Fatalf("wait-queue headers %v: want trace and %s only", h, broker.HeaderState)
		}
		got, from, err := readState(&amqp.Delivery{Headers: h, Exchange: "main", RoutingKey: "k"})
		want := st
		want.Origin = "" // a dead letter writes it from the route
		if err != nil || got != want || from != r {
			t.Fatalf("%v: compact state read back %+v %+v, %v; want %+v", r, got, from, err, want)
		}
		if tag, ok := returnTag(h); !ok || tag != "17" {
			t.Fatalf("%v: publish tag %q %v, want 17", r, tag, ok)
		}
	}
	// A route with a newline stays in the separate headers.
	r := route{"orders", "line\nbreak"}
	h := waitHeaders(in, st, r, "18")
	if len(h) != 4 || h[HeaderExchange] != "orders" || h[HeaderRoutingKey] != "line\nbreak" {
		t.Fatalf("wait-queue headers %v: want the route in %s, %s", h, HeaderExchange, HeaderRoutingKey)
	}
	if _, from, err := readState(&amqp.Delivery{Headers: h}); err != nil || from != r {
		t.Fatalf("route read back %+v, %v; want %+v", from, err, r)
	}
	if tag, ok := returnTag(h); !ok || tag != "18" {
		t.Fatalf("publish tag %q %v, want 18", tag, ok)
	}
	// A first delivery's route is its own.
	if _, from, err := readState(&amqp.Delivery{Exchange: "main", RoutingKey: "k"}); err != nil || from != (route{"main", "k"}) {
		t.Fatalf("first delivery's route %+v, %v", from, err)
	}
	dl := forwardHeaders(h, broker.State{Attempts: 3, Reason: "exhausted", Error: "e"})
	if _, has := dl[broker.HeaderState]; has {
		t.Errorf("a dead letter carries %s: %v", broker.HeaderState, dl)
	}
	if d, err := ParseDeadLetter(amqp.Delivery{Headers: dl}); err != nil || d.Attempts != 3 || d.Reason != "exhausted" {
		t.Errorf("dead letter %+v, %v", d, err)
	}
	// The compact state of earlier versions: no adapter fields, the route
	// in the separate headers.
	old := amqp.Table{broker.HeaderState: "1 1 0 0 0 0", HeaderExchange: "x", HeaderRoutingKey: "y", headerPublishTag: "3"}
	if st, from, err := readState(&amqp.Delivery{Headers: old}); err != nil || st.Attempts != 1 || from != (route{"x", "y"}) {
		t.Fatalf("earlier compact state read back %+v %+v, %v", st, from, err)
	}
	if tag, ok := returnTag(old); !ok || tag != "3" {
		t.Fatalf("earlier publish tag %q %v, want 3", tag, ok)
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
