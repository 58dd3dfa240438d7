package queuetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/staggerhq/stagger/queue"
)

// testLeaseExpiredNotExtended: a lease that ran out cannot be revived.
func testLeaseExpiredNotExtended(t *testing.T, s queue.Store) {
	if err := checkExpiredNotExtended(s); err != nil {
		t.Fatal(err)
	}
}

// checkExpiredNotExtended leases job a under MaxInFlight 1, lets the lease
// run out, lets another claim take the slot (job b), and then tries to
// extend a's old lease, as a worker paused longer than its lease (GC
// pause, VM freeze, SIGSTOP) does when it wakes up: the extension must
// fail and the limit hold. The old attempt's late outcome must not touch
// the job once a newer claim took it.
func checkExpiredNotExtended(s queue.Store) error {
	ctx := context.Background()
	lc, ok := s.(queue.LimitedClaimer)
	if !ok {
		return fmt.Errorf("%T does not implement queue.LimitedClaimer", s)
	}
	if _, err := s.Insert(ctx, []queue.Job{row("a", Start, Start+100000, 5), row("b", Start+1, Start+100000, 5)}); err != nil {
		return err
	}
	lim := queue.Limits{MaxInFlight: 1}
	got, err := lc.ClaimLimited(ctx, queue.DefaultQueue, lim, Start+1, Start+1000, 5)
	if err != nil || len(got) != 1 || got[0].ID != "a" {
		return fmt.Errorf("first claim = %v, %v; want [a]", ids(got), err)
	}
	// A live lease is extended.
	live := []queue.Lease{{ID: "a", Attempt: 1}}
	if err := s.Extend(ctx, live, Start+500, Start+1000); err != nil || !live[0].Held {
		return fmt.Errorf("extending a live lease: held=%v err=%v", live[0].Held, err)
	}
	// At Start+1000 the lease has run out (expired at lease_until <= now,
	// as claims count it): the slot is free and job b takes it.
	got, err = lc.ClaimLimited(ctx, queue.DefaultQueue, lim, Start+1000, Start+2000, 5)
	if err != nil || len(got) != 1 || got[0].ID != "b" {
		return fmt.Errorf("claim after a's lease ran out = %v, %v; want [b]", ids(got), err)
	}
	for _, at := range []int64{Start + 1000, Start + 1001} {
		old := []queue.Lease{{ID: "a", Attempt: 1}}
		if err := s.Extend(ctx, old, at, at+1000); err != nil {
			return fmt.Errorf("extend: %v", err)
		}
		st, err := s.Stats(ctx, queue.DefaultQueue, at)
		if err != nil {
			return err
		}
		if old[0].Held || st.Leased-st.LeasedExpired > 1 {
			return fmt.Errorf("the lease of a, run out at %d, was extended at %d (held=%v): %d live leases, MaxInFlight 1",
				Start+1000, at, old[0].Held, st.Leased-st.LeasedExpired)
		}
		if j, _ := s.Get(ctx, "a"); j.LeaseUntil != Start+1000 {
			return fmt.Errorf("a failed extension changed the lease of a to %d", j.LeaseUntil)
		}
	}
	if more, err := lc.ClaimLimited(ctx, queue.DefaultQueue, lim, Start+1002, Start+2002, 5); err != nil || len(more) != 0 {
		return fmt.Errorf("claim with b in flight = %v, %v; want none (MaxInFlight 1)", ids(more), err)
	}
	// b finishes; a is claimed again (attempt 2). The first attempt's late
	// outcome is fenced out and leaves the new lease alone.
	done := []queue.Outcome{{ID: "b", Attempt: 1, State: queue.Done, Now: Start + 1500}}
	if err := s.Record(ctx, done); err != nil || !done[0].Applied {
		return fmt.Errorf("recording b: applied=%v err=%v", done[0].Applied, err)
	}
	got, err = lc.ClaimLimited(ctx, queue.DefaultQueue, lim, Start+1501, Start+2501, 5)
	if err != nil || len(got) != 1 || got[0].ID != "a" || got[0].Attempts != 2 {
		return fmt.Errorf("claim of a again = %+v, %v; want a attempt 2", got, err)
	}
	for _, state := range []queue.State{queue.Done, queue.Pending, queue.Leased} {
		late := []queue.Outcome{{ID: "a", Attempt: 1, State: state, AvailableAt: Start + 1502, LastError: "late", Now: Start + 1502}}
		if err := s.Record(ctx, late); err != nil || late[0].Applied {
			return fmt.Errorf("late %s outcome of attempt 1: applied=%v err=%v", state, late[0].Applied, err)
		}
	}
	stale := []queue.Lease{{ID: "a", Attempt: 1}}
	if err := s.Extend(ctx, stale, Start+1502, Start+2502); err != nil || stale[0].Held {
		return fmt.Errorf("extending attempt 1 after attempt 2's claim: held=%v err=%v", stale[0].Held, err)
	}
	if j, _ := s.Get(ctx, "a"); j.State != queue.Leased || j.Attempts != 2 || j.LeaseUntil != Start+2501 || j.LastError != "" {
		return fmt.Errorf("attempt 1's late writes changed attempt 2's row: %+v", j)
	}
	return nil
}

