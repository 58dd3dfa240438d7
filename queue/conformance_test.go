package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retry/drivertest"
)

// TestDriverConformance: a job run with RunOnce, claimed again whenever it
// is due, makes the same calls to the policy's hooks, Budget and Limiter
// as retry.Do. The policy's Timeout becomes the job's deadline and its
// MaxAttempts the job's max_attempts, as a job row governs them.
func TestDriverConformance(t *testing.T) {
	drivertest.Run(t, drivertest.Driver{
		Name:           "queue.RunOnce",
		Durable:        true,
		NoWaitCancel:   true,
		RecoversPanics: true,
		Run: func(ctx context.Context, p *retry.Policy, attempt func(context.Context) error) {
			jp := *p
			timeout, maxAttempts := jp.Timeout, jp.MaxAttempts
			jp.Timeout, jp.MaxAttempts = 0, 0
			q, err := queue.New(queue.NewMemoryStore(), queue.Config{Policy: &jp, Lease: time.Hour, AttemptTimeout: time.Hour})
			if err != nil {
				panic(err)
			}
			nj := queue.NewJob{ID: "j1", MaxAttempts: maxAttempts}
			if timeout > 0 {
				nj.Deadline = time.Now().Add(timeout).UnixMilli()
			}
			if _, _, err := q.Enqueue(ctx, nj); err != nil {
				panic(err)
			}
			h := func(ctx context.Context, _ []byte) error { return attempt(ctx) }
			for ctx.Err() == nil {
				j, err := q.RunOnce(ctx, h)
				switch {
				case ctx.Err() != nil:
					return
				case j == nil && err == nil: // nothing due: wait for the job's time
					cur, gerr := q.Get(ctx, "j1")
					if gerr != nil || cur.State != queue.Pending {
						return
					}
					time.Sleep(time.Until(time.UnixMilli(cur.AvailableAt)) + time.Millisecond)
				case j == nil:
					panic(err)
				case j.State == queue.Done || j.State == queue.Dead || j.State == queue.Leased:
					return
				}
			}
		},
	})
}
