package queue_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/queue/queuetest"
	"github.com/staggerhq/stagger/retry"
)

// virtualNow is the bubble's clock in Unix ms (synctest makes time.Now virtual).
func virtualNow() int64 { return time.Now().UnixMilli() }

// plainStore hides the MemoryStore's RecordAndClaim, so the Worker takes
// its other path: outcomes committed beside the claims.
type plainStore struct{ queue.Store }

// storeKinds are the two commit paths of a Worker.
var storeKinds = map[string]func() queue.Store{
	"merged":   func() queue.Store { return queue.NewMemoryStore() },
	"separate": func() queue.Store { return plainStore{queue.NewMemoryStore()} },
}

// eachStoreKind runs test once per commit path, in subtests.
func eachStoreKind(t *testing.T, test func(t *testing.T, newStore func() queue.Store)) {
	for kind, newStore := range storeKinds {
		t.Run(kind, func(t *testing.T) { test(t, newStore) })
	}
}

func newQueue(t *testing.T, cfg queue.Config) *queue.Queue {
	return newQueueOn(t, queue.NewMemoryStore(), cfg)
}

func newQueueOn(t *testing.T, s queue.Store, cfg queue.Config) *queue.Queue {
	t.Helper()
	if cfg.Now == nil {
		cfg.Now = virtualNow
	}
	q, err := queue.New(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func TestWorkerProcessesEverything(t *testing.T) { eachStoreKind(t, testWorkerProcessesEverything) }

func testWorkerProcessesEverything(t *testing.T, newStore func() queue.Store) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueueOn(t, newStore(), queue.Config{Policy: &retry.Policy{Schedule: backoff.Ratio{Base: 10 * time.Millisecond, Cap: 100 * time.Millisecond}}})
		const n = 200
		var jobs []queue.NewJob
		for i := range n {
			jobs = append(jobs, queue.NewJob{ID: fmt.Sprintf("j%03d", i), MaxAttempts: 5})
		}
		if _, err := q.EnqueueMany(context.Background(), jobs); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		calls := map[string]int{}
		h := func(ctx context.Context, _ []byte) error {
			d, _ := retry.DeliveryFrom(ctx)
			mu.Lock()
			calls[d.ID]++
			c := calls[d.ID]
			mu.Unlock()
			time.Sleep(3 * time.Millisecond)
			if c == 1 && strings.HasSuffix(d.ID, "7") {
				return retry.Retryable(errors.New("flaky"))
			}
			return nil
		}
		var errs []error
		w, err := queue.NewWorker(q, h, queue.WorkerConfig{Concurrency: 4, BatchSize: 3, PollInterval: 20 * time.Millisecond,
			OnError: func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- w.Run(ctx) }()
		for {
			time.Sleep(50 * time.Millisecond)
			st, _ := q.Stats(context.Background())
			if st.Done == n {
				break
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if len(errs) > 0 {
			t.Fatalf("worker errors: %v", errs)
		}
		for i := range n {
			id := fmt.Sprintf("j%03d", i)
			want := 1
			if strings.HasSuffix(id, "7") {
				want = 2
			}
			if calls[id] != want {
				t.Fatalf("%s called %d times, want %d", id, calls[id], want)
			}
			if j, _ := q.Get(context.Background(), id); j.Attempts != want || j.State != queue.Done {
				t.Fatalf("%s: %+v", id, j)
			}
		}
	})
}

func TestHeartbeatKeepsLongHandlersLeased(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(t, queue.Config{Policy: &retry.Policy{AttemptTimeout: time.Hour}, Lease: 300 * time.Millisecond})
		ctx := context.Background()
		if _, _, err := q.Enqueue(ctx, queue.NewJob{ID: "long", MaxAttempts: 3}); err != nil {
			t.Fatal(err)
		}
		var stolen atomic.Int32
		j, err := q.RunOnce(ctx, func(ctx context.Context, _ []byte) error {
			for range 10 { // 2 s, well past the 300 ms lease
				time.Sleep(200 * time.Millisecond)
				other, err := q.RunOnce(ctx, func(context.Context, []byte) error { return nil })
				if err != nil || other != nil {
					stolen.Add(1)
				}
			}
			return nil
		})
		if err != nil || j.State != queue.Done || j.Attempts != 1 || stolen.Load() != 0 {
			t.Fatalf("job %+v err %v; claimed by another worker %d times", j, err, stolen.Load())
		}
	})
}

// A handler that ignores its context does not hold its job for ever: the
// heartbeat stops when the attempt's timeout fires, so the lease runs out
// and another worker takes the job.
func TestHungHandlerLosesItsLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(t, queue.Config{Policy: &retry.Policy{AttemptTimeout: time.Second}, Lease: 300 * time.Millisecond})
		ctx := context.Background()
		q.Enqueue(ctx, queue.NewJob{ID: "hung", MaxAttempts: 3})
		release := make(chan struct{})
		first := make(chan error, 1)
		go func() {
			_, err := q.RunOnce(ctx, func(context.Context, []byte) error { <-release; return nil })
			first <- err
		}()
		// Still within the attempt's timeout: the heartbeat keeps the job.
		time.Sleep(900 * time.Millisecond)
		if j, err := q.RunOnce(ctx, func(context.Context, []byte) error { return nil }); j != nil || err != nil {
			t.Fatalf("claimed while the first attempt was within its timeout: %+v %v", j, err)
		}
		// Past the timeout plus one lease: claimable again.
		time.Sleep(500 * time.Millisecond)
		j, err := q.RunOnce(ctx, func(context.Context, []byte) error { return nil })
		if err != nil || j == nil || j.Attempts != 2 || j.State != queue.Done {
			t.Fatalf("job of a hung handler: %+v %v", j, err)
		}
		close(release)
		if err := <-first; !errors.Is(err, queue.ErrLeaseLost) {
			t.Fatalf("the hung attempt returned %v, want ErrLeaseLost", err)
		}
		if j, _ := q.Get(ctx, "hung"); j.State != queue.Done || j.Attempts != 2 {
			t.Fatalf("the hung attempt's late outcome changed the job: %+v", j)
		}
	})
}

func TestLostLeaseCancelsHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(t, queue.Config{Policy: &retry.Policy{AttemptTimeout: time.Hour}, Lease: 300 * time.Millisecond})
		ctx := context.Background()
		q.Enqueue(ctx, queue.NewJob{ID: "x", MaxAttempts: 3})
		var cause error
		_, err := q.RunOnce(ctx, func(hctx context.Context, _ []byte) error {
			// An operator (or a bug) takes the job away: another claim at a
			// time past the lease, as if this worker's clock had stalled.
			if _, err := q.Store().Claim(ctx, queue.DefaultQueue, virtualNow()+time.Hour.Milliseconds(), virtualNow()+2*time.Hour.Milliseconds(), 1); err != nil {
				t.Error(err)
			}
			<-hctx.Done()
			cause = context.Cause(hctx)
			return hctx.Err()
		})
		if !errors.Is(err, queue.ErrLeaseLost) || !errors.Is(cause, queue.ErrLeaseLost) {
			t.Fatalf("err %v cause %v, want ErrLeaseLost", err, cause)
		}
		if j, _ := q.Get(ctx, "x"); j.Attempts != 2 || j.State != queue.Leased {
			t.Fatalf("the new owner's lease was touched: %+v", j)
		}
	})
}

func TestAttemptTimeoutIsRetryable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(t, queue.Config{Policy: &retry.Policy{Schedule: backoff.Ratio{Base: time.Second, Cap: time.Second}, AttemptTimeout: 50 * time.Millisecond, Rand: queuetest.FixedRatio(0.5)}})
		ctx := context.Background()
		q.Enqueue(ctx, queue.NewJob{ID: "slow", MaxAttempts: 3})
		start := virtualNow()
		j, err := q.RunOnce(ctx, func(ctx context.Context, _ []byte) error {
			<-ctx.Done()
			return ctx.Err()
		})
		if err != nil || j.State != queue.Pending || j.AvailableAt != start+50+500 {
			t.Fatalf("timed-out attempt: %+v, %v", j, err)
		}
	})
}

func TestShutdownGrace(t *testing.T) { eachStoreKind(t, testShutdownGrace) }

func testShutdownGrace(t *testing.T, newStore func() queue.Store) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueueOn(t, newStore(), queue.Config{Policy: &retry.Policy{AttemptTimeout: time.Hour}, Lease: time.Minute})
		ctx := context.Background()
		q.Enqueue(ctx, queue.NewJob{ID: "finishes", MaxAttempts: 3})
		q.Enqueue(ctx, queue.NewJob{ID: "canceled", MaxAttempts: 3})
		q.Enqueue(ctx, queue.NewJob{ID: "waiting", MaxAttempts: 3, AvailableAt: virtualNow() + 60_000})
		h := func(hctx context.Context, _ []byte) error {
			d, _ := retry.DeliveryFrom(hctx)
			if d.ID == "finishes" {
				time.Sleep(time.Second) // within the grace period
				return nil
			}
			<-hctx.Done() // only the grace period's end stops it
			return hctx.Err()
		}
		w, err := queue.NewWorker(q, h, queue.WorkerConfig{Concurrency: 2, Grace: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error)
		start := time.Now()
		go func() { done <- w.Run(rctx) }()
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if el := time.Since(start); el < 5*time.Second || el > 6*time.Second {
			t.Fatalf("shutdown took %v, want the 5s grace period", el)
		}
		f, _ := q.Get(ctx, "finishes")
		c, _ := q.Get(ctx, "canceled")
		wt, _ := q.Get(ctx, "waiting")
		if f.State != queue.Done || c.State != queue.Pending || c.Attempts != 1 || !strings.Contains(c.LastError, "released") || wt.Attempts != 0 {
			t.Fatalf("after shutdown: %+v\n%+v\n%+v", f, c, wt)
		}
	})
}

func TestShutdownTimeoutLeavesLeased(t *testing.T) { eachStoreKind(t, testShutdownTimeoutLeavesLeased) }

func testShutdownTimeoutLeavesLeased(t *testing.T, newStore func() queue.Store) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueueOn(t, newStore(), queue.Config{Policy: &retry.Policy{AttemptTimeout: time.Hour}, Lease: time.Minute})
		ctx := context.Background()
		q.Enqueue(ctx, queue.NewJob{ID: "stubborn", MaxAttempts: 3})
		release := make(chan struct{})
		w, _ := queue.NewWorker(q, func(context.Context, []byte) error { <-release; return nil }, queue.WorkerConfig{Grace: time.Second})
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error)
		go func() { done <- w.Run(rctx) }()
		synctest.Wait()
		cancel()
		if err := <-done; !errors.Is(err, queue.ErrShutdownTimeout) {
			t.Fatalf("Run = %v, want ErrShutdownTimeout", err)
		}
		if j, _ := q.Get(ctx, "stubborn"); j.State != queue.Leased {
			t.Fatalf("stubborn job %+v", j)
		}
		close(release)
		synctest.Wait()
	})
}

