package queue

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// The Queues a Worker runs are listed while it runs and not after: the
// list holds no more than the running Workers' queues.
func TestListeningEndsWithRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewMemoryStore()
		q, err := New(s, Config{})
		if err != nil {
			t.Fatal(err)
		}
		k, _ := q.keyOf(DefaultQueue)
		listed := func() int {
			listening.mu.Lock()
			defer listening.mu.Unlock()
			return listening.m[k][q]
		}
		ctx, cancel := context.WithCancel(context.Background())
		var done []chan error
		for range 2 {
			w, err := NewWorker(q, func(context.Context, []byte) error { return nil }, WorkerConfig{PollInterval: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			d := make(chan error)
			go func() { d <- w.Run(ctx) }()
			done = append(done, d)
		}
		synctest.Wait()
		if n := listed(); n != 2 {
			t.Errorf("two Workers run q: listed %d times", n)
		}
		cancel()
		for _, d := range done {
			<-d
		}
		listening.mu.Lock()
		_, ok := listening.m[k]
		listening.mu.Unlock()
		if ok {
			t.Error("the store's queue is still listed after its Workers stopped")
		}
	})
}

// BenchmarkWakeRows is what an enqueue adds to the store's insert to wake
// the loops: a batch of one or 100 jobs of one queue, with a Worker's
// Queue value listening.
func BenchmarkWakeRows(b *testing.B) {
	s := NewMemoryStore()
	q, _ := New(s, Config{})
	worker, _ := New(s, Config{})
	defer worker.listen()()
	for _, n := range []int{1, 100} {
		res := make([]Inserted, n)
		for i := range res {
			res[i] = Inserted{Job: Job{Queue: DefaultQueue}, Created: true}
		}
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				q.wakeRows(res)
			}
		})
	}
}

// valueStore is a store of a type that cannot be a map key.
type valueStore struct {
	Store
	hook func()
}

// wrapStore is a store of a comparable type, which a value inside it can
// make uncomparable.
type wrapStore struct{ Store }

// A store that cannot be compared has no key: its Queue's Workers are
// woken by that Queue alone, and nothing panics.
func TestWakeUncomparableStore(t *testing.T) {
	for name, s := range map[string]Store{
		"a func field":            valueStore{Store: NewMemoryStore(), hook: func() {}},
		"an uncomparable wrapped": wrapStore{valueStore{Store: NewMemoryStore()}},
	} {
		t.Run(name, func(t *testing.T) { testWakeUncomparable(t, s) })
	}
}

