package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/queue/postgres"
	"github.com/staggerhq/stagger/queue/sqlite"
	"github.com/staggerhq/stagger/retry"
)

// retryWait is the wait both libraries are told to leave before a failed
// job's second attempt.
const retryWait = 20 * time.Millisecond

// BenchmarkQueuePostgresRetry: how late a short retry runs. One job at a
// time fails its first attempt and is retried after retryWait; the
// metrics are percentiles of (second attempt's start − first attempt's
// return − retryWait): the recording's commit plus however long the
// worker sleeps past the due time. Both libraries poll at their defaults
// (stagger 1 s jittered, River 1 s).
//
//	cd bench && go test -run '^$' -bench 'BenchmarkQueuePostgresRetry' -benchtime 100x -count 1 .
func BenchmarkQueuePostgresRetry(b *testing.B) {
	pool := benchPool(b)
	b.Run("stagger", func(b *testing.B) {
		s, err := postgres.New(context.Background(), pool, postgres.Options{Schema: pgSchema(b, pool)})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		staggerLateness(b, s)
	})
	b.Run("river", func(b *testing.B) {
		ctx := context.Background()
		schema := pgSchema(b, pool)
		migrateRiver(b, riverpgxv5.New(pool), schema)
		late := make(chan time.Duration, 1)
		workers := river.NewWorkers()
		river.AddWorker(workers, &retryWorker{late: late})
		cfg := riverConfig(schema, false)
		cfg.Workers, cfg.FetchCooldown, cfg.FetchPollInterval = workers, 0, 0 // River's defaults
		client, err := river.NewClient(riverpgxv5.New(pool), cfg)
		if err != nil {
			b.Fatal(err)
		}
		defer startRiver(b, client)()
		lateness(b, late, func(int) error {
			_, err := client.Insert(ctx, retryArgs{}, &river.InsertOpts{MaxAttempts: 2})
			return err
		})
	})
}

// BenchmarkQueueSQLiteRetry is BenchmarkQueuePostgresRetry's stagger
// half on SQLite (synchronous=FULL, the default).
//
//	cd bench && go test -run '^$' -bench 'BenchmarkQueueSQLiteRetry' -benchtime 100x -count 1 .
func BenchmarkQueueSQLiteRetry(b *testing.B) {
	s, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "q.db"), sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	staggerLateness(b, s)
}

// staggerLateness measures lateness with a Worker of benchWorkers
// handlers on s at its default poll.
func staggerLateness(b *testing.B, s queue.Store) {
	ctx := context.Background()
	q, err := queue.New(s, queue.Config{Policy: &retry.Policy{MaxAttempts: 2, Schedule: backoff.Constant(retryWait)}})
	if err != nil {
		b.Fatal(err)
	}
	var failed time.Time // written by attempt 1, read by attempt 2: one job at a time
	late := make(chan time.Duration, 1)
	defer runWorker(b, q, func(ctx context.Context, _ []byte) error {
		if d, _ := retry.DeliveryFrom(ctx); d.Attempt == 1 {
			failed = time.Now()
			return retry.Retryable(errRetryBench)
		}
		late <- time.Since(failed) - retryWait
		return nil
	})()
	lateness(b, late, func(i int) error {
		_, _, err := q.Enqueue(ctx, queue.NewJob{ID: fmt.Sprintf("r-%d-%d", b.N, i)})
		return err
	})
}

var errRetryBench = errors.New("bench: first attempt fails")

type retryArgs struct{}

func (retryArgs) Kind() string { return "retry-once" }

// retryWorker fails a job's first attempt and asks for its retry after
// retryWait.
type retryWorker struct {
	river.WorkerDefaults[retryArgs]
	failed time.Time
	late   chan<- time.Duration
}

func (w *retryWorker) Work(_ context.Context, j *river.Job[retryArgs]) error {
	if j.Attempt == 1 {
		w.failed = time.Now()
		return errRetryBench
	}
	w.late <- time.Since(w.failed) - retryWait
	return nil
}

func (w *retryWorker) NextRetry(*river.Job[retryArgs]) time.Time { return time.Now().Add(retryWait) }

// lateness enqueues b.N jobs one at a time, each after the previous one's
// retry ran, and reports the percentiles of the retries' lateness.
func lateness(b *testing.B, late <-chan time.Duration, enqueue func(i int) error) {
	oneAtATime(b, "late-ms", enqueue, func(i int) time.Duration { return within(b, late, i) })
}
