package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/broker/brokertest"
	"github.com/staggerhq/stagger/internal/wire/wiretest"
	"github.com/staggerhq/stagger/retry"
)

// TestLedgerCountsOn: a message Publisher.Publish sends from a context
// that carries work is handled as the work's next attempts — 3, 4 of a
// budget of 4, across a forward — and then dead-lettered as exhausted.
func TestLedgerCountsOn(t *testing.T) {
	var (
		mu   sync.Mutex
		seen []retry.Delivery
	)
	h := func(ctx context.Context, _ []byte) error {
		d, _ := retry.DeliveryFrom(ctx)
		mu.Lock()
		seen = append(seen, d)
		mu.Unlock()
		return retry.Retryable(errors.New("busy"))
	}
	p := start(t, brokertest.Setup{Name: uniqueName(t), Handler: h, Tiers: broker.Tiers{10 * time.Millisecond},
		Policy: &retry.Policy{MaxAttempts: 10, Schedule: backoff.Constant(20 * time.Millisecond)}}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	deadline := time.Now().Add(20 * time.Second).Truncate(time.Millisecond)
	work := retry.Delivery{ID: "w", Attempt: 2, MaxAttempts: 4, Deadline: deadline, Source: "queue"}.NewContext(ctx)
	if err := p.pub.Publish(work, "w", []byte("x")); err != nil {
		t.Fatal(err)
	}
	dl, err := p.NextDeadLetter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if dl.Reason != retry.Exhausted.String() || dl.Attempts != 4 {
		t.Errorf("dead letter: reason %q after %d attempts, want exhausted after 4", dl.Reason, dl.Attempts)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 {
		t.Fatalf("handled %d times, want 2 (attempts 3 and 4)", len(seen))
	}
	for i, d := range seen {
		if d.Attempt != 3+i || d.MaxAttempts != 4 || !d.Deadline.Equal(deadline) {
			t.Errorf("delivery %d: attempt %d of %d, deadline %v; want %d of 4, %v", i+1, d.Attempt, d.MaxAttempts, d.Deadline, 3+i, deadline)
		}
	}
}

// TestLedgerHostileHeaders: the worst values of every ledger header a
// producer can send are dead-lettered as malformed or handled within the
// consumer's bounds — never with more attempts than its Policy allows or
// a deadline later than its Policy.Timeout sets.
func TestLedgerHostileHeaders(t *testing.T) {
	const timeout = time.Minute
	var (
		mu  sync.Mutex
		bad []string
		n   int
	)
	h := func(ctx context.Context, _ []byte) error {
		d, _ := retry.DeliveryFrom(ctx)
		mu.Lock()
		defer mu.Unlock()
		n++
		if d.MaxAttempts < 1 || d.MaxAttempts > 3 {
			bad = append(bad, fmt.Sprintf("%s: budget %d", d.ID, d.MaxAttempts))
		}
		if d.Deadline.IsZero() || time.Until(d.Deadline) > timeout {
			bad = append(bad, fmt.Sprintf("%s: deadline in %v", d.ID, time.Until(d.Deadline)))
		}
		return nil
	}
	p := start(t, brokertest.Setup{Name: uniqueName(t), Handler: h,
		Policy: &retry.Policy{MaxAttempts: 3, Timeout: timeout, Schedule: backoff.Constant(time.Millisecond)}}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() {
		for range p.dlq { // the malformed ones
		}
	}()
	ch, err := p.conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	vals := wiretest.Values()
	for _, k := range []string{broker.HeaderAttempt, broker.HeaderMaxAttempts, broker.HeaderDeadline, broker.HeaderFirstAttempt} {
		for i, v := range append(vals[:len(vals)-1], "99999999999999") {
			msg := amqp.Publishing{MessageId: fmt.Sprintf("%s-%d", k, i), Body: []byte("x"), Headers: amqp.Table{k: v}}
			if err := ch.PublishWithContext(ctx, p.topo.Exchange, p.topo.RoutingKey, false, false, msg); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := p.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Errorf("handlers saw a ledger beyond the consumer's bounds: %q", bad)
	}
	if n < 10 {
		t.Errorf("handled %d messages: the readable values did not reach the handler", n)
	}
}
