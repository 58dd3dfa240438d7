package queue_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/retry"
)

// extendLog records the store's Extend calls: each one's time, lease IDs
// and the workerKey value its context carries.
type extendLog struct {
	queue.Store
	mu    sync.Mutex
	calls []extendCall
}

type extendCall struct {
	now   int64
	ids   []string
	value any
}

type workerKey struct{}

func newExtendLog() *extendLog { return &extendLog{Store: queue.NewMemoryStore()} }

func (e *extendLog) Extend(ctx context.Context, leases []queue.Lease, now, leaseUntil int64) error {
	c := extendCall{now: now, value: ctx.Value(workerKey{})}
	for _, l := range leases {
		c.ids = append(c.ids, l.ID)
	}
	e.mu.Lock()
	e.calls = append(e.calls, c)
	e.mu.Unlock()
	return e.Store.Extend(ctx, leases, now, leaseUntil)
}

// log returns the calls so far.
func (e *extendLog) log() []extendCall {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]extendCall(nil), e.calls...)
}

// counts are the calls so far, the leases they carried, and the most in
// one call.
func (e *extendLog) counts() (calls, leases, most int) {
	for _, c := range e.log() {
		calls++
		leases += len(c.ids)
		most = max(most, len(c.ids))
	}
	return calls, leases, most
}

// extended are the times the lease of job id was extended.
func (e *extendLog) extended(id string) []int64 {
	var at []int64
	for _, c := range e.log() {
		if slices.Contains(c.ids, id) {
			at = append(at, c.now)
		}
	}
	return at
}

// Long handlers share their heartbeats, across the Workers of a Queue:
// one Extend a beat for all of them (one per 1,000 leases), every Lease/3,
// and none once nothing runs.
func TestHeartbeatOneExtendForAllRunning(t *testing.T) {
	for _, n := range []int{50, 1500} {
		t.Run(fmt.Sprint(n), func(t *testing.T) { testHeartbeatBatches(t, n) })
	}
}

func testHeartbeatBatches(t *testing.T, n int) {
	synctest.Test(t, func(t *testing.T) {
		per := (n + 999) / 1000 // Extend calls a beat
		log := newExtendLog()
		q := newQueueOn(t, log, queue.Config{Policy: &retry.Policy{AttemptTimeout: time.Hour}, Lease: 300 * time.Millisecond})
		ctx, stop := context.WithCancel(context.Background())
		for i := range n {
			if _, _, err := q.Enqueue(ctx, queue.NewJob{ID: fmt.Sprintf("long-%04d", i), MaxAttempts: 1}); err != nil {
				t.Fatal(err)
			}
		}
		release := make(chan struct{})
		var started sync.WaitGroup
		started.Add(n)
		// Two Workers on the Queue: they share its heartbeats.
		ran := make(chan error, 2)
		for range 2 {
			w, err := queue.NewWorker(q, func(context.Context, []byte) error {
				started.Done()
				<-release
				return nil
			}, queue.WorkerConfig{Concurrency: n / 2})
			if err != nil {
				t.Fatal(err)
			}
			go func() { ran <- w.Run(ctx) }()
		}
		started.Wait()
		if calls, _, _ := log.counts(); calls != 0 {
			t.Fatalf("%d Extend calls before a third of the lease passed", calls)
		}
		time.Sleep(time.Second) // virtual: ten beats
		calls, leases, most := log.counts()
		// A timer per attempt would make n calls a beat.
		if calls < 9*per || calls > 11*per || most != min(n, 1000) || leases < 9*n {
			t.Fatalf("a second of %d running handlers: %d Extend calls of %d leases (at most %d in one); want %d–%d calls of at most 1,000",
				n, calls, leases, most, 9*per, 11*per)
		}
		t.Logf("a second of %d running handlers: %d Extend calls of %d leases", n, calls, leases)
		close(release)
		synctest.Wait()
		stop()
		for range 2 {
			if err := <-ran; err != nil {
				t.Fatal(err)
			}
		}
		st, err := q.Stats(context.Background())
		if err != nil || st.Done != int64(n) {
			t.Fatalf("stats %+v %v, want %d done (leases held throughout)", st, err, n)
		}
		calls, _, _ = log.counts()
		time.Sleep(10 * time.Second) // virtual
		if again, _, _ := log.counts(); again != calls {
			t.Fatalf("%d Extend calls after every handler returned", again-calls)
		}
	})
}

