package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/queue/postgres"
	"github.com/staggerhq/stagger/retry"
)

// cursorCount counts a store's claims after a key (ClaimAfter) among its
// claims.
type cursorCount struct {
	*postgres.Store
	claims, after atomic.Int64
}

func (c *cursorCount) Claim(ctx context.Context, name string, now, leaseUntil int64, limit int) ([]queue.Job, error) {
	c.claims.Add(1)
	return c.Store.Claim(ctx, name, now, leaseUntil, limit)
}

func (c *cursorCount) ClaimAfter(ctx context.Context, name string, now, leaseUntil int64, limit int, after *queue.ClaimKey, locked func(int, queue.ClaimKey)) ([]queue.Job, error) {
	c.claims.Add(1)
	if after != nil {
		c.after.Add(1)
	}
	return c.Store.ClaimAfter(ctx, name, now, leaseUntil, limit, after, locked)
}

// claimIDs returns the IDs of jobs.
func claimIDs(jobs []queue.Job) []string {
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	return ids
}

// ClaimAfter claims in (AvailableAt, ID) order after the key it is given,
// reports the jobs it locked before it updates them, leaves a job with an
// earlier key to a claim from the start, and a claim after the key of one
// still in flight takes the next jobs without waiting for it.
func TestClaimAfter(t *testing.T) {
	s := newStore(t)
	q := newQueue(t, s)
	ctx := context.Background()
	now := time.Now().UnixMilli()
	base := now - 100_000
	var jobs []queue.NewJob
	for i := range 12 {
		jobs = append(jobs, queue.NewJob{ID: fmt.Sprintf("j%02d", i), AvailableAt: base + int64(i/2)})
	}
	if _, err := q.EnqueueMany(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	var got []queue.ClaimKey
	locked := func(n int, last queue.ClaimKey) {
		got = append(got, queue.ClaimKey{AvailableAt: int64(n), ID: last.ID})
	}
	claim := func(after *queue.ClaimKey, limit int, locked func(int, queue.ClaimKey)) []string {
		t.Helper()
		js, err := s.ClaimAfter(ctx, queue.DefaultQueue, now, now+60_000, limit, after, locked)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range js {
			if j.State != queue.Leased || j.Attempts != 1 || j.LeaseUntil != now+60_000 || j.AvailableAt != now+60_000 || j.UpdatedAt != now || j.Queue != queue.DefaultQueue {
				t.Errorf("claimed %+v", j)
			}
			if stored, err := s.Get(ctx, j.ID); err != nil || stored.State != queue.Leased || stored.Attempts != 1 {
				t.Errorf("stored %+v, %v", stored, err)
			}
		}
		return claimIDs(js)
	}
	if ids := claim(nil, 3, locked); !slices.Equal(ids, []string{"j00", "j01", "j02"}) {
		t.Fatalf("first claim: %v", ids)
	}
	if want := []queue.ClaimKey{{AvailableAt: 3, ID: "j02"}}; !slices.Equal(got, want) {
		t.Fatalf("locked reported %v, want %v", got, want)
	}
	if ids := claim(&queue.ClaimKey{AvailableAt: base + 1, ID: "j02"}, 3, nil); !slices.Equal(ids, []string{"j03", "j04", "j05"}) {
		t.Fatalf("after j02: %v", ids)
	}

	// A job due before the keys claimed so far: claims after a key leave
	// it, a claim from the start takes it first.
	if _, _, err := q.Enqueue(ctx, queue.NewJob{ID: "early", AvailableAt: base - 1}); err != nil {
		t.Fatal(err)
	}
	after := &queue.ClaimKey{AvailableAt: base + 2, ID: "j05"}
	if ids := claim(after, 1, nil); !slices.Equal(ids, []string{"j06"}) {
		t.Fatalf("after j05: %v", ids)
	}

	// A claim stopped between its lock and its update: the claim after its
	// key takes the next jobs meanwhile.
	release := make(chan struct{})
	var first []string
	var wg sync.WaitGroup
	wg.Add(1)
	keys := make(chan queue.ClaimKey, 1)
	go func() {
		defer wg.Done()
		js, err := s.ClaimAfter(ctx, queue.DefaultQueue, now, now+60_000, 2, &queue.ClaimKey{AvailableAt: base + 3, ID: "j06"}, func(_ int, last queue.ClaimKey) {
			keys <- last
			<-release
		})
		if err != nil {
			t.Error(err)
		}
		first = claimIDs(js)
	}()
	k := <-keys
	if k != (queue.ClaimKey{AvailableAt: base + 4, ID: "j08"}) {
		t.Errorf("locked up to %+v, want j08 at %d", k, base+4)
	}
	if ids := claim(&k, 2, nil); !slices.Equal(ids, []string{"j09", "j10"}) {
		t.Errorf("after the key of a claim in flight: %v", ids)
	}
	close(release)
	wg.Wait()
	if !slices.Equal(first, []string{"j07", "j08"}) {
		t.Errorf("the claim held between lock and update: %v", first)
	}

	got = nil
	last := &queue.ClaimKey{AvailableAt: base + 5, ID: "j10"}
	if ids := claim(last, 5, locked); !slices.Equal(ids, []string{"j11"}) {
		t.Fatalf("after j10: %v", ids)
	}
	if ids := claim(&queue.ClaimKey{AvailableAt: base + 5, ID: "j11"}, 5, locked); len(ids) != 0 {
		t.Fatalf("after the last key: %v", ids)
	}
	if want := []queue.ClaimKey{{AvailableAt: 1, ID: "j11"}, {AvailableAt: 0, ID: "j11"}}; !slices.Equal(got, want) {
		t.Fatalf("locked reported %v, want %v", got, want)
	}
	if ids := claim(nil, 5, nil); !slices.Equal(ids, []string{"early"}) {
		t.Fatalf("from the start: %v", ids)
	}
}

// A Worker draining a backlog with claims after keys (BatchSize 256 or
// more) still reaches, within a few claims, jobs that become due with keys
// below those it is claiming: every few claims one walks from the start.
func TestWorkerCursorClaimsReachEarlierJobs(t *testing.T) {
	s := newStore(t)
	q := newQueue(t, s)
	ctx := context.Background()
	const n, batch, early = 4000, 256, 5
	base := time.Now().UnixMilli() - 1_000_000
	jobs := make([]queue.NewJob, n)
	for i := range jobs {
		jobs[i] = queue.NewJob{ID: fmt.Sprintf("b%05d", i), AvailableAt: base + int64(i)}
	}
	if _, err := q.EnqueueMany(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	var (
		mu       sync.Mutex
		started  int
		enqueued = -1 // starts before the early jobs were enqueued
		at       = map[string]int{}
		done     atomic.Int32
	)
	cs := &cursorCount{Store: s}
	wq := newQueue(t, cs)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := queue.NewWorker(wq, func(ctx context.Context, _ []byte) error {
		mu.Lock()
		started++
		d, _ := retry.DeliveryFrom(ctx)
		at[d.ID] = started
		enq := started == 1000
		mu.Unlock()
		if enq {
			ej := make([]queue.NewJob, early)
			for i := range ej {
				ej[i] = queue.NewJob{ID: fmt.Sprintf("a%d", i), AvailableAt: base - 1000}
			}
			if _, err := q.EnqueueMany(ctx, ej); err != nil {
				t.Error(err)
			}
			mu.Lock()
			enqueued = started
			mu.Unlock()
		}
		if done.Add(1) == n+early {
			cancel()
		}
		return nil
	}, queue.WorkerConfig{Concurrency: 64, BatchSize: batch, PollInterval: 50 * time.Millisecond, OnError: func(err error) { t.Error(err) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Run(rctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if cs.after.Load() == 0 {
		t.Fatalf("no claim after a key (%d claims)", cs.claims.Load())
	}
	// In flight or waiting when they were enqueued: the jobs of at most
	// 3 claims; then at most 4 claims after a key before one from the
	// start; each claim at most batch jobs.
	limit := enqueued + 8*batch
	for i := range early {
		id := fmt.Sprintf("a%d", i)
		if at[id] == 0 || at[id] > limit {
			t.Errorf("%s started %d-th, enqueued after the %d-th start: want by the %d-th", id, at[id], enqueued, limit)
		}
	}
	var starts []int
	for i := range early {
		starts = append(starts, at[fmt.Sprintf("a%d", i)])
	}
	t.Logf("%d claims, %d after a key; early jobs started %v-th (enqueued after the %d-th start)", cs.claims.Load(), cs.after.Load(), starts, enqueued)
}
