package bench

// Durable queue throughput, side by side in one run: stagger's queue on
// SQLite vs maragu.dev/goqite and River's SQLite driver, stagger on
// PostgreSQL vs River (riverpgxv5), and the physical ceiling of each
// database (a bare claim-update + complete-update loop with a commit each).
//
// One benchmark op is one job end to end: enqueue (in transactions of 100
// for every library), claim, a no-op handler, completion. Every consumer runs
// 4 handlers at once. b.N jobs are enqueued, then the consumer drains them;
// the clock covers both. Use a fixed count for comparable runs:
//
//	cd bench && go test -run '^$' -bench 'Queue' -benchtime 2000x -count 3
//
// Durability is stated in each name: SQLite in WAL mode with
// synchronous=FULL (fsync per commit) or NORMAL (survives a killed process,
// not a power loss); PostgreSQL with the server's settings (logged).

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/queue/postgres"
	"github.com/staggerhq/stagger/queue/sqlite"
	"maragu.dev/goqite"
	goqitejobs "maragu.dev/goqite/jobs"
	_ "modernc.org/sqlite"
)

const (
	benchWorkers   = 4   // handlers running at once, every library
	benchInsertTxn = 100 // jobs per enqueue transaction, every library
)

var syncModes = []string{"FULL", "NORMAL"}

// sqliteDSN is the DSN every SQLite contender opens: WAL, the given
// synchronous mode, a busy timeout, immediate write transactions.
func sqliteDSN(path, sync string) string {
	v := url.Values{}
	v.Add("_pragma", "busy_timeout(5000)")
	v.Add("_pragma", "journal_mode(WAL)")
	v.Add("_pragma", "synchronous("+sync+")")
	v.Set("_txlock", "immediate")
	return "file:" + path + "?" + v.Encode()
}

func openSQL(b *testing.B, sync string) *sql.DB {
	b.Helper()
	db, err := sql.Open("sqlite", sqliteDSN(filepath.Join(b.TempDir(), "bench.db"), sync))
	if err != nil {
		b.Fatal(err)
	}
	db.SetMaxOpenConns(1) // SQLite has one writer; River and goqite recommend this
	b.Cleanup(func() { db.Close() })
	return db
}

func BenchmarkQueueSQLite(b *testing.B) {
	for _, sync := range syncModes {
		b.Run("sync="+sync+"/stagger", func(b *testing.B) {
			s, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "q.db"), sqlite.Options{Synchronous: sync})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			runStagger(b, s)
		})
		b.Run("sync="+sync+"/goqite", func(b *testing.B) { runGoqite(b, openSQL(b, sync)) })
		b.Run("sync="+sync+"/river", func(b *testing.B) { runRiverSQLite(b, openSQL(b, sync)) })
		for _, batch := range []int{1, 4, 32} {
			b.Run(fmt.Sprintf("sync=%s/ceiling/batch=%d", sync, batch), func(b *testing.B) {
				ceilingSQLite(b, openSQL(b, sync), batch)
			})
		}
	}
}

func BenchmarkQueuePostgres(b *testing.B) {
	pool := pgPool(b)
	var syncCommit, fsync string
	pool.QueryRow(context.Background(), `SHOW synchronous_commit`).Scan(&syncCommit)
	pool.QueryRow(context.Background(), `SHOW fsync`).Scan(&fsync)
	b.Logf("PostgreSQL synchronous_commit=%s fsync=%s", syncCommit, fsync)
	b.Run("stagger", func(b *testing.B) {
		s, err := postgres.New(context.Background(), pool, postgres.Options{Schema: pgSchema(b, pool)})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		defer pgCounters(b, pool)()
		runStagger(b, s)
	})
	b.Run("river", func(b *testing.B) {
		schema := pgSchema(b, pool)
		defer pgCounters(b, pool)()
		runRiverPG(b, pool, schema)
	})
	for _, batch := range []int{1, 4, 32} {
		b.Run(fmt.Sprintf("ceiling/batch=%d", batch), func(b *testing.B) {
			schema := pgSchema(b, pool)
			defer pgCounters(b, pool)()
			ceilingPG(b, pool, schema, batch)
		})
	}
}

// ---- stagger ----

// runStagger drains b.N jobs with a Worker in its default configuration
// (claims take as many jobs as there are idle handlers; outcomes are
// committed with the next claim).
func runStagger(b *testing.B, s queue.Store) {
	runStaggerCfg(b, s, queue.WorkerConfig{Concurrency: benchWorkers, Loops: benchInt(b, "STAGGER_BENCH_LOOPS"), PollInterval: 50 * time.Millisecond})
}

