package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/retry"
)

// BenchmarkPublishLedger: Publish of a message handed on from work (its
// ledger in the headers), acknowledged, with tracing off: the allocations
// a publish costs, to compare across changes of the publishing path.
func BenchmarkPublishLedger(b *testing.B) {
	js := connect(b)
	name := fmt.Sprintf("stg-bench-pub-%d", time.Now().UnixNano())
	createStream(b, js, name)
	work := retry.Delivery{ID: "w", Attempt: 2, MaxAttempts: 5, Deadline: time.Now().Add(time.Hour), Source: "queue"}.NewContext(context.Background())
	body := []byte("payload")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Publish(work, js, name+".in", "", body); err != nil {
			b.Fatal(err)
		}
	}
}

// TestPublisherNeedsJS: a Publisher without a JetStream says so.
func TestPublisherNeedsJS(t *testing.T) {
	_, err := Publisher{}.Publish(context.Background(), "orders.in", "w", nil)
	if !errors.Is(err, broker.ErrInvalid) || !strings.Contains(err.Error(), "Publisher.JS") {
		t.Errorf("error %v, want broker.ErrInvalid naming Publisher.JS", err)
	}
}