// A beat that finds one lease taken over cancels that handler only, with
// ErrLeaseLost as its context's cause; the others keep their leases.
func TestHeartbeatCancelsOnlyTheLostLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(t, queue.Config{Policy: &retry.Policy{AttemptTimeout: time.Hour}, Lease: 300 * time.Millisecond})
		ctx, stop := context.WithCancel(context.Background())
		for _, id := range []string{"a", "b", "c"} {
			if _, _, err := q.Enqueue(ctx, queue.NewJob{ID: id, MaxAttempts: 3}); err != nil {
				t.Fatal(err)
			}
		}
		release := make(chan struct{})
		var mu sync.Mutex
		causes := map[string]error{}
		var started sync.WaitGroup
		started.Add(3)
		w, err := queue.NewWorker(q, func(hctx context.Context, _ []byte) error {
			d, _ := retry.DeliveryFrom(hctx)
			id := d.ID
			started.Done()
			select {
			case <-release:
				return nil
			case <-hctx.Done():
				mu.Lock()
				causes[id] = context.Cause(hctx)
				mu.Unlock()
				return hctx.Err()
			}
		}, queue.WorkerConfig{Concurrency: 3})
		if err != nil {
			t.Fatal(err)
		}
		ran := make(chan error, 1)
		go func() { ran <- w.Run(ctx) }()
		started.Wait()
		taken := takeOverOne(ctx, t, q)
		time.Sleep(time.Second) // virtual: several beats
		mu.Lock()
		got := len(causes)
		cause := causes[taken[0].ID]
		mu.Unlock()
		if got != 1 || !errors.Is(cause, queue.ErrLeaseLost) {
			t.Fatalf("handlers canceled: %v; want only %s's, with ErrLeaseLost", causes, taken[0].ID)
		}
		close(release)
		synctest.Wait()
		stop()
		if err := <-ran; err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"a", "b", "c"} {
			j, err := q.Get(context.Background(), id)
			switch {
			case err != nil:
				t.Fatal(err)
			case id == taken[0].ID && (j.State != queue.Leased || j.Attempts != 2):
				t.Fatalf("the job taken over: %+v, want leased by the other claim", j)
			case id != taken[0].ID && (j.State != queue.Done || j.Attempts != 1):
				t.Fatalf("job %s: %+v, want done on its first attempt", id, j)
			}
		}
	})
}

// The beat's timer outlives the handler that set it: a handler that starts
// after every other has returned, while that timer is still set, is
// extended no later than Lease/3 after it started and every Lease/3 after,
// and nothing is extended once it returns.
func TestHeartbeatAcrossIdleGaps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const lease = 300 * time.Millisecond
		log := newExtendLog()
		q := newQueueOn(t, log, queue.Config{Policy: &retry.Policy{AttemptTimeout: time.Hour}, Lease: lease})
		ctx, stop := context.WithCancel(context.Background())
		defer stop()
		started := make(chan int64, 3)
		release := map[string]chan struct{}{"short": make(chan struct{}), "long": make(chan struct{})}
		w, err := queue.NewWorker(q, func(hctx context.Context, _ []byte) error {
			d, _ := retry.DeliveryFrom(hctx)
			started <- virtualNow()
			<-release[d.ID]
			return nil
		}, queue.WorkerConfig{Concurrency: 1})
		if err != nil {
			t.Fatal(err)
		}
		ran := make(chan error, 1)
		go func() { ran <- w.Run(ctx) }()
		if _, _, err := q.Enqueue(ctx, queue.NewJob{ID: "short"}); err != nil {
			t.Fatal(err)
		}
		<-started
		time.Sleep(lease / 6) // virtual: the short handler runs half a beat
		close(release["short"])
		synctest.Wait()        // it returned; nothing runs, the beat's timer is still set
		time.Sleep(lease / 12) // virtual
		if _, _, err := q.Enqueue(ctx, queue.NewJob{ID: "long"}); err != nil {
			t.Fatal(err)
		}
		began := <-started
		time.Sleep(2 * lease) // virtual: six beats
		close(release["long"])
		synctest.Wait()
		ended := virtualNow()
		time.Sleep(10 * lease) // virtual
		at, short := log.extended("long"), len(log.extended("short"))
		third := (lease / 3).Milliseconds()
		if short != 0 {
			t.Errorf("the short handler, done in half a beat, was extended %d times", short)
		}
		if len(at) == 0 || at[0]-began > third {
			t.Fatalf("long handler started at %d ms: extended at %v, want the first within %d ms", began, at, third)
		}
		for i := 1; i < len(at); i++ {
			if at[i]-at[i-1] > third {
				t.Fatalf("extensions at %v: %d ms between two, want at most %d", at, at[i]-at[i-1], third)
			}
		}
		if last := at[len(at)-1]; ended-last > third || last > ended {
			t.Fatalf("extensions at %v for a handler that ran %d–%d ms", at, began, ended)
		}
		stop()
		if err := <-ran; err != nil {
			t.Fatal(err)
		}
		if j, err := q.Get(context.Background(), "long"); err != nil || j.State != queue.Done || j.Attempts != 1 {
			t.Fatalf("long job %+v %v: want done on its first attempt", j, err)
		}
	})
}