func TestEnqueueWakesIdleWorker(t *testing.T) {
	// The worker runs queue "b" through one Queue value; the job is
	// enqueued (or requeued, or woken after a transaction) through
	// another value, or the same.
	type enqueuer func(t *testing.T, worker *queue.Queue, s queue.Store)
	enqueue := func(name string, j queue.NewJob) enqueuer {
		return func(t *testing.T, worker *queue.Queue, s queue.Store) {
			q := worker
			if name != "" {
				q = newQueueOn(t, s, queue.Config{Queue: name})
			}
			if _, _, err := q.Enqueue(context.Background(), j); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, c := range []struct {
		name string
		do   enqueuer
	}{
		{"the worker's Queue", enqueue("", queue.NewJob{ID: "now"})},
		{"another Queue of the same name", enqueue("b", queue.NewJob{ID: "now"})},
		{"a Queue of another name", enqueue("a", queue.NewJob{ID: "now", Queue: "b"})},
		{"Wake after a store's own insert", func(t *testing.T, _ *queue.Queue, s queue.Store) {
			q := newQueueOn(t, s, queue.Config{Queue: "b"})
			rows, err := q.NewRows([]queue.NewJob{{ID: "now"}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Insert(context.Background(), rows); err != nil {
				t.Fatal(err)
			}
			q.Wake()
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := queue.NewMemoryStore()
				q := newQueueOn(t, s, queue.Config{Queue: "b"})
				ran := make(chan time.Time, 1)
				w, _ := queue.NewWorker(q, func(context.Context, []byte) error { ran <- time.Now(); return nil },
					queue.WorkerConfig{PollInterval: time.Hour, SweepInterval: time.Hour})
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error)
				go func() { done <- w.Run(ctx) }()
				time.Sleep(time.Minute) // idle, far from the next poll
				synctest.Wait()
				c.do(t, q, s)
				synctest.Wait() // the bubble's clock stands still meanwhile
				select {
				case <-ran:
				default:
					t.Error("the idle worker did not wake: the job waits for the next poll")
				}
				cancel()
				<-done
			})
		})
	}
}

// A retry, a snooze and a delayed job run when they are due, not at the
// next poll: an idle loop sleeps until the first due time its Queue knows
// of. The poll is an hour; every wait below is the schedule's own.
func TestDueJobsRunOnTime(t *testing.T) {
	for _, c := range []struct {
		name  string
		store func() queue.Store
	}{
		{"outcomes with the claim", func() queue.Store { return queue.NewMemoryStore() }},
		{"outcomes beside the claim", func() queue.Store { return plainStore{queue.NewMemoryStore()} }},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := c.store()
				q := newQueueOn(t, s, queue.Config{Policy: &retry.Policy{MaxAttempts: 3, Schedule: backoff.Constant(100 * time.Millisecond)}})
				type run struct {
					id string
					at time.Duration
				}
				start := time.Now()
				var mu sync.Mutex
				var runs []run
				h := func(ctx context.Context, _ []byte) error {
					d, _ := retry.DeliveryFrom(ctx)
					mu.Lock()
					runs = append(runs, run{fmt.Sprintf("%s#%d", d.ID, d.Attempt), time.Since(start)})
					mu.Unlock()
					switch {
					case d.ID == "retried" && d.Attempt < 3:
						return retry.Retryable(errors.New("down"))
					case d.ID == "snoozed" && d.Attempt == 1:
						return queue.Snooze(250 * time.Millisecond)
					}
					return nil
				}
				w, err := queue.NewWorker(q, h, queue.WorkerConfig{PollInterval: time.Hour, SweepInterval: time.Hour})
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error)
				go func() { done <- w.Run(ctx) }()
				synctest.Wait()
				// Another Queue value of the same queue enqueues: the
				// worker's learns the delayed job's due time too.
				other := newQueueOn(t, s, queue.Config{})
				now := q.Now()
				if _, err := other.EnqueueMany(ctx, []queue.NewJob{
					{ID: "retried"}, {ID: "snoozed"}, {ID: "delayed", AvailableAt: now + 330},
				}); err != nil {
					t.Fatal(err)
				}
				time.Sleep(time.Second)
				synctest.Wait()
				cancel()
				<-done
				want := []run{
					{"retried#1", 0}, {"snoozed#1", 0},
					{"retried#2", 100 * time.Millisecond},
					{"retried#3", 200 * time.Millisecond},
					{"snoozed#2", 250 * time.Millisecond},
					{"delayed#1", 330 * time.Millisecond},
				}
				mu.Lock()
				defer mu.Unlock()
				slices.SortStableFunc(runs, func(a, b run) int { return int(a.at - b.at) })
				if !slices.Equal(runs, want) {
					t.Errorf("runs (attempt, when)\n got %v\nwant %v", runs, want)
				}
			})
		})
	}
}

// countedClaims counts the claims made through it.
type countedClaims struct {
	queue.Store
	n atomic.Int32
}

func (c *countedClaims) Claim(ctx context.Context, name string, now, leaseUntil int64, limit int) ([]queue.Job, error) {
	c.n.Add(1)
	return c.Store.Claim(ctx, name, now, leaseUntil, limit)
}

