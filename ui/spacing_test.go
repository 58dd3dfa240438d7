package ui_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/staggerhq/stagger/ui"
)

// slowQueues answers Overview after took; the rest of ui.Queues is not
// used here.
type slowQueues struct {
	ui.Queues
	took  time.Duration
	calls atomic.Int32
}

func (q *slowQueues) Overview(ctx context.Context) ([]ui.QueueInfo, error) {
	q.calls.Add(1)
	time.Sleep(q.took) // the bubble's clock: a store's slow count
	return []ui.QueueInfo{{Name: "default"}}, nil
}

// TestRunSpacesSlowCounts: a store whose counts take half the interval
// is counted once per ten counts' time, not every interval; a fast one
// every interval.
func TestRunSpacesSlowCounts(t *testing.T) {
	for _, c := range []struct {
		took     time.Duration
		min, max int32
	}{
		{500 * time.Millisecond, 10, 13}, // 60 s ÷ (10 × 0.5 s), the ticks rounding up
		{time.Millisecond, 59, 60},
	} {
		synctest.Test(t, func(t *testing.T) {
			q := &slowQueues{took: c.took}
			d, err := ui.New(ui.Config{Queues: q, Interval: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { d.Run(ctx); close(done) }()
			time.Sleep(60*time.Second + time.Millisecond)
			cancel()
			<-done
			synctest.Wait()
			if n := q.calls.Load(); n < c.min || n > c.max {
				t.Errorf("counts taking %v: %d in 60 s, want %d–%d", c.took, n, c.min, c.max)
			}
		})
	}
}
