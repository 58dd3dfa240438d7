package queue_test

import (
	"context"
	"fmt"
	"time"

	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/retry"
)

// A handler behind retryhttp.Guard hands its work to the queue. The
// request ID came from the client, so the job ID is scoped to the caller
// the server authenticated: two callers that send the same ID get two
// jobs, and one caller's re-sends are enqueued once. The job counts on
// from the attempts the work already had (2 of 5): it gets 3 more.
func ExampleScopedID() {
	ctx := context.Background()
	q, _ := queue.New(queue.NewMemoryStore(), queue.Config{})
	handoff := func(caller string, d retry.Delivery) {
		id, err := queue.ScopedID(caller, d.ID)
		if err != nil {
			fmt.Println(err)
			return
		}
		j, err := queue.Handoff(d, queue.NewJob{ID: id, Payload: []byte(caller)})
		if err != nil {
			fmt.Println(err)
			return
		}
		_, created, _ := q.Enqueue(ctx, j)
		fmt.Println(j.ID, "created:", created, "attempts:", j.Attempts, "of", j.MaxAttempts)
	}
	d := retry.Delivery{ID: "order-7", Attempt: 2, MaxAttempts: 5, Source: "http", Deadline: time.Now().Add(time.Minute)}
	handoff("alice", d)
	handoff("mallory", d)
	handoff("alice", d) // alice's re-send: the same job
	_, err := queue.Handoff(d, queue.NewJob{})
	fmt.Println(err != nil)
	// Output:
	// 5:alice:order-7 created: true attempts: 2 of 5
	// 7:mallory:order-7 created: true attempts: 2 of 5
	// 5:alice:order-7 created: false attempts: 2 of 5
	// true
}