// testFleetPausedWorker: a worker paused longer than its lease cannot take
// its slot back from the worker that took it over.
func testFleetPausedWorker(t *testing.T, s queue.Store) {
	if err := checkFleetPausedWorker(s); err != nil {
		t.Fatal(err)
	}
}

// pausable is a worker's clock that can be frozen: while paused, reading
// it blocks (the process is stopped), and the first read after the pause
// began is announced on blocked. Resuming returns the shared clock's
// reading of the moment, as a process that wakes up reads the time.
type pausable struct {
	c       *Clock
	mu      sync.Mutex
	resume  chan struct{} // nil: running
	blocked chan struct{}
}

func (p *pausable) now() int64 {
	p.mu.Lock()
	r := p.resume
	p.mu.Unlock()
	if r != nil {
		select {
		case p.blocked <- struct{}{}:
		default:
		}
		<-r
	}
	return p.c.Now()
}

func (p *pausable) pause() {
	p.mu.Lock()
	p.resume = make(chan struct{})
	p.mu.Unlock()
}

func (p *pausable) unpause() {
	p.mu.Lock()
	close(p.resume)
	p.resume = nil
	p.mu.Unlock()
}

// extendWatch reports the outcome of the paused worker's extensions read
// from its clock at or after from.
type extendWatch struct {
	queue.Store
	from int64
	held chan bool
}

func (e *extendWatch) Extend(ctx context.Context, leases []queue.Lease, now, leaseUntil int64) error {
	err := e.Store.Extend(ctx, leases, now, leaseUntil)
	if err == nil && now >= e.from {
		select {
		case e.held <- leases[0].Held:
		default:
		}
	}
	return err
}

// ClaimLimited forwards to the store (the queue's Limits need it).
func (e *extendWatch) ClaimLimited(ctx context.Context, queueName string, lim queue.Limits, now, leaseUntil int64, limit int) ([]queue.Job, error) {
	return e.Store.(queue.LimitedClaimer).ClaimLimited(ctx, queueName, lim, now, leaseUntil, limit)
}

