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

// A handler that waits for something outside the queue snoozes instead of
// failing: the job runs again later, with no error and no dead reason, and
// the snooze spends the attempt the claim counted.
func ExampleSnooze() {
	ctx := context.Background()
	clock := queuetest.NewClock(queuetest.Start)
	q, _ := queue.New(queue.NewMemoryStore(), queue.Config{Now: clock.Now})
	q.Enqueue(ctx, queue.NewJob{ID: "report-9", MaxAttempts: 5})

	ready := false
	build := func(context.Context, []byte) error {
		if !ready {
			return queue.Snooze(time.Minute) // the data is not in yet
		}
		return nil
	}
	j, err := q.RunOnce(ctx, build)
	fmt.Println(j.State, "attempts", j.Attempts, "again in", time.Duration(j.AvailableAt-clock.Now())*time.Millisecond, "error:", err, j.LastError == "")

	ready = true
	clock.Advance(time.Minute.Milliseconds())
	j, _ = q.RunOnce(ctx, build)
	fmt.Println(j.State, "attempts", j.Attempts)
	// Output:
	// pending attempts 1 again in 1m0s error: <nil> true
	// done attempts 2
}

// After a fix, the dead jobs of one reason are requeued at a pace the
// recovered dependency can take (here 1000 a second).
func ExampleQueue_Redrive() {
	ctx := context.Background()
	q, _ := queue.New(queue.NewMemoryStore(), queue.Config{})
	for _, id := range []string{"hook-1", "hook-2", "hook-3"} {
		q.Enqueue(ctx, queue.NewJob{ID: id, MaxAttempts: 1})
		q.RunOnce(ctx, func(context.Context, []byte) error { return retry.Permanent(errors.New("410 Gone")) })
	}
	res, err := q.Redrive(ctx, queue.Redrive{
		Reason: queue.PermanentFailure, Grant: 3, Deadline: time.Hour, Rate: 1000,
		OnJob: func(j queue.Job) { fmt.Println("requeued", j.ID, "attempts", j.Attempts, "of", j.MaxAttempts) },
	})
	fmt.Println(res.Requeued, "requeued", err)
	// Output:
	// requeued hook-1 attempts 1 of 4
	// requeued hook-2 attempts 1 of 4
	// requeued hook-3 attempts 1 of 4
	// 3 requeued <nil>
}