// A queue clock that does not follow the timers (a test's manual clock)
// does not make an idle loop claim at every due-time wake: after one sleep
// that the clock did not see pass, the due time is left to the poll.
func TestDueTimeWithAFrozenClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := queuetest.NewClock(queuetest.Start)
		s := &countedClaims{Store: queue.NewMemoryStore()}
		q := newQueueOn(t, s, queue.Config{Now: clock.Now, Policy: &retry.Policy{Schedule: backoff.Constant(100 * time.Millisecond)}})
		w, err := queue.NewWorker(q, func(context.Context, []byte) error { return retry.Retryable(errors.New("down")) },
			queue.WorkerConfig{PollInterval: time.Hour, SweepInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- w.Run(ctx) }()
		if _, _, err := q.Enqueue(ctx, queue.NewJob{ID: "a"}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second) // 100 retry waits, on a clock that stands still
		synctest.Wait()
		cancel()
		<-done
		if n := s.n.Load(); n > 5 {
			t.Errorf("%d claims in 10 s with an hour's poll: the loop claims at every due-time wake", n)
		}
	})
}

// cancelingStore cancels the worker's context during every claim.
type cancelingStore struct {
	queue.Store
	cancel context.CancelFunc
}

func (c *cancelingStore) Claim(ctx context.Context, name string, now, leaseUntil int64, limit int) ([]queue.Job, error) {
	c.cancel()
	return c.Store.Claim(ctx, name, now, leaseUntil, limit)
}

// A shutdown that begins while an idle worker claims ends at once: the
// worker does not sleep a poll interval first (and Run does not report a
// shutdown timeout).
func TestShutdownDuringIdleClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		q := newQueueOn(t, &cancelingStore{Store: queue.NewMemoryStore(), cancel: cancel}, queue.Config{})
		w, _ := queue.NewWorker(q, func(context.Context, []byte) error { return nil },
			queue.WorkerConfig{PollInterval: time.Hour, SweepInterval: time.Hour})
		start := time.Now()
		if err := w.Run(ctx); err != nil {
			t.Fatalf("Run = %v", err)
		}
		if took := time.Since(start); took != 0 {
			t.Fatalf("shutdown took %v", took)
		}
	})
}

func TestPollJitterSpreads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Two idle workers on one store must not poll in step.
		s := &countingStore{MemoryStore: queue.NewMemoryStore()}
		q, _ := queue.New(s, queue.Config{Now: virtualNow})
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for range 2 {
			w, _ := queue.NewWorker(q, func(context.Context, []byte) error { return nil },
				queue.WorkerConfig{PollInterval: 100 * time.Millisecond, SweepInterval: time.Hour})
			wg.Add(1)
			go func() { defer wg.Done(); w.Run(ctx) }()
		}
		time.Sleep(10 * time.Second)
		cancel()
		wg.Wait()
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(s.claims) < 150 || len(s.claims) > 250 {
			t.Fatalf("%d claims in 10s from 2 workers polling every 100ms on average", len(s.claims))
		}
		same := 0
		for i := 1; i < len(s.claims); i++ {
			if s.claims[i] == s.claims[i-1] {
				same++
			}
		}
		if same > len(s.claims)/10 {
			t.Fatalf("%d of %d claims at the same instant as another: polling in step", same, len(s.claims))
		}
	})
}

type countingStore struct {
	*queue.MemoryStore
	mu     sync.Mutex
	claims []time.Time
}

func (c *countingStore) Claim(ctx context.Context, name string, now, leaseUntil int64, limit int) ([]queue.Job, error) {
	c.mu.Lock()
	c.claims = append(c.claims, time.Now())
	c.mu.Unlock()
	return c.MemoryStore.Claim(ctx, name, now, leaseUntil, limit)
}

func TestWorkerConfigValidation(t *testing.T) {
	q := newQueue(t, queue.Config{})
	h := func(context.Context, []byte) error { return nil }
	for field, cfg := range map[string]queue.WorkerConfig{
		"Concurrency":   {Concurrency: -1},
		"Concurrency ":  {Concurrency: queue.MaxConcurrency + 1},
		"BatchSize":     {BatchSize: -5},
		"PollInterval":  {PollInterval: -time.Second},
		"SweepInterval": {SweepInterval: time.Microsecond},
		"Grace":         {Grace: queue.MaxDuration + 1},
	} {
		if _, err := queue.NewWorker(q, h, cfg); !errors.Is(err, queue.ErrInvalid) || !strings.Contains(err.Error(), strings.TrimSpace(field)) {
			t.Errorf("NewWorker(%+v) = %v, want an error naming %s", cfg, err, field)
		}
	}
	if _, err := queue.NewWorker(q, nil, queue.WorkerConfig{}); err == nil {
		t.Error("nil handler accepted")
	}
}

// flakyStore fails its first Record calls, as a database that is briefly
// unreachable.
type flakyStore struct {
	queue.Store
	fails atomic.Int32
}

func (f *flakyStore) Record(ctx context.Context, outs []queue.Outcome) error {
	if f.fails.Add(-1) >= 0 {
		return errors.New("db down")
	}
	return f.Store.Record(ctx, outs)
}

func TestWorkerRetriesFailedCommits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &flakyStore{Store: queue.NewMemoryStore()}
		s.fails.Store(3)
		q := newQueueOn(t, s, queue.Config{})
		ctx := context.Background()
		for i := range 5 {
			q.Enqueue(ctx, queue.NewJob{ID: fmt.Sprint("j", i)})
		}
		var mu sync.Mutex
		var errs []error
		var calls atomic.Int32
		w, _ := queue.NewWorker(q, func(context.Context, []byte) error { calls.Add(1); return nil },
			queue.WorkerConfig{Concurrency: 2, PollInterval: 100 * time.Millisecond,
				OnError: func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }})
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error)
		go func() { done <- w.Run(rctx) }()
		for {
			time.Sleep(100 * time.Millisecond)
			if st, _ := q.Stats(ctx); st.Done == 5 {
				break
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if calls.Load() != 5 {
			t.Fatalf("handler ran %d times for 5 jobs: a failed commit must be retried, not re-run", calls.Load())
		}
		if len(errs) != 3 || !strings.Contains(errs[0].Error(), "db down") {
			t.Fatalf("reported %v, want the 3 failed commits", errs)
		}
	})
}

