package brokertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/internal/tracetest"
	"github.com/staggerhq/stagger/internal/wire/wiretest"
	"github.com/staggerhq/stagger/retry"
)

// LedgerPipeline is a Pipeline that also publishes the ways the ledger
// tests need.
type LedgerPipeline interface {
	Pipeline
	// PublishLedger publishes an original message with the adapter's own
	// publishing helper, the one that writes the ledger of the work ctx
	// carries (rabbitmq.Publisher.Publish, kafka.Publish,
	// jetstream.Publish).
	PublishLedger(ctx context.Context, id string, payload []byte) error
	// PublishHeader publishes an original message with ID id whose one
	// stagger header is key, set to value byte for byte. It reports
	// false, with no error, when the broker or its client refused such a
	// message (nothing will be handled).
	PublishHeader(ctx context.Context, id, key, value string) (bool, error)
}

// LedgerCountsOn checks that a message published with the adapter's
// helper (PublishLedger) from a context that carries work — attempt 2 of
// a budget of 4, with a deadline — is handled as the work's next
// attempts, 3 and 4, each Delivery carrying the budget and the deadline,
// and is then dead-lettered as exhausted after 4 attempts. The consumer's
// own Policy allows 10 attempts 20 ms apart, so only the ledger stops it
// at 4. start builds the pipeline for the Setup it is given: s's Name and
// Tiers, with the test's Handler and Policy.
func LedgerCountsOn(t *testing.T, s Setup, start func(Setup) LedgerPipeline) {
	t.Helper()
	var (
		mu   sync.Mutex
		seen []retry.Delivery
	)
	s.Handler = func(ctx context.Context, _ []byte) error {
		d, _ := retry.DeliveryFrom(ctx)
		mu.Lock()
		seen = append(seen, d)
		mu.Unlock()
		return retry.Retryable(errors.New("busy"))
	}
	s.Policy = &retry.Policy{MaxAttempts: 10, Schedule: backoff.Constant(20 * time.Millisecond)}
	p := start(s)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	deadline := time.Now().Add(20 * time.Second).Truncate(time.Millisecond)
	work := retry.Delivery{ID: "w", Attempt: 2, MaxAttempts: 4, Deadline: deadline, Source: "queue"}.NewContext(ctx)
	if err := p.PublishLedger(work, "w", []byte("x")); err != nil {
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

// LedgerHostileHeaders sends the worst values of every ledger header a
// producer can write (wiretest.Values, but the 1 MiB one, which is over
// some brokers' message size, plus a Unix-ms time centuries ahead) with
// PublishHeader, and checks that every message the consumer handles runs
// within the consumer's bounds — never with more attempts than its
// Policy allows (3) or a deadline later than its Policy.Timeout sets —
// and that at least 10 were handled (the readable values reached the
// handler; the others are dead-lettered as malformed or, where the
// adapter ignores a malformed ledger, handled under the Policy alone).
func LedgerHostileHeaders(t *testing.T, s Setup, start func(Setup) LedgerPipeline) {
	t.Helper()
	const timeout = time.Minute
	var (
		mu  sync.Mutex
		bad []string
		n   int
	)
	s.Handler = func(ctx context.Context, _ []byte) error {
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
	s.Policy = &retry.Policy{MaxAttempts: 3, Timeout: timeout, Schedule: backoff.Constant(time.Millisecond)}
	p := start(s)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	dctx, stop := context.WithCancel(ctx)
	drained := make(chan struct{})
	go func() { // the malformed ones: more than a pipeline buffers
		defer close(drained)
		for {
			if _, err := p.NextDeadLetter(dctx); err != nil {
				return
			}
		}
	}()
	defer func() { stop(); <-drained }()
	vals := wiretest.Values()
	vals = append(vals[:len(vals)-1], "99999999999999")
	sent := 0
	for _, k := range []string{broker.HeaderAttempt, broker.HeaderMaxAttempts, broker.HeaderDeadline, broker.HeaderFirstAttempt} {
		for i, v := range vals {
			ok, err := p.PublishHeader(ctx, fmt.Sprintf("%s-%d", k, i), k, v)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				sent++
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
		t.Errorf("handled %d of %d messages: the readable values did not reach the handler", n, sent)
	}
}

// TraceContext returns ctx carrying the trace context traceparent,
// tracestate as the suite's Trace keeps it: a publisher whose trace is
// Trace{} writes them on the message, as it would a tracing library's
// span.
func TraceContext(ctx context.Context, traceparent, tracestate string) context.Context {
	return tracetest.With(ctx, tracetest.Context{Parent: traceparent, State: tracestate})
}