func runStaggerCfg(b *testing.B, s queue.Store, wc queue.WorkerConfig) {
	ctx := context.Background()
	q, err := queue.New(s, queue.Config{})
	if err != nil {
		b.Fatal(err)
	}
	n := b.N
	var done atomic.Int64
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wc.OnError = func(err error) { b.Error(err) }
	w, err := queue.NewWorker(q, func(context.Context, []byte) error {
		if done.Add(1) == int64(n) {
			cancel()
		}
		return nil
	}, wc)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	enqueueNoops(b, q, n, benchInsertTxn)
	if err := w.Run(wctx); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	report(b)
	if st, _ := q.Stats(ctx); st.Done != int64(n) {
		b.Fatalf("done %d of %d", st.Done, n)
	}
}

func report(b *testing.B) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}

// ---- goqite ----

// goqiteSchema is goqite v0.4.0's schema_sqlite.sql.
const goqiteSchema = `
create table goqite (
  id text primary key default ('m_' || lower(hex(randomblob(16)))),
  created text not null default (strftime('%Y-%m-%dT%H:%M:%fZ')),
  updated text not null default (strftime('%Y-%m-%dT%H:%M:%fZ')),
  queue text not null,
  body blob not null,
  timeout text not null default (strftime('%Y-%m-%dT%H:%M:%fZ')),
  received integer not null default 0,
  priority integer not null default 0
) strict;
create trigger goqite_updated_timestamp after update on goqite begin
  update goqite set updated = strftime('%Y-%m-%dT%H:%M:%fZ') where id = old.id;
end;
create index goqite_queue_priority_created_idx on goqite (queue, priority desc, created);`