// One handler at a time (one runner): after a lost lease canceled the
// runner's attempt, the next job runs under a live context, and each
// handler's context ends once it returns, whether the handler keeps it
// or not.
func TestLostLeaseCancelsOneAttemptOfARunner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(t, queue.Config{Policy: &retry.Policy{AttemptTimeout: time.Hour}, Lease: 300 * time.Millisecond})
		ctx, stop := context.WithCancel(context.Background())
		defer stop()
		if _, _, err := q.Enqueue(ctx, queue.NewJob{ID: "a", MaxAttempts: 3}); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		kept := map[string]context.Context{}
		causes := map[string]error{}
		started := make(chan string, 2)
		w, err := queue.NewWorker(q, func(hctx context.Context, _ []byte) error {
			d, _ := retry.DeliveryFrom(hctx)
			mu.Lock()
			kept[d.ID] = hctx
			mu.Unlock()
			started <- d.ID
			if d.ID != "a" {
				return hctx.Err()
			}
			<-hctx.Done()
			mu.Lock()
			causes[d.ID] = context.Cause(hctx)
			mu.Unlock()
			return hctx.Err()
		}, queue.WorkerConfig{Concurrency: 1})
		if err != nil {
			t.Fatal(err)
		}
		ran := make(chan error, 1)
		go func() { ran <- w.Run(ctx) }()
		<-started
		takeOverOne(ctx, t, q)
		time.Sleep(time.Second) // virtual: a beat finds a's lease taken
		if _, _, err := q.Enqueue(ctx, queue.NewJob{ID: "b"}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-started:
		case <-time.After(time.Minute): // virtual
			t.Fatal("b's handler did not start within a minute of a's lost lease")
		}
		synctest.Wait()
		mu.Lock()
		cause := causes["a"]
		endedA, endedB := kept["a"].Err(), kept["b"].Err()
		mu.Unlock()
		if !errors.Is(cause, queue.ErrLeaseLost) {
			t.Fatalf("a's handler ended with cause %v, want ErrLeaseLost", cause)
		}
		if j, err := q.Get(ctx, "b"); err != nil || j.State != queue.Done {
			t.Fatalf("b after a's lost lease on the same runner: %+v %v, want done", j, err)
		}
		if endedA == nil || endedB == nil {
			t.Fatalf("contexts kept after the handlers returned: a %v, b %v; want both ended", endedA, endedB)
		}
		stop()
		if err := <-ran; err != nil {
			t.Fatal(err)
		}
	})
}

// A heartbeat's Extend runs with the values of the context the Worker was
// run with, as its claims do (a store's tracer reads them): one call a
// beat for two Workers run with one context.
func TestHeartbeatCarriesWorkerValues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := newExtendLog()
		q := newQueueOn(t, log, queue.Config{Policy: &retry.Policy{AttemptTimeout: time.Hour}, Lease: 300 * time.Millisecond})
		ctx, stop := context.WithCancel(context.WithValue(context.Background(), workerKey{}, "tenant-7"))
		for i := range 4 {
			if _, _, err := q.Enqueue(ctx, queue.NewJob{ID: fmt.Sprint("j", i)}); err != nil {
				t.Fatal(err)
			}
		}
		release := make(chan struct{})
		var started sync.WaitGroup
		started.Add(4)
		ran := make(chan error, 2)
		for range 2 {
			w, err := queue.NewWorker(q, func(context.Context, []byte) error {
				started.Done()
				<-release
				return nil
			}, queue.WorkerConfig{Concurrency: 2})
			if err != nil {
				t.Fatal(err)
			}
			go func() { ran <- w.Run(ctx) }()
		}
		started.Wait()
		time.Sleep(time.Second) // virtual: about ten beats
		close(release)
		synctest.Wait()
		stop()
		for range 2 {
			if err := <-ran; err != nil {
				t.Fatal(err)
			}
		}
		calls := log.log()
		if len(calls) < 9 || len(calls) > 11 {
			t.Fatalf("%d Extend calls in a second of two Workers' handlers; want 9–11 (one a beat)", len(calls))
		}
		for i, c := range calls {
			if c.value != "tenant-7" {
				t.Fatalf("Extend call %d saw %v, want the Worker's value tenant-7", i, c.value)
			}
		}
	})
}

// takeOverOne has another claim take one of q's leased jobs, at a time
// past its lease, as if this worker's clock had stalled.
func takeOverOne(ctx context.Context, t *testing.T, q *queue.Queue) []queue.Job {
	t.Helper()
	late := virtualNow() + time.Hour.Milliseconds()
	taken, err := q.Store().Claim(ctx, queue.DefaultQueue, late, late+time.Hour.Milliseconds(), 1)
	if err != nil || len(taken) != 1 {
		t.Fatalf("claim %v %v", taken, err)
	}
	return taken
}