// slowClaims makes every claim take 2ms (of the bubble's virtual time) and
// records the limit of each.
type slowClaims struct {
	queue.Store
	mu     sync.Mutex
	limits []int
	at     map[string]time.Time // when each job's latest claim returned, when not nil
}

func (s *slowClaims) note(limit int) {
	time.Sleep(2 * time.Millisecond)
	s.mu.Lock()
	s.limits = append(s.limits, limit)
	s.mu.Unlock()
}

func (s *slowClaims) Claim(ctx context.Context, name string, now, leaseUntil int64, limit int) ([]queue.Job, error) {
	s.note(limit)
	return s.claimed(s.Store.Claim(ctx, name, now, leaseUntil, limit))
}

// claimed notes when the jobs of a claim came back (see at).
func (s *slowClaims) claimed(jobs []queue.Job, err error) ([]queue.Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, j := range jobs {
		if s.at != nil {
			s.at[j.ID] = time.Now()
		}
	}
	return jobs, err
}

// claimedAt is when the latest claim of job id came back.
func (s *slowClaims) claimedAt(id string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.at[id]
}

// slowMergedClaims is slowClaims on a RecordClaimer.
type slowMergedClaims struct{ *slowClaims }

func (s slowMergedClaims) RecordAndClaim(ctx context.Context, outs []queue.Outcome, name string, now, leaseUntil int64, limit int) ([]queue.Job, error) {
	s.note(limit)
	return s.claimed(s.Store.(queue.RecordClaimer).RecordAndClaim(ctx, outs, name, now, leaseUntil, limit))
}

func TestWorkerClaimsForEveryShortHandler(t *testing.T) {
	for _, merged := range []bool{true, false} {
		t.Run(fmt.Sprint("merged=", merged), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sc := &slowClaims{Store: queue.NewMemoryStore()}
				var s queue.Store = sc
				if merged {
					s = slowMergedClaims{sc}
				}
				q := newQueueOn(t, s, queue.Config{})
				ctx := context.Background()
				const n = 80
				for i := range n {
					q.Enqueue(ctx, queue.NewJob{ID: fmt.Sprintf("j%02d", i)})
				}
				var done atomic.Int32
				rctx, cancel := context.WithCancel(ctx)
				w, _ := queue.NewWorker(q, func(context.Context, []byte) error {
					if done.Add(1) == n {
						cancel()
					}
					return nil
				}, queue.WorkerConfig{Concurrency: 4, Loops: 1, PollInterval: time.Second})
				if err := w.Run(rctx); err != nil {
					t.Fatal(err)
				}
				// Handlers finish in no (virtual) time, a claim takes 2 ms: once
				// the worker has timed a claim, it waits for the handlers of the
				// latest claim and claims a job for each of them, so claims take
				// 4 jobs, not whatever handlers happened to have reported; once
				// 16 handlers finished, claims also prefetch the jobs the
				// handlers will start within a commit (up to BatchSize, 64).
				sc.mu.Lock()
				defer sc.mu.Unlock()
				short := 0
				for i, l := range sc.limits[1:] {
					if l < 4 || (i+1 >= 16/4+1 && l != 64) {
						short++
					}
				}
				if short > 0 || len(sc.limits) > 16/4+1+(n-16)/64+2 {
					t.Fatalf("%d of the claims after the first asked for fewer than 4 jobs, or for no prefetch after 16 jobs: %v", short, sc.limits)
				}
			})
		})
	}
}

func TestWorkerDoesNotWaitForLongHandlers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sc := &slowClaims{Store: queue.NewMemoryStore()}
		q := newQueueOn(t, slowMergedClaims{sc}, queue.Config{Lease: time.Minute})
		ctx := context.Background()
		q.Enqueue(ctx, queue.NewJob{ID: "a-slow"})
		const fast = 20
		for i := range fast {
			q.Enqueue(ctx, queue.NewJob{ID: fmt.Sprintf("b%02d", i)})
		}
		var done atomic.Int32
		allFast := make(chan time.Time, 1)
		w, _ := queue.NewWorker(q, func(ctx context.Context, _ []byte) error {
			if d, _ := retry.DeliveryFrom(ctx); d.ID == "a-slow" {
				select {
				case <-time.After(10 * time.Second):
				case <-ctx.Done():
				}
				return nil
			}
			if done.Add(1) == fast {
				allFast <- time.Now()
			}
			return nil
		}, queue.WorkerConfig{Concurrency: 2, PollInterval: time.Second})
		rctx, cancel := context.WithCancel(ctx)
		start := time.Now()
		ran := make(chan error)
		go func() { ran <- w.Run(rctx) }()
		// 20 claims of 2 ms each through the free handler: the worker must not
		// hold them back waiting for the one that runs for 10 s.
		if took := (<-allFast).Sub(start); took > 100*time.Millisecond {
			t.Errorf("the fast jobs took %v beside a long handler", took)
		}
		cancel()
		if err := <-ran; err != nil {
			t.Fatal(err)
		}
	})
}

// closableStore fails every call, and counts it, once closed — as a store
// the caller closed after Run returned.
type closableStore struct {
	queue.Store
	closed atomic.Bool
	calls  atomic.Int32
}