func runGoqite(b *testing.B, db *sql.DB) {
	ctx := context.Background()
	if _, err := db.Exec(goqiteSchema); err != nil {
		b.Fatal(err)
	}
	q := goqite.New(goqite.NewOpts{DB: db, Name: "bench"})
	r := goqitejobs.NewRunner(goqitejobs.NewRunnerOpts{Limit: benchWorkers, PollInterval: time.Millisecond, Queue: q}) // its limit guard sleeps one poll interval
	n := b.N
	var done atomic.Int64
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.Register("noop", func(context.Context, []byte) error {
		if done.Add(1) == int64(n) {
			cancel()
		}
		return nil
	})
	b.ResetTimer()
	for i := 0; i < n; {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		for k := 0; k < benchInsertTxn && i < n; k, i = k+1, i+1 {
			if _, err := goqitejobs.CreateTx(ctx, tx, q, "noop", goqite.Message{Body: []byte("{}")}); err != nil {
				b.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	r.Start(rctx) // returns when the context is canceled and running jobs have finished
	b.StopTimer()
	report(b)
	// The runner deletes a message after its job returns; wait for the last.
	for range 1000 {
		var left int
		db.QueryRow(`select count(*) from goqite`).Scan(&left)
		if left == 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
	b.Fatal("goqite left messages undeleted")
}

// ---- River ----

type noopArgs struct{}

func (noopArgs) Kind() string { return "noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
}

func (noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

func riverConfig(schema string, pollOnly bool) *river.Config {
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{})
	return &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: benchWorkers}},
		Workers:           workers,
		Schema:            schema,
		PollOnly:          pollOnly,
		FetchCooldown:     time.Millisecond,
		FetchPollInterval: 50 * time.Millisecond,
		Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// runRiver drains b.N jobs through a started client, counting completion
// events (sent once the completer has persisted them).
func runRiver[TTx any](b *testing.B, client *river.Client[TTx]) {
	ctx := context.Background()
	n := b.N
	events, cancelEvents := client.Subscribe(river.EventKindJobCompleted)
	defer cancelEvents()
	b.ResetTimer()
	insertNoopsRiver(b, client, n, benchInsertTxn)
	if err := client.Start(ctx); err != nil {
		b.Fatal(err)
	}
	awaitRiver(b, events, n)
	b.StopTimer()
	report(b)
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	client.Stop(sctx)
}

// inBatches hands put the values mk makes for 0 to n-1, in slices of size
// (the last one shorter), and stops at put's first error.
func inBatches[T any](n, size int, mk func(i int) T, put func([]T) error) error {
	batch := make([]T, 0, size)
	for i := 0; i < n; {
		batch = batch[:0]
		for ; len(batch) < size && i < n; i++ {
			batch = append(batch, mk(i))
		}
		if err := put(batch); err != nil {
			return err
		}
	}
	return nil
}

// enqueueNoops enqueues n jobs job-000000000, job-000000001, ... with
// payload {} on q, size per EnqueueMany.
func enqueueNoops(b *testing.B, q *queue.Queue, n, size int) {
	b.Helper()
	err := inBatches(n, size,
		func(i int) queue.NewJob { return queue.NewJob{ID: fmt.Sprintf("job-%09d", i), Payload: []byte("{}")} },
		func(jobs []queue.NewJob) error { _, err := q.EnqueueMany(context.Background(), jobs); return err })
	if err != nil {
		b.Fatal(err)
	}
}

// insertNoopsRiver inserts n noopArgs jobs with client, size per
// InsertMany.
func insertNoopsRiver[TTx any](b *testing.B, client *river.Client[TTx], n, size int) {
	b.Helper()
	err := inBatches(n, size,
		func(int) river.InsertManyParams { return river.InsertManyParams{Args: noopArgs{}} },
		func(params []river.InsertManyParams) error {
			_, err := client.InsertMany(context.Background(), params)
			return err
		})
	if err != nil {
		b.Fatal(err)
	}
}

// migrateRiver installs River's schema ("": the driver's default).
func migrateRiver[TTx any](b *testing.B, driver riverdriver.Driver[TTx], schema string) {
	b.Helper()
	m, err := rivermigrate.New(driver, &rivermigrate.Config{Schema: schema})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := m.Migrate(context.Background(), rivermigrate.DirectionUp, nil); err != nil {
		b.Fatal(err)
	}
}

// awaitRiver waits for n completion events; a minute without one fails.
func awaitRiver(b *testing.B, events <-chan *river.Event, n int) {
	b.Helper()
	for got := 0; got < n; got++ {
		select {
		case <-events:
		case <-time.After(time.Minute):
			b.Fatalf("river: %d of %d completed", got, n)
		}
	}
}

func runRiverSQLite(b *testing.B, db *sql.DB) {
	driver := riversqlite.New(db)
	migrateRiver(b, driver, "")
	client, err := river.NewClient(driver, riverConfig("", true))
	if err != nil {
		b.Fatal(err)
	}
	runRiver(b, client)
}

func runRiverPG(b *testing.B, pool *pgxpool.Pool, schema string) {
	driver := riverpgxv5.New(pool)
	migrateRiver(b, driver, schema)
	client, err := river.NewClient(driver, riverConfig(schema, false))
	if err != nil {
		b.Fatal(err)
	}
	runRiver(b, client)
}

// ---- the physical ceiling ----

// ceilingSQLite is the least any durable queue must do per job on this
// database: insert it (in transactions of 100), then claim it with one
// committed update and complete it with another, batch jobs at a time, on
// one connection. No lease, no attempts, no decision, no handler.
func ceilingSQLite(b *testing.B, db *sql.DB, batch int) {
	ctx := context.Background()
	if _, err := db.Exec(`CREATE TABLE t (id INTEGER PRIMARY KEY, state INTEGER NOT NULL, payload BLOB NOT NULL);
		CREATE INDEX t_state ON t (state, id)`); err != nil {
		b.Fatal(err)
	}
	n := b.N
	b.ResetTimer()
	for i := 0; i < n; {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		for k := 0; k < benchInsertTxn && i < n; k, i = k+1, i+1 {
			if _, err := tx.Exec(`INSERT INTO t (state, payload) VALUES (0, ?)`, []byte("{}")); err != nil {
				b.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	for left := n; left > 0; {
		rows, err := db.Query(`UPDATE t SET state = 1 WHERE id IN (SELECT id FROM t WHERE state = 0 ORDER BY id LIMIT ?) RETURNING id`, batch)
		if err != nil {
			b.Fatal(err)
		}
		var ids []any
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				b.Fatal(err)
			}
			ids = append(ids, id)
		}
		if err := rows.Close(); err != nil {
			b.Fatal(err)
		}
		if err := rows.Err(); err != nil {
			b.Fatal(err)
		}
		if len(ids) == 0 {
			b.Fatalf("ceiling: %d jobs left but none to claim", left)
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		for _, id := range ids {
			if _, err := tx.Exec(`UPDATE t SET state = 2 WHERE id = ?`, id); err != nil {
				b.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
		left -= len(ids)
	}
	b.StopTimer()
	report(b)
}

// ceilingPG is the same bare loop on PostgreSQL, with 4 connections claiming
// with SKIP LOCKED.
func ceilingPG(b *testing.B, pool *pgxpool.Pool, schema string, batch int) {
	ctx := context.Background()
	t := schema + ".t"
	if _, err := pool.Exec(ctx, `CREATE TABLE `+t+` (id bigserial PRIMARY KEY, state int NOT NULL, payload bytea NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE INDEX ON `+t+` (state, id)`); err != nil {
		b.Fatal(err)
	}
	n := b.N
	b.ResetTimer()
	for i := 0; i < n; {
		k := min(benchInsertTxn, n-i)
		if _, err := pool.Exec(ctx, `INSERT INTO `+t+` (state, payload) SELECT 0, '{}'::bytea FROM generate_series(1, $1)`, k); err != nil {
			b.Fatal(err)
		}
		i += k
	}
	var left atomic.Int64
	left.Store(int64(n))
	var wg sync.WaitGroup
	for range benchWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Load() > 0 {
				rows, err := pool.Query(ctx, `UPDATE `+t+` SET state = 1 WHERE id IN (SELECT id FROM `+t+` WHERE state = 0 ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED) RETURNING id`, batch)
				if err != nil {
					b.Error(err)
					return
				}
				ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
				if err != nil {
					b.Error(err)
					return
				}
				if len(ids) == 0 {
					continue
				}
				if _, err := pool.Exec(ctx, `UPDATE `+t+` SET state = 2 WHERE id = ANY($1)`, ids); err != nil {
					b.Error(err)
					return
				}
				left.Add(-int64(len(ids)))
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	report(b)
}

// ---- PostgreSQL plumbing ----

// pgCounters, when STAGGER_BENCH_PGSTATS=1, reads the server's commit and
// WAL-flush counters and returns a function that reports their increase per
// job: commits/job (transactions committed in the database) and flushes/job
// (WAL syncs, the fsyncs durable commits wait for; concurrent commits may
// share one). They count everything the server did meanwhile, so another
// client adds to them. Backends publish their counters when they exit, so
// the report closes the pool's connections first (after the timer).
func pgCounters(b *testing.B, pool *pgxpool.Pool) func() {
	if os.Getenv("STAGGER_BENCH_PGSTATS") != "1" {
		return func() {}
	}
	read := func() (commits, syncs int64) {
		pool.Reset()
		time.Sleep(200 * time.Millisecond) // let the backends exit
		ctx := context.Background()
		conn, err := pool.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Release()
		if err := conn.QueryRow(ctx, `SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()`).Scan(&commits); err != nil {
			b.Fatalf("reading pg_stat_database: %v", err)
		}
		// pg_stat_wal.wal_sync exists up to PostgreSQL 17 (18 moved it to
		// pg_stat_io): fail rather than report 0 flushes/job.
		if err := conn.QueryRow(ctx, `SELECT wal_sync FROM pg_stat_wal`).Scan(&syncs); err != nil {
			b.Fatalf("reading pg_stat_wal.wal_sync: %v", err)
		}
		return commits, syncs
	}
	c0, s0 := read()
	return func() {
		c1, s1 := read()
		b.ReportMetric(float64(c1-c0)/float64(b.N), "commits/job")
		b.ReportMetric(float64(s1-s0)/float64(b.N), "flushes/job")
	}
}

func pgPool(b *testing.B) *pgxpool.Pool {
	b.Helper()
	return pgPoolCfg(b, func(*pgxpool.Config) {})
}

// pgPoolCfg is pgPool with its configuration adjusted by set (after the
// 16 connections).
func pgPoolCfg(b *testing.B, set func(*pgxpool.Config)) *pgxpool.Pool {
	b.Helper()
	url := os.Getenv("STAGGER_POSTGRES_URL")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/test"
	}
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		b.Fatal("STAGGER_POSTGRES_URL does not parse")
	}
	cfg.MaxConns = 16
	set(cfg)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		msg := "PostgreSQL unreachable at STAGGER_POSTGRES_URL: " + err.Error()
		if os.Getenv("CI") == "true" {
			b.Fatal(msg)
		}
		b.Skip(msg)
	}
	b.Cleanup(pool.Close)
	return pool
}

// pgSchema creates a fresh schema, dropped after the benchmark.
func pgSchema(b *testing.B, pool *pgxpool.Pool) string {
	b.Helper()
	buf := make([]byte, 6)
	rand.Read(buf)
	schema := "stagger_bench_" + hex.EncodeToString(buf)
	if _, err := pool.Exec(context.Background(), `CREATE SCHEMA `+schema); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { pool.Exec(context.Background(), `DROP SCHEMA `+schema+` CASCADE`) })
	return schema
}
