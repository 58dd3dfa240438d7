package queuetest

import (
	"context"
	"fmt"
	"testing"

	"github.com/staggerhq/stagger/queue"
)

// lateStart is a store whose claims take until after the clock passed at:
// the jobs a claim returns start after it, as a prefetched job that waited
// for a handler does.
type lateStart struct {
	queue.Store
	clock *Clock
	at    int64
}

func (l lateStart) Claim(ctx context.Context, name string, now, leaseUntil int64, limit int) ([]queue.Job, error) {
	jobs, err := l.Store.Claim(ctx, name, now, leaseUntil, limit)
	if len(jobs) > 0 {
		l.clock.Set(l.at)
	}
	return jobs, err
}

// testDeadlineAtStart: the deadline is the time by which an attempt must
// have started, so a job claimed before its deadline but started at or
// after it is not run: it ends as the attempt step decides a give-up at its
// deadline (dead, reason deadline), its claimed attempt spent.
func testDeadlineAtStart(t *testing.T, s queue.Store) {
	for _, late := range []int64{0, 1, 181} {
		clock := NewClock(Start)
		id := fmt.Sprintf("late%d", late)
		q, err := queue.New(lateStart{Store: s, clock: clock, at: Start + 100 + late}, queue.Config{Now: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := q.Enqueue(context.Background(), queue.NewJob{ID: id, MaxAttempts: 5, Deadline: Start + 100}); err != nil {
			t.Fatal(err)
		}
		ran := false
		j, err := q.RunOnce(context.Background(), func(context.Context, []byte) error { ran = true; return nil })
		if err != nil || j == nil {
			t.Fatalf("%s: RunOnce = %+v, %v", id, j, err)
		}
		if ran {
			t.Fatalf("%s: the handler started %d ms after the job's deadline", id, late)
		}
		g, err := q.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		expect(t, id, g, queue.Dead, 1, -1, queue.DeadlineReached)
		if g.FinishedAt != Start+100+late || g.LastError == "" {
			t.Fatalf("%s: finished at %d (want %d), last error %q", id, g.FinishedAt, Start+100+late, g.LastError)
		}
	}
	// Started before its deadline, the attempt runs.
	clock := NewClock(Start)
	q, err := queue.New(lateStart{Store: s, clock: clock, at: Start + 99}, queue.Config{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := q.Enqueue(context.Background(), queue.NewJob{ID: "intime", MaxAttempts: 5, Deadline: Start + 100}); err != nil {
		t.Fatal(err)
	}
	if j, err := q.RunOnce(context.Background(), ok); err != nil || j == nil || j.State != queue.Done {
		t.Fatalf("started 1 ms before its deadline: %+v, %v", j, err)
	}
}
