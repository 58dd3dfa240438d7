package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/queue/queuetest"
	"github.com/staggerhq/stagger/queue/sqlite"
	"github.com/staggerhq/stagger/retry"
)

// A durable queue in one SQLite file: enqueue, a failed attempt that is
// scheduled again, a restart of the process (a new Store on the same file)
// that keeps the spent attempt, and the successful retry.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "stagger-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "jobs.db")
	clock := queuetest.NewClock(queuetest.Start)
	cfg := queue.Config{Policy: &retry.Policy{Schedule: backoff.Ratio{Base: 100 * time.Millisecond, Cap: time.Second}, Rand: queuetest.FixedRatio(0.5)}, Now: clock.Now}

	store, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		panic(err)
	}
	q, _ := queue.New(store, cfg)
	q.Enqueue(ctx, queue.NewJob{ID: "webhook-7", Payload: []byte("ping"), MaxAttempts: 3})
	j, _ := q.RunOnce(ctx, func(context.Context, []byte) error {
		return retry.Retryable(errors.New("connection refused"))
	})
	fmt.Println(j.State, j.Attempts, "retry in", j.AvailableAt-clock.Now(), "ms")
	store.Close()

	// The process restarts.
	store, _ = sqlite.Open(ctx, path, sqlite.Options{})
	defer store.Close()
	q, _ = queue.New(store, cfg)
	clock.Advance(50)
	j, _ = q.RunOnce(ctx, func(context.Context, []byte) error { return nil })
	fmt.Println(j.State, j.Attempts)
	// Output:
	// pending 1 retry in 50 ms
	// done 2
}

// The outbox pattern: the order and the job that ships it commit together,
// or neither does.
func ExampleStore_EnqueueTx() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "stagger-example")
	defer os.RemoveAll(dir)
	store, err := sqlite.Open(ctx, filepath.Join(dir, "shop.db"), sqlite.Options{})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	q, _ := queue.New(store, queue.Config{})
	store.DB().ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY)`)

	place := func(id string, fail bool) {
		tx, _ := store.DB().BeginTx(ctx, nil)
		tx.ExecContext(ctx, `INSERT INTO orders VALUES (?)`, id)
		store.EnqueueTx(ctx, tx, q, queue.NewJob{ID: "ship-" + id, Payload: []byte(id)})
		if fail {
			tx.Rollback()
			return
		}
		tx.Commit()
		q.Wake()
	}
	place("o-1", false)
	place("o-2", true)
	for _, id := range []string{"ship-o-1", "ship-o-2"} {
		_, err := store.Get(ctx, id)
		fmt.Println(id, err == nil)
	}
	// Output:
	// ship-o-1 true
	// ship-o-2 false
}
