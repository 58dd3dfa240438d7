package queuetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/retry"
)

// peak counts handlers in flight and the most at once.
type peak struct {
	mu       sync.Mutex
	now, max int
}

func (p *peak) enter() {
	p.mu.Lock()
	p.now++
	p.max = max(p.max, p.now)
	p.mu.Unlock()
}

func (p *peak) leave() {
	p.mu.Lock()
	p.now--
	p.mu.Unlock()
}

func (p *peak) most() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.max
}

// testWorkerQueues runs one Worker serving three queues of the store, each
// with its own handler, concurrency and Limits: "busy" fills its two
// handlers with jobs that block, and the other queues still drain at their
// own concurrency ("quick", three handlers) and within their fleet limit
// ("limited", three handlers but MaxInFlight 1). The queue clock is fixed;
// the waits below only bound how long the test may take.
func testWorkerQueues(t *testing.T, s queue.Store) {
	clock := NewClock(Start)
	ctx := context.Background()
	newQ := func(name string, lim queue.Limits) *queue.Queue {
		q, err := queue.New(s, queue.Config{Queue: name, Now: clock.Now, Limits: lim})
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	busy, quick, limited := newQ("busy", queue.Limits{}), newQ("quick", queue.Limits{}), newQ("limited", queue.Limits{MaxInFlight: 1})
	const n = 12
	for i := range n {
		for _, q := range []*queue.Queue{busy, quick, limited} {
			if _, _, err := q.Enqueue(ctx, queue.NewJob{ID: fmt.Sprintf("%s-%02d", q.Config().Queue, i)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	release := make(chan struct{})
	blocked := make(chan struct{}, n) // a busy handler began to block
	var pBusy, pQuick, pLimited peak
	var mu sync.Mutex
	wrong := map[string]string{} // job ID -> the queue whose handler ran it
	handler := func(name string, p *peak, block bool) retry.Handler {
		return func(ctx context.Context, _ []byte) error {
			p.enter()
			defer p.leave()
			d, _ := retry.DeliveryFrom(ctx)
			if len(d.ID) < len(name) || d.ID[:len(name)] != name {
				mu.Lock()
				wrong[d.ID] = name
				mu.Unlock()
			}
			if block {
				blocked <- struct{}{}
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
			} else {
				time.Sleep(time.Millisecond) // lets handlers overlap
			}
			return nil
		}
	}
	var errMu sync.Mutex
	var errs []error
	results := map[string]int{}
	w, err := queue.NewMultiWorker(queue.WorkerConfig{
		PollInterval: 5 * time.Millisecond, Grace: 10 * time.Second,
		OnError:  func(err error) { errMu.Lock(); errs = append(errs, err); errMu.Unlock() },
		OnResult: func(r queue.Result) { results[r.Job.Queue]++ }, // one call at a time: no lock
	},
		queue.Serve{Queue: busy, Handler: handler("busy", &pBusy, true), Concurrency: 2},
		queue.Serve{Queue: quick, Handler: handler("quick", &pQuick, false), Concurrency: 3},
		queue.Serve{Queue: limited, Handler: handler("limited", &pLimited, false), Concurrency: 3},
	)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(rctx) }()
	waitDone := func(q *queue.Queue, want int64) queue.Stats {
		t.Helper()
		limit := time.Now().Add(20 * time.Second)
		for {
			st, err := q.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.Done >= want || time.Now().After(limit) {
				return st
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// The busy queue's two handlers block: the others drain regardless.
	for range 2 {
		select {
		case <-blocked:
		case <-time.After(20 * time.Second):
			t.Fatal("the busy queue's handlers did not start")
		}
	}
	if st := waitDone(quick, n); st.Done != n {
		t.Fatalf("quick queue starved while busy blocks: %+v", st)
	}
	if st := waitDone(limited, n); st.Done != n {
		t.Fatalf("limited queue starved while busy blocks: %+v", st)
	}
	if st, _ := busy.Stats(ctx); st.Leased != 2 || st.Done != 0 {
		t.Fatalf("busy queue: %+v, want its 2 handlers' jobs leased", st)
	}
	close(release)
	if st := waitDone(busy, n); st.Done != n {
		t.Fatalf("busy queue after release: %+v", st)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	if len(errs) > 0 || len(wrong) > 0 {
		t.Fatalf("errors %v; jobs run by another queue's handler %v", errs, wrong)
	}
	if pBusy.most() != 2 || pQuick.most() > 3 || pLimited.most() != 1 {
		t.Fatalf("peaks in flight: busy %d (want 2), quick %d (want <= 3), limited %d (want 1)", pBusy.most(), pQuick.most(), pLimited.most())
	}
	if results["busy"] != n || results["quick"] != n || results["limited"] != n {
		t.Fatalf("OnResult per queue: %v", results)
	}
}

// testStatsByQueue: StatsByQueue counts every queue that holds a job, each
// as Stats counts it, and names no queue without one.
func testStatsByQueue(t *testing.T, s queue.Store) {
	e := newEnv(t, s, nil)
	mail, err := queue.New(s, queue.Config{Queue: "mail", Now: e.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	e.enqueue(queue.NewJob{ID: "d1"})
	e.enqueue(queue.NewJob{ID: "d2", AvailableAt: Start + 1000})
	e.enqueue(queue.NewJob{ID: "m1", Queue: "mail", MaxAttempts: 1})
	e.enqueue(queue.NewJob{ID: "m2", Queue: "mail", Deadline: Start + 20})
	e.enqueue(queue.NewJob{ID: "m3", Queue: "mail"})
	e.clock.Advance(30) // m2's deadline passed: due to die
	if _, ok := s.(queue.StatsByQueuer); !ok {
		if _, err := e.q.StatsByQueue(e.ctx); !errors.Is(err, queue.ErrNoStatsByQueue) {
			t.Fatalf("StatsByQueue on a store without it = %v", err)
		}
		return
	}
	all, err := mail.StatsByQueue(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 {
		t.Fatalf("StatsByQueue = %+v, want the default and mail queues", all)
	}
	for name, q := range map[string]*queue.Queue{queue.DefaultQueue: e.q, "mail": mail} {
		one, err := q.Stats(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if all[name] != one {
			t.Fatalf("queue %s: StatsByQueue %+v, Stats %+v", name, all[name], one)
		}
	}
	if d, m := all[queue.DefaultQueue], all["mail"]; d.PendingDue != 1 || d.PendingScheduled != 1 || m.PendingDue != 2 || m.DueToDie != 1 || m.OldestPendingAge() != 30 {
		t.Fatalf("counts: default %+v, mail %+v", d, m)
	}
}
