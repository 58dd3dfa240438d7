package queue_test

import (
	"context"
	"fmt"

	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/queue/queuetest"
)

// A queue's lag is the age of its oldest due job: a gauge polls Lag, a
// read-only lookup that changes no job.
func ExampleQueue_Lag() {
	ctx := context.Background()
	clock := queuetest.NewClock(queuetest.Start)
	q, _ := queue.New(queue.NewMemoryStore(), queue.Config{Now: clock.Now})
	lag, _ := q.Lag(ctx)
	fmt.Println("empty:", lag)
	q.Enqueue(ctx, queue.NewJob{ID: "a"})
	clock.Advance(1500)
	q.Enqueue(ctx, queue.NewJob{ID: "b"})
	clock.Advance(500)
	lag, _ = q.Lag(ctx)
	fmt.Println("two waiting:", lag)
	// Output:
	// empty: 0s
	// two waiting: 2s
}
