package rabbitmq

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/staggerhq/stagger/broker/brokertest"
)

// TestDropCancelsRunningHandler drops the connection while a handler hangs
// until its context ends: the drop must end that context, so the consumer
// reconnects and the requeued message is handled again. Before, the hung
// handler held the session (and the reconnect) until Run's own end.
func TestDropCancelsRunningHandler(t *testing.T) {
	var (
		mu       sync.Mutex
		runs     int
		canceled error
	)
	started, redelivered := make(chan struct{}), make(chan struct{})
	h := func(ctx context.Context, _ []byte) error {
		mu.Lock()
		runs++
		n := runs
		mu.Unlock()
		if n > 1 {
			close(redelivered)
			return nil
		}
		close(started)
		<-ctx.Done() // hangs until its context ends
		mu.Lock()
		canceled = ctx.Err()
		mu.Unlock()
		return ctx.Err()
	}
	p := start(t, brokertest.Setup{Name: uniqueName(t), Handler: h, Policy: brokertest.Policy(), Tiers: brokertest.Tiers}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Publish(ctx, "hang", []byte("x")); err != nil {
		t.Fatal(err)
	}
	await(t, ctx, started, "the handler never ran")
	p.tcp.drop()
	await(t, ctx, redelivered, "after the drop the hung handler kept the consumer from reconnecting: the message was not handled again")
	mu.Lock()
	defer mu.Unlock()
	if !errors.Is(canceled, context.Canceled) {
		t.Errorf("the hung handler's context ended with %v, want context.Canceled", canceled)
	}
}