var errClosed = errors.New("store closed")

func (c *closableStore) check() error {
	if c.closed.Load() {
		c.calls.Add(1)
		return errClosed
	}
	return nil
}

func (c *closableStore) Record(ctx context.Context, outs []queue.Outcome) error {
	if err := c.check(); err != nil {
		return err
	}
	return c.Store.Record(ctx, outs)
}

func (c *closableStore) Claim(ctx context.Context, name string, now, leaseUntil int64, limit int) ([]queue.Job, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	return c.Store.Claim(ctx, name, now, leaseUntil, limit)
}

func (c *closableStore) Extend(ctx context.Context, leases []queue.Lease, now, leaseUntil int64) error {
	if err := c.check(); err != nil {
		return err
	}
	return c.Store.Extend(ctx, leases, now, leaseUntil)
}

func (c *closableStore) Bury(ctx context.Context, now int64, limit int) (int, error) {
	if err := c.check(); err != nil {
		return 0, err
	}
	return c.Store.Bury(ctx, now, limit)
}

// closableMerged is closableStore on a RecordClaimer.
type closableMerged struct{ *closableStore }

func (c closableMerged) RecordAndClaim(ctx context.Context, outs []queue.Outcome, name string, now, leaseUntil int64, limit int) ([]queue.Job, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	return c.Store.(queue.RecordClaimer).RecordAndClaim(ctx, outs, name, now, leaseUntil, limit)
}

// After Run returned ErrShutdownTimeout the worker leaves the store alone:
// a handler that returns later does not get its outcome retried for ever
// against a store the caller has closed meanwhile (its job stays leased
// until the lease expires, as ErrShutdownTimeout says).
func TestNoStoreUseAfterShutdownTimeout(t *testing.T) {
	for _, merged := range []bool{true, false} {
		t.Run(fmt.Sprint("merged=", merged), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cs := &closableStore{Store: queue.NewMemoryStore()}
				var s queue.Store = cs
				if merged {
					s = closableMerged{cs}
				}
				q := newQueueOn(t, s, queue.Config{Policy: &retry.Policy{AttemptTimeout: time.Hour}, Lease: time.Minute})
				ctx := context.Background()
				q.Enqueue(ctx, queue.NewJob{ID: "stubborn", MaxAttempts: 3})
				release := make(chan struct{})
				var reported atomic.Int32
				w, _ := queue.NewWorker(q, func(context.Context, []byte) error { <-release; return nil },
					queue.WorkerConfig{Grace: time.Second, OnError: func(error) { reported.Add(1) }})
				rctx, cancel := context.WithCancel(ctx)
				done := make(chan error)
				go func() { done <- w.Run(rctx) }()
				synctest.Wait()
				cancel()
				if err := <-done; !errors.Is(err, queue.ErrShutdownTimeout) {
					t.Fatalf("Run = %v, want ErrShutdownTimeout", err)
				}
				cs.closed.Store(true)
				close(release)
				time.Sleep(time.Minute)
				calls, errs := cs.calls.Load(), reported.Load()
				cs.closed.Store(false) // let a worker that kept going finish
				time.Sleep(time.Minute)
				synctest.Wait()
				if calls > 0 || errs > 0 {
					t.Fatalf("after Run returned: %d store calls, %d errors reported", calls, errs)
				}
			})
		})
	}
}

// A prefetched job that waited a quarter of its lease for a handler (the
// handlers turned slow after the prefetch) is released without running:
// pending at once, its claimed attempt spent, run by a later claim. No
// handler runs twice, none starts a quarter of the lease or more after its
// claim (neither handed over by the loop nor taken by a runner whose
// handler just returned), and no lease is lost.
//
// The handlers turn slow either past a quarter of the lease, or for exactly
// that long, so that a runner whose handler returns finds the prefetched
// jobs going stale at that instant, with the loop's release due then too.
func TestWorkerReleasesStalePrefetchedJobs(t *testing.T) {
	for _, slow := range []time.Duration{150 * time.Millisecond, 100 * time.Millisecond} {
		t.Run(fmt.Sprint("slow=", slow), func(t *testing.T) { testReleasesStalePrefetchedJobs(t, slow) })
	}
}

func testReleasesStalePrefetchedJobs(t *testing.T, slow time.Duration) {
	synctest.Test(t, func(t *testing.T) {
		sc := &slowClaims{Store: queue.NewMemoryStore(), at: map[string]time.Time{}}
		q := newQueueOn(t, slowMergedClaims{sc}, queue.Config{Lease: 400 * time.Millisecond})
		ctx := context.Background()
		const n = 100
		for i := range n {
			q.Enqueue(ctx, queue.NewJob{ID: fmt.Sprintf("j%03d", i), MaxAttempts: 5})
		}
		var mu sync.Mutex
		calls := map[string]int{}
		started := 0
		released := 0
		var errs []error
		var late []string
		rctx, cancel := context.WithCancel(ctx)
		doneJobs := 0
		w, _ := queue.NewWorker(q, func(ctx context.Context, _ []byte) error {
			d, _ := retry.DeliveryFrom(ctx)
			waited := time.Since(sc.claimedAt(d.ID))
			mu.Lock()
			if waited >= 100*time.Millisecond { // Lease/4
				late = append(late, fmt.Sprintf("%s after %v", d.ID, waited))
			}
			calls[d.ID]++
			started++
			slowed := started > 20
			mu.Unlock()
			if slowed {
				time.Sleep(slow) // virtual time (synctest bubble): >= Lease/4, the prefetched jobs go stale
			}
			return nil
		}, queue.WorkerConfig{Concurrency: 4, Loops: 1, PollInterval: time.Second, OnResult: func(r queue.Result) {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(r.Err, context.Canceled) && r.Job.State == queue.Pending &&
				strings.Contains(r.Job.LastError, "released before the handler started"):
				released++
			case r.Err != nil:
				errs = append(errs, r.Err)
			case r.Job.State == queue.Done:
				if doneJobs++; doneJobs == n {
					cancel()
				}
			}
		}})
		if err := w.Run(rctx); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(errs) > 0 {
			t.Fatalf("attempt errors: %v", errs)
		}
		if released == 0 {
			t.Fatalf("no prefetched job was released; claims asked for %v", sc.limits)
		}
		if len(late) > 0 {
			t.Errorf("handlers started a quarter of the lease or more after the claim: %v", late)
		}
		for i := range n {
			id := fmt.Sprintf("j%03d", i)
			if calls[id] != 1 {
				t.Errorf("%s: handler called %d times, want 1", id, calls[id])
			}
		}
		t.Logf("%d prefetched jobs released; claims asked for %v", released, sc.limits)
	})
}