func testWakeUncomparable(t *testing.T, s Store) {
	synctest.Test(t, func(t *testing.T) {
		q, err := New(s, Config{})
		if err != nil {
			t.Fatal(err)
		}
		ran := make(chan struct{}, 1)
		w, err := NewWorker(q, func(context.Context, []byte) error { ran <- struct{}{}; return nil }, WorkerConfig{PollInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- w.Run(ctx) }()
		synctest.Wait()
		if _, _, err := q.Enqueue(ctx, NewJob{ID: "a"}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		select {
		case <-ran:
		default:
			t.Error("the Queue's own Worker did not wake")
		}
		cancel()
		<-done
	})
}

// The due times a Queue keeps: ascending and distinct, at most maxDues
// (the latest give way), forgotten once a claim at or after them found
// nothing; a wake only when the soonest moves earlier.
func TestDues(t *testing.T) {
	now := int64(1000)
	q, err := New(NewMemoryStore(), Config{Now: func() int64 { return now }})
	if err != nil {
		t.Fatal(err)
	}
	woken := func(f func()) bool {
		c := q.waitChan()
		f()
		select {
		case <-c:
			return true
		default:
			return false
		}
	}
	if !woken(func() { q.addDues([]int64{1500, 1200, 1500}, true) }) {
		t.Error("the first due time did not wake")
	}
	if woken(func() { q.addDues([]int64{1300}, true) }) {
		t.Error("a later due time woke the loops")
	}
	if woken(func() { q.addDues([]int64{1100}, false) }) {
		t.Error("without wake, a sooner due time woke the loops")
	}
	if !slices.Equal(q.dues, []int64{1100, 1200, 1300, 1500}) {
		t.Errorf("dues %v", q.dues)
	}
	if d, at, ok := q.untilDue(1000); !ok || d != 100*time.Millisecond || at != 1100 {
		t.Errorf("untilDue(1000) = %v, %d, %v; want 100ms, 1100", d, at, ok)
	}
	now = 1250
	if d, at, ok := q.untilDue(1200); !ok || d != 50*time.Millisecond || at != 1300 || !slices.Equal(q.dues, []int64{1300, 1500}) {
		t.Errorf("untilDue(1200) at 1250 = %v, %d, %v, dues %v; want 50ms, 1300, [1300 1500]", d, at, ok, q.dues)
	}
	now = 1400
	if d, _, ok := q.untilDue(1250); !ok || d != 0 {
		t.Errorf("untilDue past a due time = %v, %v; want 0 (claim again now)", d, ok)
	}
	q.dropDue(1300)
	q.dropDue(1234) // not there: nothing changes
	if !slices.Equal(q.dues, []int64{1500}) {
		t.Errorf("after dropDue(1300): %v", q.dues)
	}
	if _, _, ok := q.untilDue(1500); ok || len(q.dues) != 0 {
		t.Errorf("untilDue(1500) kept %v", q.dues)
	}
	var many []int64
	for i := range maxDues + 10 {
		many = append(many, int64(5000-i))
	}
	q.addDues(many, false)
	if len(q.dues) != maxDues || q.dues[0] != 5000-maxDues-9 || q.dues[maxDues-1] != 4990 {
		t.Errorf("%d dues from %d to %d; want the %d soonest", len(q.dues), q.dues[0], q.dues[len(q.dues)-1], maxDues)
	}
	q.addDues([]int64{9999}, false)
	if q.dues[maxDues-1] != 4990 {
		t.Error("a due time later than a full list's last was kept")
	}
}

// Only running Queues learn due times: an enqueue-only Queue (a web
// handler's) keeps none, and re-enqueueing an existing ID notes nothing.
func TestDuesOnlyWhereAWorkerRuns(t *testing.T) {
	s := NewMemoryStore()
	now := int64(1000)
	clock := func() int64 { return now }
	web, _ := New(s, Config{Now: clock})
	worker, _ := New(s, Config{Now: clock})
	stop := worker.listen()
	defer stop()
	ctx := context.Background()
	if _, _, err := web.Enqueue(ctx, NewJob{ID: "later", AvailableAt: 1500}); err != nil {
		t.Fatal(err)
	}
	if len(web.dues) != 0 || !slices.Equal(worker.dues, []int64{1500}) {
		t.Errorf("dues: enqueuer %v, worker %v; want none, [1500]", web.dues, worker.dues)
	}
	worker.dues = nil
	if _, _, err := web.Enqueue(ctx, NewJob{ID: "later", AvailableAt: 1200}); err != nil {
		t.Fatal(err)
	}
	if len(worker.dues) != 0 {
		t.Errorf("an existing ID's enqueue noted %v", worker.dues)
	}
}

// NewMultiWorker takes one queue on a store that cannot be compared (as
// NewWorker does), and refuses two, which it cannot tell are one store.
func TestMultiWorkerUncomparableStore(t *testing.T) {
	s := valueStore{Store: NewMemoryStore(), hook: func() {}}
	a, _ := New(s, Config{Queue: "a"})
	b, _ := New(s, Config{Queue: "b"})
	h := func(context.Context, []byte) error { return nil }
	if _, err := NewMultiWorker(WorkerConfig{}, Serve{Queue: a, Handler: h}); err != nil {
		t.Errorf("one queue: %v", err)
	}
	if _, err := NewMultiWorker(WorkerConfig{}, Serve{Queue: a, Handler: h}, Serve{Queue: b, Handler: h}); err == nil {
		t.Error("two queues on a store that cannot be compared: no error")
	}
}
