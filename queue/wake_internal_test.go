package queue

import (
	"context"
	"fmt"
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
// Queue value listening besides the enqueuer's.
func BenchmarkWakeRows(b *testing.B) {
	s := NewMemoryStore()
	q, _ := New(s, Config{})
	worker, _ := New(s, Config{})
	defer worker.listen()()
	for _, n := range []int{1, 100} {
		rows := make([]Job, n)
		for i := range rows {
			rows[i].Queue = DefaultQueue
		}
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				q.wakeRows(rows)
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
