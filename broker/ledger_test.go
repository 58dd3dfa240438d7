package broker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/internal/wire/wiretest"
	"github.com/staggerhq/stagger/retry"
)

// TestProcessorLedger: a message's carried budget bounds the consumer
// (min of it and the Policy's), its attempts count on from the
// producer's, a message with no attempt left is dead-lettered unhandled,
// and a first-attempt time in the future never pushes Policy.Timeout's
// deadline later.
func TestProcessorLedger(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	var seen []retry.Delivery
	p := &broker.Processor{
		Policy: &retry.Policy{MaxAttempts: 10, Schedule: backoff.Constant(time.Second), Timeout: time.Minute},
		Now:    func() time.Time { return now },
		Source: "test",
		Handler: func(ctx context.Context, _ []byte) error {
			d, _ := retry.DeliveryFrom(ctx)
			seen = append(seen, d)
			return retry.Retryable(errors.New("busy"))
		},
	}
	st := broker.State{Attempts: 2, MaxAttempts: 4}
	var attempts []int
	for range 5 {
		o := p.Process(context.Background(), "m", nil, st)
		if o.Action != broker.Retry {
			if o.Action != broker.Dead || o.Reason != retry.Exhausted {
				t.Fatalf("outcome %v %v, want dead (exhausted)", o.Action, o.Reason)
			}
			break
		}
		st = o.State
		st.Due = time.Time{}
	}
	for _, d := range seen {
		attempts = append(attempts, d.Attempt)
		if d.MaxAttempts != 4 {
			t.Errorf("Delivery.MaxAttempts %d, want 4 (the carried budget, below the Policy's 10)", d.MaxAttempts)
		}
	}
	if len(attempts) != 2 || attempts[0] != 3 || attempts[1] != 4 {
		t.Errorf("attempts %v, want [3 4]", attempts)
	}

	// No attempt left: unhandled.
	seen = nil
	o := p.Process(context.Background(), "m", nil, broker.State{Attempts: 4, MaxAttempts: 4})
	if o.Action != broker.Dead || o.Reason != retry.Exhausted || len(seen) != 0 {
		t.Errorf("no attempt left: %v %v, %d runs; want dead (exhausted), none", o.Action, o.Reason, len(seen))
	}
	// A budget above the Policy's is the Policy's.
	seen = nil
	p.Process(context.Background(), "m", nil, broker.State{MaxAttempts: 1000})
	if seen[0].MaxAttempts != 10 {
		t.Errorf("a carried budget of 1000: Delivery.MaxAttempts %d, want the Policy's 10", seen[0].MaxAttempts)
	}
	// A first attempt in the future: Policy.Timeout runs from now.
	seen = nil
	p.Process(context.Background(), "m", nil, broker.State{FirstAttempt: now.Add(1000 * time.Hour)})
	if got := seen[0].Deadline; !got.Equal(now.Add(time.Minute)) {
		t.Errorf("first attempt in the future: deadline %v, want now + Timeout %v", got, now.Add(time.Minute))
	}
}

// TestDecodeStateHostileLedger: the worst values of every ledger header
// never give a consumer more attempts or a later deadline than its Policy
// allows: each is an error naming the header (dead-lettered as
// malformed) or a value within the Processor's bounds.
func TestDecodeStateHostileLedger(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	p := &broker.Processor{
		Policy:  &retry.Policy{MaxAttempts: 3, Timeout: time.Minute},
		Now:     func() time.Time { return now },
		Handler: func(context.Context, []byte) error { return nil },
	}
	for _, k := range []string{broker.HeaderAttempt, broker.HeaderMaxAttempts, broker.HeaderDeadline, broker.HeaderFirstAttempt, broker.HeaderDelay} {
		for _, v := range append(wiretest.Values(), "99999999999999") {
			st, err := broker.DecodeState(func(key string) (string, bool) { return v, key == k })
			if err != nil {
				continue
			}
			var d retry.Delivery
			p.Handler = func(ctx context.Context, _ []byte) error { d, _ = retry.DeliveryFrom(ctx); return nil }
			p.Process(context.Background(), "m", nil, st)
			if d.MaxAttempts > 3 || d.MaxAttempts < 0 {
				t.Errorf("%s=%.20q: budget %d beyond the Policy's 3", k, v, d.MaxAttempts)
			}
			if !d.Deadline.IsZero() && d.Deadline.After(now.Add(time.Minute)) {
				t.Errorf("%s=%.20q: deadline %v beyond now + Timeout", k, v, d.Deadline)
			}
		}
	}
}