// When every handler turns slower than what is left of the lease (a hung
// dependency) while prefetched jobs wait in the worker, the loop does not
// wait for a handler to free up: the outcomes of the handlers that finished
// are committed, and the prefetched jobs released, within a quarter of the
// lease of their claim. So another worker on the same store neither
// reclaims a job whose handler succeeded (it would run twice) nor fences
// off an outcome (Recorded=false).
func TestWorkerCommitsWhileHandlersHang(t *testing.T) {
	for _, merged := range []bool{true, false} {
		t.Run(fmt.Sprint("merged=", merged), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { testWorkerCommitsWhileHandlersHang(t, merged) })
		})
	}
}

func testWorkerCommitsWhileHandlersHang(t *testing.T, merged bool) {
	sc := &slowClaims{Store: queue.NewMemoryStore()}
	var s queue.Store = sc
	if merged {
		s = slowMergedClaims{sc}
	}
	cfg := queue.Config{Lease: time.Second, Policy: &retry.Policy{AttemptTimeout: 5 * time.Second}}
	qa, qb := newQueueOn(t, s, cfg), newQueueOn(t, s, cfg)
	ctx := context.Background()
	const n = 200
	for i := range n {
		qa.Enqueue(ctx, queue.NewJob{ID: fmt.Sprintf("j%03d", i), MaxAttempts: 5})
	}
	var mu sync.Mutex
	succeeded := map[string]int{}
	var lost []queue.Result
	var errs []error
	onResult := func(r queue.Result) {
		mu.Lock()
		defer mu.Unlock()
		if !r.Recorded {
			lost = append(lost, r)
		}
	}
	onError := func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }
	succeed := func(ctx context.Context) error {
		d, _ := retry.DeliveryFrom(ctx)
		mu.Lock()
		succeeded[d.ID]++
		mu.Unlock()
		return nil
	}
	// Worker a: its handlers finish at once (so it prefetches), then, from
	// the 41st job on, hang for 3 s — longer than the lease.
	slow := make(chan struct{})
	var started atomic.Int32
	wa, err := queue.NewWorker(qa, func(ctx context.Context, _ []byte) error {
		switch k := started.Add(1); {
		case k == 41:
			close(slow)
			fallthrough
		case k > 41:
			select {
			case <-time.After(3 * time.Second):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return succeed(ctx)
	}, queue.WorkerConfig{Concurrency: 4, PollInterval: time.Second, OnResult: onResult, OnError: onError})
	if err != nil {
		t.Fatal(err)
	}
	// Worker b, on the same store, starts when a's handlers hang, and takes
	// whatever is claimable.
	wb, err := queue.NewWorker(qb, func(ctx context.Context, _ []byte) error { return succeed(ctx) },
		queue.WorkerConfig{Concurrency: 4, PollInterval: 50 * time.Millisecond, OnResult: onResult, OnError: onError})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	var ran sync.WaitGroup
	runErrs := make([]error, 2)
	ran.Go(func() { runErrs[0] = wa.Run(rctx) })
	ran.Go(func() {
		select {
		case <-slow:
		case <-rctx.Done():
			return
		}
		runErrs[1] = wb.Run(rctx)
	})
	for {
		time.Sleep(100 * time.Millisecond)
		if st, _ := qa.Stats(ctx); st.Done == n {
			break
		}
	}
	cancel()
	ran.Wait()
	for _, err := range runErrs {
		if err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	twice := 0
	for id, c := range succeeded {
		if c != 1 {
			twice++
			t.Logf("%s: handler succeeded %d times", id, c)
		}
	}
	if twice > 0 || len(lost) > 0 || len(errs) > 0 {
		t.Fatalf("%d succeeded jobs ran again, %d outcomes not recorded, errors: %v; claims asked for %v", twice, len(lost), errs, sc.limits)
	}
	if len(succeeded) != n {
		t.Fatalf("%d of %d jobs succeeded", len(succeeded), n)
	}
}

// A big Worker on a RecordClaimer commits its outcomes beside the claims
// (splitTurn): every job still runs once and is recorded done, and the
// shutdown waits for the last outcomes.
func TestWorkerBigTurnsRecordBesideClaims(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sc := &slowClaims{Store: queue.NewMemoryStore()}
		q := newQueueOn(t, slowMergedClaims{sc}, queue.Config{})
		ctx := context.Background()
		const n = 3000
		jobs := make([]queue.NewJob, n)
		for i := range jobs {
			jobs[i] = queue.NewJob{ID: fmt.Sprintf("j%04d", i)}
		}
		if _, err := q.EnqueueMany(ctx, jobs); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		calls := map[string]int{}
		rctx, cancel := context.WithCancel(ctx)
		w, _ := queue.NewWorker(q, func(ctx context.Context, _ []byte) error {
			d, _ := retry.DeliveryFrom(ctx)
			mu.Lock()
			defer mu.Unlock()
			if calls[d.ID]++; len(calls) == n {
				cancel()
			}
			return nil
		}, queue.WorkerConfig{Concurrency: 128, Loops: 1, PollInterval: time.Second, OnError: func(err error) { t.Error(err) }})
		if err := w.Run(rctx); err != nil {
			t.Fatal(err)
		}
		doneOnce(t, q, n, calls)
		sc.mu.Lock()
		defer sc.mu.Unlock()
		if big := slices.Max(sc.limits); big < 256 {
			t.Fatalf("no claim asked for 256 jobs or more: %v", sc.limits)
		}
	})
}

