package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/retry"
)

// BenchmarkPublishHeaders: what a publisher writes on a message handed on
// from work, with tracing off — broker.StartPublish with no trace — next
// to EncodeLedger alone, which is what the publishers called before they
// traced: the same allocations.
func BenchmarkPublishHeaders(b *testing.B) {
	work := retry.Delivery{ID: "w", Attempt: 2, MaxAttempts: 5, Deadline: time.UnixMilli(1_700_000_020_000), Source: "queue"}.NewContext(context.Background())
	n := 0
	set := func(string, string) { n++ }
	b.Run("EncodeLedger", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			broker.EncodeLedger(work, set)
		}
	})
	b.Run("StartPublishTraceOff", func(b *testing.B) {
		b.ReportAllocs()
		info := broker.PublishInfo{System: "rabbitmq", Destination: "orders", ID: "w", Size: 3}
		for b.Loop() {
			broker.StartPublish(work, nil, info, set)(nil)
		}
	})
}
