package queue_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/queue/queuetest"
	"github.com/staggerhq/stagger/retry"
)

// Enqueue a job and process it with RunOnce: a retryable failure leaves it
// pending at now + delay (base 100ms, ratio 0.5 → 50ms), the next
// run after that time finishes it. The clock and the ratio are fixed here so
// the output is deterministic.
func Example() {
	ctx := context.Background()
	clock := queuetest.NewClock(queuetest.Start)
	q, err := queue.New(queue.NewMemoryStore(), queue.Config{
		Base: 100 * time.Millisecond, Cap: time.Second,
		Now: clock.Now, Rand: queuetest.FixedRatio(0.5),
	})
	if err != nil {
		panic(err)
	}
	job, created, _ := q.Enqueue(ctx, queue.NewJob{ID: "order-42", Payload: []byte(`{"sku":"tea"}`), MaxAttempts: 3})
	fmt.Println("created:", created, "deadline in", job.Deadline-clock.Now(), "ms")

	send := func(ctx context.Context, payload []byte) error {
		d, _ := retry.DeliveryFrom(ctx)
		if d.Attempt == 1 {
			return retry.Retryable(errors.New("503 from the warehouse"))
		}
		return nil
	}
	j, _ := q.RunOnce(ctx, send)
	fmt.Println(j.State, "attempts", j.Attempts, "retry in", j.AvailableAt-clock.Now(), "ms:", j.LastError)

	j, _ = q.RunOnce(ctx, send)
	fmt.Println("before available_at:", j)

	clock.Advance(50)
	j, _ = q.RunOnce(ctx, send)
	fmt.Println(j.State, "attempts", j.Attempts)

	_, created, _ = q.Enqueue(ctx, queue.NewJob{ID: "order-42"})
	fmt.Println("re-submitted, created:", created)
	// Output:
	// created: true deadline in 86400000 ms
	// pending attempts 1 retry in 50 ms: 503 from the warehouse
	// before available_at: <nil>
	// done attempts 2
	// re-submitted, created: false
}