// checkFleetPausedWorker runs two Workers of one queue with MaxInFlight 1
// on one store and a shared fake clock. Worker A's handler holds job a
// while A is paused (its clock frozen) past the lease; meanwhile the
// clock moves on, and worker B claims job b in the slot a's expired lease
// freed. When A wakes, its next heartbeat must find the lease lost and
// cancel its handler (cause queue.ErrLeaseLost): at no point do more
// leases live, or more handlers run with a live context on a running
// worker, than MaxInFlight.
func checkFleetPausedWorker(s queue.Store) error {
	const lease = 300 * time.Millisecond // heartbeats every 100 ms of real time
	clock := NewClock(Start)
	pa := &pausable{c: clock, blocked: make(chan struct{}, 1)}
	lim := queue.Limits{MaxInFlight: 1}
	resumeAt := Start + 1000 // the clock when A wakes: past a's lease
	watch := &extendWatch{Store: s, from: resumeAt, held: make(chan bool, 1)}
	qa, err := queue.New(watch, queue.Config{Now: pa.now, Lease: lease, Limits: lim})
	if err != nil {
		return err
	}
	qb, err := queue.New(s, queue.Config{Now: clock.Now, Lease: lease, Limits: lim})
	if err != nil {
		return err
	}
	ctx := context.Background()
	// a cannot be claimed again (one attempt): only another job can take
	// its slot, so the fencing token alone cannot stop the revival.
	if _, _, err := qa.Enqueue(ctx, queue.NewJob{ID: "a", MaxAttempts: 1}); err != nil {
		return err
	}

	type running struct {
		ctx  context.Context
		done chan struct{}
	}
	started := make(chan running, 2)
	release := make(chan struct{})
	handler := func(hctx context.Context, _ []byte) error {
		r := running{ctx: hctx, done: make(chan struct{})}
		defer close(r.done)
		started <- r
		select {
		case <-release:
			return nil
		case <-hctx.Done():
			return hctx.Err()
		}
	}
	cfg := queue.WorkerConfig{PollInterval: 5 * time.Millisecond, SweepInterval: time.Hour, Grace: 10 * time.Second}
	wa, err := queue.NewWorker(qa, handler, cfg)
	if err != nil {
		return err
	}
	wb, err := queue.NewWorker(qb, handler, cfg)
	if err != nil {
		return err
	}
	actx, stopA := context.WithCancel(ctx)
	bctx, stopB := context.WithCancel(ctx)
	var wg sync.WaitGroup
	runW := func(w *queue.Worker, ctx context.Context) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = w.Run(ctx)
		}()
	}
	paused := false
	defer func() {
		if paused {
			pa.unpause()
		}
		close(release)
		stopA()
		stopB()
		wg.Wait()
	}()

	runW(wa, actx)
	ra := <-started // A runs a
	pa.pause()
	paused = true
	<-pa.blocked // A is stopped at its next clock reading
	clock.Set(resumeAt)
	if _, _, err := qb.Enqueue(ctx, queue.NewJob{ID: "b"}); err != nil {
		return err
	}
	runW(wb, bctx)
	rb := <-started // B runs b in the slot a's expired lease freed
	if st, err := s.Stats(ctx, queue.DefaultQueue, clock.Now()); err != nil || st.Leased-st.LeasedExpired != 1 {
		return fmt.Errorf("with A paused: %d live leases, %v; want 1 (b's)", st.Leased-st.LeasedExpired, err)
	}

	pa.unpause() // A wakes up
	paused = false
	held := <-watch.held
	st, err := s.Stats(ctx, queue.DefaultQueue, clock.Now())
	if err != nil {
		return err
	}
	if live := st.Leased - st.LeasedExpired; held || live > 1 {
		handlers := 0
		for _, r := range []running{ra, rb} {
			if r.ctx.Err() == nil {
				handlers++
			}
		}
		return fmt.Errorf("the paused worker's extension revived its expired lease (held=%v): %d live leases and %d handlers running, MaxInFlight 1", held, live, handlers)
	}
	<-ra.done // the heartbeat canceled A's handler
	if cause := context.Cause(ra.ctx); !errors.Is(cause, queue.ErrLeaseLost) {
		return fmt.Errorf("worker A's handler ended with cause %v, want %v", cause, queue.ErrLeaseLost)
	}
	if rb.ctx.Err() != nil {
		return fmt.Errorf("worker B's handler was canceled: %v", context.Cause(rb.ctx))
	}
	if st, err := s.Stats(ctx, queue.DefaultQueue, clock.Now()); err != nil || st.Leased-st.LeasedExpired != 1 {
		return fmt.Errorf("after A woke: %d live leases, %v; want 1 (b's)", st.Leased-st.LeasedExpired, err)
	}
	return nil
}
