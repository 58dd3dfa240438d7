package queue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/retry"
)

// TestRedrivePaced: Redrive requeues the selected dead jobs one every
// 1/Rate seconds, never faster, each with its own deadline.
func TestRedrivePaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(t, queue.Config{})
		ctx := context.Background()
		for i := range 6 {
			id := fmt.Sprintf("j%d", i)
			if _, _, err := q.Enqueue(ctx, queue.NewJob{ID: id, MaxAttempts: 1}); err != nil {
				t.Fatal(err)
			}
			if _, err := q.RunOnce(ctx, func(context.Context, []byte) error { return retry.Permanent(errors.New("no")) }); err != nil {
				t.Fatal(err)
			}
		}
		start := time.Now()
		var at []time.Duration
		var deadlines []int64
		res, err := q.Redrive(ctx, queue.Redrive{Grant: 2, Deadline: time.Hour, Rate: 4, Limit: 5,
			OnJob: func(j queue.Job) {
				at = append(at, time.Since(start))
				deadlines = append(deadlines, j.Deadline-time.Now().UnixMilli())
				if j.State != queue.Pending || j.MaxAttempts != 3 {
					t.Errorf("requeued %+v", j)
				}
			}})
		if err != nil || res.Requeued != 5 || res.Skipped != 0 {
			t.Fatalf("Redrive = %+v, %v", res, err)
		}
		for i, d := range at {
			if want := time.Duration(i) * 250 * time.Millisecond; d != want {
				t.Fatalf("job %d requeued at %v, want %v (4/s)", i, d, want)
			}
			if deadlines[i] != time.Hour.Milliseconds() {
				t.Fatalf("job %d deadline %d ms after its requeue", i, deadlines[i])
			}
		}
		if st, _ := q.Stats(ctx); st.DeadPermanent != 1 || st.PendingDue != 5 {
			t.Fatalf("after Redrive: %+v", st)
		}
	})
}

func TestRedriveCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(t, queue.Config{})
		ctx, cancel := context.WithCancel(context.Background())
		for i := range 3 {
			q.Enqueue(ctx, queue.NewJob{ID: fmt.Sprintf("j%d", i), MaxAttempts: 1})
			q.RunOnce(ctx, func(context.Context, []byte) error { return retry.Permanent(errors.New("no")) })
		}
		res, err := q.Redrive(ctx, queue.Redrive{Grant: 1, Deadline: time.Hour, Rate: 0.1,
			OnJob: func(queue.Job) { cancel() }})
		if !errors.Is(err, context.Canceled) || res.Requeued != 1 {
			t.Fatalf("Redrive after cancel = %+v, %v", res, err)
		}
	})
}

func TestRedriveValidation(t *testing.T) {
	q := newQueue(t, queue.Config{})
	ok := queue.Redrive{Grant: 1, Deadline: time.Hour, Rate: 1}
	for want, mod := range map[string]func(*queue.Redrive){
		"reason must be":     func(r *queue.Redrive) { r.Reason = "bored" },
		"older-than and":     func(r *queue.Redrive) { r.OlderThan = -1 },
		"newer-than (1h0m0s": func(r *queue.Redrive) { r.OlderThan, r.NewerThan = 2*time.Hour, time.Hour },
		"limit must be":      func(r *queue.Redrive) { r.Limit = -1 },
		"attempts (granted)": func(r *queue.Redrive) { r.Grant = 0 },
		"deadline must be":   func(r *queue.Redrive) { r.Deadline = 0 },
		"rate must be":       func(r *queue.Redrive) { r.Rate = 0 },
		"rate must be ":      func(r *queue.Redrive) { r.Rate = queue.MaxRedriveRate + 1 },
	} {
		r := ok
		mod(&r)
		if _, err := q.Redrive(context.Background(), r); !errors.Is(err, queue.ErrInvalid) || !strings.Contains(err.Error(), strings.TrimSpace(want)) {
			t.Errorf("Redrive(%+v) = %v, want %q", r, err, want)
		}
	}
}
