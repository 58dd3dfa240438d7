package rabbitmq

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/retry"
)

// BenchmarkPublishLedger: Publisher.Publish of a message handed on from
// work (its ledger in the headers), confirmed, with tracing off: the
// allocations a publish costs, to compare across changes of the
// publishing path.
func BenchmarkPublishLedger(b *testing.B) {
	conn := dial(b)
	topo := NewTopology(fmt.Sprintf("stg-bench-pub-%d", time.Now().UnixNano()), broker.Tiers{time.Second})
	ch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	if err := topo.Declare(ch); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if ch, err := conn.Channel(); err == nil {
			_ = topo.Delete(ch)
		}
	})
	pub, err := NewPublisher(conn, topo)
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()
	work := retry.Delivery{ID: "w", Attempt: 2, MaxAttempts: 5, Deadline: time.Now().Add(time.Hour), Source: "queue"}.NewContext(context.Background())
	body := []byte("payload")
	b.ReportAllocs()
	for b.Loop() {
		if err := pub.Publish(work, "w", body); err != nil {
			b.Fatal(err)
		}
	}
}
