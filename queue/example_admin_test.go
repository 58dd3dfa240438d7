package queue_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/staggerhq/stagger/queue"
)

// An operator lists a queue's pending jobs a page at a time, cancels
// one, and reads who did it from the job's history; a job a worker holds
// is not cancelled under its handler.
func ExampleQueue_Cancel() {
	ctx := context.Background()
	store := queue.NewMemoryStore()
	q, _ := queue.New(store, queue.Config{Queue: "imports"})
	for _, id := range []string{"import-1", "import-2", "import-3"} {
		q.Enqueue(ctx, queue.NewJob{ID: id})
	}
	page, _ := q.Jobs(ctx, queue.Filter{State: queue.Pending, IDPrefix: "import-", Limit: 2})
	fmt.Println(len(page.Jobs), "jobs, next page after", page.Next)

	j, _ := q.Cancel(ctx, "import-2", "alice")
	fmt.Println(j.ID, j.State, j.DeadReason)
	h, _ := q.History(ctx, "import-2")
	fmt.Println(h[0].Action, "by", h[0].Actor)

	now := q.Now()
	store.Claim(ctx, "imports", now, now+30_000, 1) // a worker leases import-1
	_, err := q.Cancel(ctx, "import-1", "alice")
	fmt.Println(errors.Is(err, queue.ErrLeased))
	// Output:
	// 2 jobs, next page after import-2
	// import-2 dead canceled
	// cancel by alice
	// true
}

// Pause stops every worker of the queue, in every process, from claiming
// its jobs until Resume.
func ExampleQueue_Pause() {
	ctx := context.Background()
	q, _ := queue.New(queue.NewMemoryStore(), queue.Config{Queue: "webhooks"})
	q.Enqueue(ctx, queue.NewJob{ID: "hook-1"})
	q.Pause(ctx, "", "alice")
	j, _ := q.RunOnce(ctx, func(context.Context, []byte) error { return nil })
	fmt.Println("ran while paused:", j != nil)
	q.Resume(ctx, "", "alice")
	j, _ = q.RunOnce(ctx, func(context.Context, []byte) error { return nil })
	fmt.Println("ran after resume:", j.ID, j.State)
	// Output:
	// ran while paused: false
	// ran after resume: hook-1 done
}
