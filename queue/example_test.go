package queue_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/staggerhq/stagger/backoff"
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
		Policy: &retry.Policy{
			Schedule: backoff.Ratio{Base: 100 * time.Millisecond, Cap: time.Second},
			Rand:     queuetest.FixedRatio(0.5),
		},
		Now: clock.Now,
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

// A Worker runs handlers for due jobs until its context ends: here two
// handlers at once drain three orders, one of which fails once and is
// retried, and one of which is malformed and goes dead at once. The ratio
// is fixed at 0, so a retry is due at once and the example runs in a moment.
func ExampleWorker() {
	q, err := queue.New(queue.NewMemoryStore(), queue.Config{Policy: &retry.Policy{Rand: queuetest.FixedRatio(0)}})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, id := range []string{"order-1", "order-2", "order-3"} {
		if _, _, err := q.Enqueue(ctx, queue.NewJob{ID: id, Payload: []byte(id), MaxAttempts: 3}); err != nil {
			panic(err)
		}
	}

	var mu sync.Mutex
	settled := 0
	handle := func(ctx context.Context, payload []byte) error {
		d, _ := retry.DeliveryFrom(ctx)
		var err error
		switch {
		case d.ID == "order-3":
			err = retry.Permanent(errors.New("malformed order"))
		case d.ID == "order-2" && d.Attempt == 1:
			return retry.Retryable(errors.New("warehouse: 503"))
		}
		mu.Lock()
		if settled++; settled == 3 {
			cancel() // everything is done or dead: stop the worker
		}
		mu.Unlock()
		return err
	}
	w, err := queue.NewWorker(q, handle, queue.WorkerConfig{Concurrency: 2})
	if err != nil {
		panic(err)
	}
	if err := w.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		panic(err)
	}

	for _, id := range []string{"order-1", "order-2", "order-3"} {
		j, _ := q.Get(context.Background(), id)
		line := fmt.Sprintf("%s: %s, attempts %d", j.ID, j.State, j.Attempts)
		if j.State == queue.Dead {
			line += ", " + string(j.DeadReason)
		}
		if j.LastError != "" {
			line += ", last error: " + j.LastError
		}
		fmt.Println(line)
	}
	// Output:
	// order-1: done, attempts 1
	// order-2: done, attempts 2, last error: warehouse: 503
	// order-3: dead, attempts 1, permanent, last error: malformed order
}

// One Worker serves two queues of one store, each with its own Policy,
// handler and concurrency: webhooks get more attempts and more handlers
// than orders, and a backlog of one cannot hold up the other.
func ExampleNewMultiWorker() {
	store := queue.NewMemoryStore()
	orders, err := queue.New(store, queue.Config{Queue: "orders"})
	if err != nil {
		panic(err)
	}
	webhooks, err := queue.New(store, queue.Config{Queue: "webhooks", Policy: &retry.Policy{MaxAttempts: 20}})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range 3 {
		orders.Enqueue(ctx, queue.NewJob{ID: fmt.Sprintf("order-%d", i)})
		webhooks.Enqueue(ctx, queue.NewJob{ID: fmt.Sprintf("hook-%d", i)})
	}
	var left atomic.Int32
	left.Store(6)
	handle := func(context.Context, []byte) error {
		if left.Add(-1) == 0 {
			cancel() // every job is done: stop the worker
		}
		return nil
	}
	w, err := queue.NewMultiWorker(queue.WorkerConfig{},
		queue.Serve{Queue: orders, Handler: handle, Concurrency: 1},
		queue.Serve{Queue: webhooks, Handler: handle, Concurrency: 8},
	)
	if err != nil {
		panic(err)
	}
	if err := w.Run(ctx); err != nil {
		panic(err)
	}
	for _, q := range []*queue.Queue{orders, webhooks} {
		st, _ := q.Stats(context.Background())
		j, _ := q.Get(context.Background(), map[string]string{"orders": "order-0", "webhooks": "hook-0"}[q.Config().Queue])
		fmt.Printf("%s: done %d, a job's max attempts %d\n", q.Config().Queue, st.Done, j.MaxAttempts)
	}
	// Output:
	// orders: done 3, a job's max attempts 10
	// webhooks: done 3, a job's max attempts 20
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
