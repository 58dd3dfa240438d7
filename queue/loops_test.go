package queue_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/retry"
)

// overlapClaims is a store whose claims take 2 ms (virtual) and count how
// many are in flight at once.
type overlapClaims struct {
	*queue.MemoryStore
	mu          sync.Mutex
	now, most   int
	claims, big int // claims, and those asking for more than the batch
	batch       int
}

func (s *overlapClaims) enter(limit int) {
	s.mu.Lock()
	s.now++
	s.most = max(s.most, s.now)
	s.claims++
	if limit > s.batch {
		s.big++
	}
	s.mu.Unlock()
	time.Sleep(2 * time.Millisecond)
	s.mu.Lock()
	s.now--
	s.mu.Unlock()
}

func (s *overlapClaims) Claim(ctx context.Context, name string, now, leaseUntil int64, limit int) ([]queue.Job, error) {
	s.enter(limit)
	return s.MemoryStore.Claim(ctx, name, now, leaseUntil, limit)
}

func (s *overlapClaims) RecordAndClaim(ctx context.Context, outs []queue.Outcome, name string, now, leaseUntil int64, limit int) ([]queue.Job, error) {
	s.enter(limit)
	return s.MemoryStore.RecordAndClaim(ctx, outs, name, now, leaseUntil, limit)
}

func (s *overlapClaims) ClaimLimited(ctx context.Context, name string, lim queue.Limits, now, leaseUntil int64, limit int) ([]queue.Job, error) {
	s.enter(limit)
	return s.MemoryStore.ClaimLimited(ctx, name, lim, now, leaseUntil, limit)
}

// drainOverlap drains n jobs with a Worker of cfg on a queue of qcfg and
// returns the most claims in flight at once. Every job must be done,
// each handler run once, and no claim may ask for more than BatchSize.
func drainOverlap(t *testing.T, qcfg queue.Config, cfg queue.WorkerConfig) int {
	t.Helper()
	const n = 200
	s := &overlapClaims{MemoryStore: queue.NewMemoryStore(), batch: cmp.Or(cfg.BatchSize, 64)}
	q := newQueueOn(t, s, qcfg)
	ctx := context.Background()
	for i := range n {
		if _, _, err := q.Enqueue(ctx, queue.NewJob{ID: fmt.Sprintf("j%03d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	runs := map[string]int{}
	var done atomic.Int32
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cfg.PollInterval = 10 * time.Millisecond
	cfg.OnError = func(err error) { t.Error(err) }
	w, err := queue.NewWorker(q, func(ctx context.Context, _ []byte) error {
		d, _ := retry.DeliveryFrom(ctx)
		mu.Lock()
		runs[d.ID]++
		mu.Unlock()
		time.Sleep(time.Millisecond)
		if done.Add(1) == n {
			cancel()
		}
		return nil
	}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Run(rctx); err != nil {
		t.Fatal(err)
	}
	doneOnce(t, q, n, runs)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.big > 0 {
		t.Errorf("%d of %d claims asked for more than BatchSize %d", s.big, s.claims, s.batch)
	}
	return s.most
}

// A Worker's default claim loops keep several claims of one queue in
// flight at once; Loops 1, a BatchSize of 256 or more, or fleet Limits
// keep one.
func TestWorkerLoopsOverlapClaims(t *testing.T) {
	for _, c := range []struct {
		name string
		qcfg queue.Config
		cfg  queue.WorkerConfig
		want func(int) bool
		rule string
	}{
		{"default", queue.Config{}, queue.WorkerConfig{Concurrency: 4}, func(m int) bool { return m >= 2 && m <= queue.DefaultLoops }, "2 to DefaultLoops"},
		{"loops=3", queue.Config{}, queue.WorkerConfig{Concurrency: 8, Loops: 3}, func(m int) bool { return m >= 2 && m <= 3 }, "2 to 3"},
		{"loops=1", queue.Config{}, queue.WorkerConfig{Concurrency: 4, Loops: 1}, func(m int) bool { return m == 1 }, "1"},
		{"batch=256", queue.Config{}, queue.WorkerConfig{Concurrency: 8, BatchSize: 256}, func(m int) bool { return m == 1 }, "1"},
		{"limits", queue.Config{Limits: queue.Limits{MaxInFlight: 3}}, queue.WorkerConfig{Concurrency: 4}, func(m int) bool { return m == 1 }, "1"},
		{"concurrency=1", queue.Config{}, queue.WorkerConfig{}, func(m int) bool { return m == 1 }, "1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				if m := drainOverlap(t, c.qcfg, c.cfg); !c.want(m) {
					t.Fatalf("at most %d claims in flight at once, want %s", m, c.rule)
				}
			})
		})
	}
}

func TestWorkerLoopsInvalid(t *testing.T) {
	q := newQueue(t, queue.Config{})
	h := func(context.Context, []byte) error { return nil }
	for _, cfg := range []queue.WorkerConfig{{Concurrency: 4, Loops: 5}, {Loops: -1}, {Loops: 2}} {
		_, err := queue.NewWorker(q, h, cfg)
		if !errors.Is(err, queue.ErrInvalid) || !strings.Contains(err.Error(), "Loops must be in [1, Concurrency") {
			t.Errorf("%+v: %v, want an invalid Loops", cfg, err)
		}
	}
	// A Serve of fewer handlers than the Worker's Loops runs one loop per
	// handler; its own Loops must fit its own Concurrency.
	b := newQueueOn(t, queue.NewMemoryStore(), queue.Config{Queue: "b"})
	if _, err := queue.NewMultiWorker(queue.WorkerConfig{Concurrency: 8, Loops: 4}, queue.Serve{Queue: q, Handler: h, Concurrency: 2}); err != nil {
		t.Errorf("inherited Loops above a Serve's Concurrency: %v", err)
	}
	if _, err := queue.NewMultiWorker(queue.WorkerConfig{}, queue.Serve{Queue: b, Handler: h, Concurrency: 2, Loops: 3}); !errors.Is(err, queue.ErrInvalid) {
		t.Errorf("Serve.Loops above its Concurrency: %v", err)
	}
}

// doneOnce checks that q has n jobs done, each run once (runs: the
// handler's calls by job ID).
func doneOnce(t *testing.T, q *queue.Queue, n int, runs map[string]int) {
	t.Helper()
	st, err := q.Stats(context.Background())
	if err != nil || st.Done != int64(n) {
		t.Fatalf("done %d of %d: %v", st.Done, n, err)
	}
	for id, c := range runs {
		if c != 1 {
			t.Errorf("%s ran %d times", id, c)
		}
	}
}
