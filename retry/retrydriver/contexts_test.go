package retrydriver_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retry/retrydriver"
)

type testKey struct{}

// TestDeliveryContextsKept: a context of DeliveryContexts keeps its own
// Delivery after the handler returned, while many more are handed out
// (the next blocks included): no slot is handed out twice.
func TestDeliveryContextsKept(t *testing.T) {
	var b retrydriver.DeliveryContexts
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), testKey{}, "v"))
	deadline := time.UnixMilli(1_700_000_000_000)
	const n = 500 // several blocks
	kept := make([]context.Context, n)
	for i := range kept {
		d := retry.Delivery{ID: fmt.Sprintf("m%d", i), Attempt: i + 1, MaxAttempts: 7, Source: "test", Deadline: deadline}
		kept[i] = b.NewContext(parent, &d)
	}
	for i, ctx := range kept {
		d, ok := retry.DeliveryFrom(ctx)
		want := retry.Delivery{ID: fmt.Sprintf("m%d", i), Attempt: i + 1, MaxAttempts: 7, Source: "test", Deadline: deadline}
		if !ok || d.ID != want.ID || d.Attempt != want.Attempt || d.MaxAttempts != want.MaxAttempts ||
			d.Source != want.Source || !d.Deadline.Equal(want.Deadline) {
			t.Fatalf("context %d: DeliveryFrom = %+v, %v; want %+v", i, d, ok, want)
		}
		if ctx.Value(testKey{}) != "v" {
			t.Fatalf("context %d: other values must come from the parent", i)
		}
	}
	cancel()
	for i, ctx := range kept {
		if ctx.Err() != context.Canceled {
			t.Fatalf("context %d: Err = %v after the parent's cancel", i, ctx.Err())
		}
	}
}

// TestDeliveryContextsConcurrent: goroutines taking contexts at once each
// get their own (run with -race: no slot is written by two).
func TestDeliveryContextsConcurrent(t *testing.T) {
	var b retrydriver.DeliveryContexts
	const workers, each = 4, 300
	got := make([][]context.Context, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				d := retry.Delivery{ID: fmt.Sprintf("w%d-%d", w, i), Attempt: i + 1}
				got[w] = append(got[w], b.NewContext(context.Background(), &d))
			}
		}()
	}
	wg.Wait()
	seen := map[context.Context]bool{}
	for w := range workers {
		for i, ctx := range got[w] {
			if seen[ctx] {
				t.Fatalf("worker %d context %d handed out twice", w, i)
			}
			seen[ctx] = true
			if d, _ := retry.DeliveryFrom(ctx); d.ID != fmt.Sprintf("w%d-%d", w, i) || d.Attempt != i+1 {
				t.Fatalf("worker %d context %d: %+v", w, i, d)
			}
		}
	}
}

// TestDeliveryContextsAllocs: one allocation per block of 63.
func TestDeliveryContextsAllocs(t *testing.T) {
	var b retrydriver.DeliveryContexts
	d := retry.Delivery{ID: "m1", Attempt: 2, Source: "test"}
	ctx := context.Background()
	if n := testing.AllocsPerRun(63*20, func() { b.NewContext(ctx, &d) }); n != 0 {
		t.Errorf("DeliveryContexts.NewContext: %v allocs a call, want 0 (1/63)", n)
	}
}

func BenchmarkDeliveryContexts(b *testing.B) {
	var cs retrydriver.DeliveryContexts
	d := retry.Delivery{ID: "m1", Attempt: 2, Source: "test"}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		cs.NewContext(ctx, &d)
	}
}
