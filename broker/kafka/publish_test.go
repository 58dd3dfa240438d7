package kafka

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/retry"
)

// BenchmarkNewRecord: a record handed on from work, with its ledger
// (tracing off: NewRecord writes no trace context).
func BenchmarkNewRecord(b *testing.B) {
	work := retry.Delivery{ID: "w", Attempt: 2, MaxAttempts: 5, Deadline: time.UnixMilli(1_700_000_020_000), Source: "queue"}.NewContext(context.Background())
	key, value := []byte("w"), []byte("x")
	b.ReportAllocs()
	for b.Loop() {
		NewRecord(work, "orders", "w", key, value)
	}
}

// TestPublisherNeedsClient: a Publisher without a Client says so.
func TestPublisherNeedsClient(t *testing.T) {
	err := Publisher{}.Publish(context.Background(), "orders", "w", nil, nil)
	if !errors.Is(err, broker.ErrInvalid) || !strings.Contains(err.Error(), "Publisher.Client") {
		t.Errorf("error %v, want broker.ErrInvalid naming Publisher.Client", err)
	}
}
