package queue_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/retry"
)

// aheadStore is a store whose claims take 2 ms (virtual) and which counts,
// with the test's handlers, the jobs claimed and started. The handlers
// take 100 µs each, so the jobs of a claim start over several hundred
// µs: a claim that starts while more jobs claimed before it wait than the
// Worker has handlers (conc) was sent ahead (a claim sent once they all
// started finds at most conc just handed to their handlers).
type aheadStore struct {
	queue.Store
	conc             int
	mu               sync.Mutex
	claimed, started int
	claims, ahead    int // claims, and those sent ahead
	inFlight, most   int // claims in flight now, and at most
	waiting          int // the most jobs claimed and not started at once
}

func (s *aheadStore) claim(run func() ([]queue.Job, error)) ([]queue.Job, error) {
	s.mu.Lock()
	s.claims++
	if s.claimed-s.started > s.conc {
		s.ahead++
	}
	s.inFlight++
	s.most = max(s.most, s.inFlight)
	s.mu.Unlock()
	time.Sleep(2 * time.Millisecond) // virtual: the tests run in synctest bubbles
	jobs, err := run()
	s.mu.Lock()
	s.inFlight--
	s.claimed += len(jobs)
	s.waiting = max(s.waiting, s.claimed-s.started)
	s.mu.Unlock()
	return jobs, err
}

// start is a handler's: the job started, and takes 100 µs.
func (s *aheadStore) start() {
	s.mu.Lock()
	s.started++
	s.mu.Unlock()
	time.Sleep(100 * time.Microsecond) // virtual, as in claim
}

// Claim claims, and then, as a store on a network would, answers the
// caller's canceled ctx with its error: the jobs are leased, the answer
// lost.
func (s *aheadStore) Claim(ctx context.Context, name string, now, leaseUntil int64, limit int) ([]queue.Job, error) {
	return s.claim(func() ([]queue.Job, error) {
		jobs, err := s.Store.Claim(context.WithoutCancel(ctx), name, now, leaseUntil, limit)
		if err == nil && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return jobs, err
	})
}

// aheadMerged is aheadStore on a RecordClaimer.
type aheadMerged struct{ *aheadStore }

func (s aheadMerged) RecordAndClaim(ctx context.Context, outs []queue.Outcome, name string, now, leaseUntil int64, limit int) ([]queue.Job, error) {
	return s.claim(func() ([]queue.Job, error) {
		return s.Store.(queue.RecordClaimer).RecordAndClaim(ctx, outs, name, now, leaseUntil, limit)
	})
}

// With outcomes committed beside the claims (BatchSize 256 or more, or a
// store that is not a RecordClaimer) and handlers short next to a claim,
// a Worker sends each claim that follows a full one ahead, while the jobs
// of the last are still starting: the claims keep the store busy. Still
// one claim of the loop is in flight at a time, at most 2 × BatchSize jobs
// wait claimed and not started, and every job runs once.
func TestWorkerClaimsAhead(t *testing.T) {
	for _, c := range []struct {
		name   string
		merged bool
		batch  int
		ahead  bool
	}{
		{"merged/batch=256", true, 256, true},
		{"separate/batch=64", false, 64, true},
		{"merged/batch=64", true, 64, false}, // outcomes ride in the claims' transactions
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := &aheadStore{Store: queue.NewMemoryStore(), conc: 8}
				var qs queue.Store = plainStore{s}
				if c.merged {
					qs = aheadMerged{s}
				}
				q := newQueueOn(t, qs, queue.Config{})
				ctx := context.Background()
				const n = 3000
				enqueueN(t, q, n)
				var mu sync.Mutex
				runs := map[string]int{}
				var done atomic.Int32
				rctx, cancel := context.WithCancel(ctx)
				defer cancel()
				w, err := queue.NewWorker(q, func(ctx context.Context, _ []byte) error {
					s.start()
					d, _ := retry.DeliveryFrom(ctx)
					mu.Lock()
					runs[d.ID]++
					mu.Unlock()
					if done.Add(1) == n {
						cancel()
					}
					return nil
				}, queue.WorkerConfig{Concurrency: 8, BatchSize: c.batch, Loops: 1, PollInterval: time.Second,
					OnError: func(err error) { t.Error(err) }})
				if err != nil {
					t.Fatal(err)
				}
				if err := w.Run(rctx); err != nil {
					t.Fatal(err)
				}
				doneOnce(t, q, n, runs)
				s.mu.Lock()
				defer s.mu.Unlock()
				t.Logf("%d claims, %d sent ahead; at most %d jobs waiting", s.claims, s.ahead, s.waiting)
				switch {
				case s.most != 1:
					t.Errorf("%d claims in flight at once, want 1", s.most)
				case s.waiting > 2*c.batch:
					t.Errorf("%d jobs claimed and not started at once, want at most 2 × BatchSize (%d)", s.waiting, 2*c.batch)
				case c.ahead && s.ahead < s.claims/2:
					t.Errorf("%d of %d claims sent ahead, want most", s.ahead, s.claims)
				case !c.ahead && s.ahead > 0:
					t.Errorf("%d of %d claims sent ahead, want none", s.ahead, s.claims)
				}
			})
		})
	}
}

// A claim sent ahead that returns after the shutdown began is not lost:
// its jobs start on the handlers during Grace, so none is left leased
// (its attempt spent, waiting for the lease to expire) and every job the
// worker ran is done.
func TestWorkerShutdownTakesTheClaimAhead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &aheadStore{Store: queue.NewMemoryStore(), conc: 8}
		q := newQueueOn(t, plainStore{s}, queue.Config{})
		ctx := context.Background()
		const n = 3000
		enqueueN(t, q, n)
		var ran atomic.Int32
		rctx, cancel := context.WithCancel(ctx)
		defer cancel()
		w, err := queue.NewWorker(q, func(context.Context, []byte) error {
			s.start()
			if ran.Add(1) == n/3 {
				cancel() // a claim is in flight: one is nearly always, sent ahead
			}
			return nil
		}, queue.WorkerConfig{Concurrency: 8, BatchSize: 64, Loops: 1, PollInterval: time.Second,
			OnError: func(err error) { t.Error(err) }})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Run(rctx); err != nil {
			t.Fatal(err)
		}
		st, err := q.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if st.Leased != 0 || st.Done != int64(ran.Load()) || st.Done+st.Pending() != n || s.claimed != s.started {
			t.Fatalf("after the shutdown: %d leased, %d done of %d run, %d pending; %d claimed, %d started",
				st.Leased, st.Done, ran.Load(), st.Pending(), s.claimed, s.started)
		}
		if s.ahead == 0 {
			t.Fatalf("no claim was sent ahead (%d claims)", s.claims)
		}
	})
}

// enqueueN enqueues n jobs with IDs j0000, j0001, ….
func enqueueN(t *testing.T, q *queue.Queue, n int) {
	t.Helper()
	jobs := make([]queue.NewJob, n)
	for i := range jobs {
		jobs[i] = queue.NewJob{ID: fmt.Sprintf("j%04d", i)}
	}
	if _, err := q.EnqueueMany(context.Background(), jobs); err != nil {
		t.Fatal(err)
	}
}