func TestMultiWorkerNoStarvation(t *testing.T) { eachStoreKind(t, testMultiWorkerNoStarvation) }

// A queue whose handlers all block does not hold up another queue of the
// same Worker, on either commit path; shutdown then releases the blocked
// jobs.
func testMultiWorkerNoStarvation(t *testing.T, newStore func() queue.Store) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore()
		slow := newQueueOn(t, s, queue.Config{Queue: "slow"})
		fast := newQueueOn(t, s, queue.Config{Queue: "fast"})
		ctx := context.Background()
		for i := range 20 {
			for _, q := range []*queue.Queue{slow, fast} {
				if _, _, err := q.Enqueue(ctx, queue.NewJob{ID: fmt.Sprintf("%s%02d", q.Config().Queue, i)}); err != nil {
					t.Fatal(err)
				}
			}
		}
		block := func(ctx context.Context, _ []byte) error { <-ctx.Done(); return ctx.Err() }
		var fastRan atomic.Int64
		quick := func(context.Context, []byte) error { fastRan.Add(1); time.Sleep(time.Millisecond); return nil }
		w, err := queue.NewMultiWorker(queue.WorkerConfig{Concurrency: 2, Grace: time.Second},
			queue.Serve{Queue: slow, Handler: block},
			queue.Serve{Queue: fast, Handler: quick, Concurrency: 4})
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error)
		go func() { done <- w.Run(rctx) }()
		time.Sleep(time.Second)
		synctest.Wait()
		if st, _ := fast.Stats(ctx); st.Done != 20 || fastRan.Load() != 20 {
			t.Fatalf("fast queue beside a blocked one: %+v, %d calls", st, fastRan.Load())
		}
		if st, _ := slow.Stats(ctx); st.Leased != 2 || st.PendingDue != 18 {
			t.Fatalf("slow queue: %+v, want its 2 handlers' jobs leased", st)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run = %v", err)
		}
		if st, _ := slow.Stats(ctx); st.Leased != 0 || st.PendingDue != 20 {
			t.Fatalf("slow queue after shutdown: %+v, want every job released", st)
		}
	})
}

func TestMultiWorkerValidation(t *testing.T) {
	s := queue.NewMemoryStore()
	a := newQueueOn(t, s, queue.Config{Queue: "a"})
	b := newQueueOn(t, s, queue.Config{Queue: "b"})
	other := newQueueOn(t, queue.NewMemoryStore(), queue.Config{Queue: "c"})
	h := func(context.Context, []byte) error { return nil }
	for want, serves := range map[string][]queue.Serve{
		"at least one queue":                                          nil,
		"Serve 2: Queue must not":                                     {{Queue: a, Handler: h}, {Handler: h}},
		`queue "b": nil handler`:                                      {{Queue: a, Handler: h}, {Queue: b}},
		`queue "a" is served twice`:                                   {{Queue: a, Handler: h}, {Queue: a, Handler: h}},
		`queue "c" is on another store`:                               {{Queue: a, Handler: h}, {Queue: other, Handler: h}},
		`queue "b": queue: invalid: Concurrency must be in [1, 1024]`: {{Queue: a, Handler: h}, {Queue: b, Handler: h, Concurrency: -1}},
		`queue "a": queue: invalid: BatchSize`:                        {{Queue: a, Handler: h, BatchSize: queue.MaxBatchSize + 1}},
	} {
		if _, err := queue.NewMultiWorker(queue.WorkerConfig{}, serves...); !errors.Is(err, queue.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("NewMultiWorker(%d serves) = %v, want an error with %q", len(serves), err, want)
		}
	}
	if _, err := queue.NewMultiWorker(queue.WorkerConfig{Concurrency: 3}, queue.Serve{Queue: a, Handler: h}, queue.Serve{Queue: b, Handler: h, Concurrency: 5}); err != nil {
		t.Fatal(err)
	}
}

// Config hands out a copy of the Policy: changing it does not change the
// defaults of the queue's new jobs.
func TestConfigPolicyIsACopy(t *testing.T) {
	q := newQueue(t, queue.Config{Policy: &retry.Policy{MaxAttempts: 4}})
	q.Config().Policy.MaxAttempts = 9
	j, _, err := q.Enqueue(context.Background(), queue.NewJob{ID: "a"})
	if err != nil || j.MaxAttempts != 4 || q.Config().Policy.MaxAttempts != 4 {
		t.Errorf("after changing Config().Policy: job MaxAttempts %d, Config %d, %v; want 4, 4", j.MaxAttempts, q.Config().Policy.MaxAttempts, err)
	}
}
