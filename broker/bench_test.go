package broker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/retry"
)

// BenchmarkProcessSuccess is the per-message cost every adapter adds on the
// success path: build the Delivery, run the handler, decide nothing.
func BenchmarkProcessSuccess(b *testing.B) {
	p := &broker.Processor{Handler: func(context.Context, []byte) error { return nil }, Source: "bench"}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if o := p.Process(ctx, "id", nil, broker.State{}); o.Action != broker.Ack {
			b.Fatal(o.Action)
		}
	}
}

// BenchmarkProcessSuccessAt is the success path of an adapter that passes
// the time it received the delivery (Kafka: once per poll): no clock read.
// It allocates nothing per message: the context carrying the Delivery
// comes from a block of 63 (retrydriver.DeliveryContexts; TestProcessSuccessAllocs
// holds it to that).
func BenchmarkProcessSuccessAt(b *testing.B) {
	p := &broker.Processor{Handler: func(context.Context, []byte) error { return nil }, Source: "bench"}
	ctx := context.Background()
	start := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		if o := p.ProcessAt(ctx, "id", nil, broker.State{}, start); o.Action != broker.Ack {
			b.Fatal(o.Action)
		}
	}
}

// TestProcessSuccessAllocs: the success path allocates less than once per
// message (the Delivery's context comes from a block of 63,
// retrydriver.DeliveryContexts), with or without a Policy.
func TestProcessSuccessAllocs(t *testing.T) {
	ctx := context.Background()
	start := time.Now()
	for name, pol := range map[string]*retry.Policy{"nil": nil, "cascade": broker.CascadePolicy(broker.DefaultTiers)} {
		p := &broker.Processor{Handler: func(context.Context, []byte) error { return nil }, Policy: pol, Source: "bench"}
		if n := testing.AllocsPerRun(1000, func() { p.ProcessAt(ctx, "id", nil, broker.State{}, start) }); n != 0 {
			t.Errorf("%s policy: ProcessAt's success path: %v allocs, want 0 (1/63: the Delivery's context's block)", name, n)
		}
	}
}

// TestProcessRetryAllocs: the retry path allocates no more than the
// success path: the new State and the due time are built in place.
func TestProcessRetryAllocs(t *testing.T) {
	err := retry.Retryable(errors.New("503"))
	p := &broker.Processor{Handler: func(context.Context, []byte) error { return err },
		Policy: broker.CascadePolicy(broker.DefaultTiers), Source: "bench"}
	ctx := context.Background()
	start := time.Now()
	if n := testing.AllocsPerRun(1000, func() { p.ProcessAt(ctx, "id", nil, broker.State{}, start) }); n != 0 {
		t.Errorf("ProcessAt's retry path: %v allocs, want 0 (1/63: the Delivery's context's block)", n)
	}
}

// BenchmarkProcessRetry is the failure path: classify, decide, new state.
func BenchmarkProcessRetry(b *testing.B) {
	err := retry.Retryable(errors.New("503"))
	p := &broker.Processor{Handler: func(context.Context, []byte) error { return err },
		Policy: broker.CascadePolicy(broker.DefaultTiers), Source: "bench"}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if o := p.Process(ctx, "id", nil, broker.State{}); o.Action != broker.Retry {
			b.Fatal(o.Action)
		}
	}
}

// BenchmarkDecodeState reads a forwarded message's headers.
func BenchmarkDecodeState(b *testing.B) {
	h := map[string]string{}
	broker.State{Attempts: 2, Prev: time.Second, Due: time.UnixMilli(1_700_000_000_000), FirstAttempt: time.UnixMilli(1_700_000_000_000),
		FirstFailure: time.UnixMilli(1_700_000_000_000), Error: "503", Origin: "orders/0/17"}.Encode(func(k, v string) { h[k] = v })
	get := func(k string) (string, bool) { v, ok := h[k]; return v, ok }
	b.ReportAllocs()
	for b.Loop() {
		if _, err := broker.DecodeState(get); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeStateOriginal reads an original message: no state headers.
func BenchmarkDecodeStateOriginal(b *testing.B) {
	get := func(string) (string, bool) { return "", false }
	b.ReportAllocs()
	for b.Loop() {
		if _, err := broker.DecodeState(get); err != nil {
			b.Fatal(err)
		}
	}
}
