package jetstream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/broker/brokertest"
	"github.com/staggerhq/stagger/internal/wire/wiretest"
	"github.com/staggerhq/stagger/retry"
)

var backoffTick = backoff.Constant(time.Millisecond)

// TestLedgerCountsOn: a message published with a ledger (Publish) is
// handled as the work's next attempts — 3, 4 of a budget of 4 — with the
// producer's deadline in every Delivery, the last delivery's included
// (whose context the ack wait bounds), and is then dead-lettered.
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
		return retry.Retryable(fmt.Errorf("busy"))
	}
	p := start(t, brokertest.Setup{Name: uniqueName(t), Handler: h,
		Policy: &retry.Policy{MaxAttempts: 10, Schedule: backoffTick}}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	deadline := time.Now().Add(20 * time.Second).Truncate(time.Millisecond)
	work := retry.Delivery{ID: "w", Attempt: 2, MaxAttempts: 4, Deadline: deadline, Source: "queue"}.NewContext(ctx)
	if _, err := Publish(work, p.js, p.subject, "w", []byte("x")); err != nil {
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
// producer can send never give the consumer more attempts than its Policy
// allows or a deadline later than the one its Policy.Timeout sets.
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
		Policy: &retry.Policy{MaxAttempts: 3, Timeout: timeout, Schedule: backoffTick}}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sent := 0
	for _, k := range []string{broker.HeaderAttempt, broker.HeaderMaxAttempts, broker.HeaderDeadline, broker.HeaderFirstAttempt} {
		for i, v := range append(wiretest.Values()[:len(wiretest.Values())-1], "99999999999999") {
			m := nats.NewMsg(p.subject)
			m.Data = []byte("x")
			m.Header.Set(k, v)
			m.Header.Set("Nats-Msg-Id", fmt.Sprintf("%s-%d", k, i))
			if _, err := p.js.PublishMsg(ctx, m); err != nil {
				continue // refused by the server or the client: nothing to handle
			}
			sent++
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
	if n < sent/2 {
		t.Errorf("handled %d of %d messages: the test sends too little", n, sent)
	}
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
