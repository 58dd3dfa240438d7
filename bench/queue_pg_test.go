package bench

// PostgreSQL queue against River beyond the 4-handler run of queue_test.go:
// drains of pre-inserted no-op jobs at 4 to 512 workers and River at its
// own benchmark settings, the server's CPU per job, pick-up latency
// (enqueue commit to handler start) and batched enqueue. Run one size at a
// time, for example:
//
//	cd bench && go test -run '^$' -bench 'BenchmarkQueuePostgresDrain/c=(32|128|512)' -benchtime 50000x -count 3 .
//	cd bench && go test -run '^$' -bench 'BenchmarkQueuePostgresPickup' -benchtime 300x -count 1 .
//	cd bench && go test -run '^$' -bench 'BenchmarkQueuePostgresInsert' -benchtime 100000x -count 3 .

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/queue/postgres"
	"github.com/staggerhq/stagger/retry"
)

// benchApp is the application_name of the benchmark's connections, so
// that the server's CPU is read from their backends only.
const benchApp = "stagger-bench"

const drainInsertBatch = 1000 // jobs per enqueue transaction before a drain

// River at its own benchmark's settings (riverbench): 2,000 workers, a
// 2 ms fetch cooldown, a 20 ms poll interval; every River run here uses the
// same fetch settings.
const (
	riverBestWorkers  = 2000
	riverFetchCool    = 2 * time.Millisecond
	riverFetchPolling = 20 * time.Millisecond
)

func benchPool(b *testing.B) *pgxpool.Pool {
	return pgPoolCfg(b, func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["application_name"] = benchApp })
}

// BenchmarkQueuePostgresDrain: b.N no-op jobs are inserted (in
// transactions of drainInsertBatch, not timed), then drained; the clock
// covers the drain only, until the last completion is committed. Each
// concurrency runs stagger's Worker (Concurrency c, its defaults
// otherwise) and River (MaxWorkers c); best/river is River with
// riverBestWorkers.
func BenchmarkQueuePostgresDrain(b *testing.B) {
	pool := benchPool(b)
	warmPool(b, pool)
	for _, c := range []int{4, 32, 128, 512} {
		b.Run(fmt.Sprintf("c=%d/stagger", c), func(b *testing.B) { drainStagger(b, pool, c, 1) })
		b.Run(fmt.Sprintf("c=%d/river", c), func(b *testing.B) { drainRiver(b, pool, c) })
	}
	// The same handlers in drainLoops Workers of one process: that many
	// claim loops, so that many transactions in flight.
	for _, c := range []int{4, 512} {
		b.Run(fmt.Sprintf("c=%d/stagger-loops", c), func(b *testing.B) { drainStagger(b, pool, c, drainLoops) })
		// One Worker of one claim loop (WorkerConfig.Loops 1), as before
		// the Worker shared a queue's handlers among loops.
		b.Run(fmt.Sprintf("c=%d/stagger-1loop", c), func(b *testing.B) { drainStagger(b, pool, c, -1) })
	}
	b.Run("best/river", func(b *testing.B) { drainRiver(b, pool, riverBestWorkers) })
	for _, batch := range ceilingBatches {
		b.Run(fmt.Sprintf("ceiling/batch=%d", batch), func(b *testing.B) { drainCeiling(b, pool, batch) })
	}
}

// splitStore hides the store's RecordAndClaim (STAGGER_BENCH_SPLIT=1), so
// that the Worker commits outcomes in transactions of their own, beside
// the claims, on another connection.
type splitStore struct{ queue.Store }

// drainLoops is how many Workers the stagger-loops drains run.
const drainLoops = 4

// drainStagger drains with loops Workers of c/loops handlers each on one
// store (one Worker: the Worker as adopters run it; -1: one Worker of one
// claim loop; more: Workers of one claim loop each, unless
// STAGGER_BENCH_LOOPS says otherwise).
func drainStagger(b *testing.B, pool *pgxpool.Pool, c, loops int) {
	claimLoops := benchInt(b, "STAGGER_BENCH_LOOPS")
	switch {
	case loops == -1:
		loops, claimLoops = 1, 1
	case loops > 1 && claimLoops == 0:
		claimLoops = 1 // each Worker one claim loop
	}
	ctx := context.Background()
	var err error
	opts := postgres.Options{Schema: pgSchema(b, pool)}
	if v := os.Getenv("STAGGER_BENCH_VACUUM_AFTER"); v != "" {
		if opts.VacuumAfter, err = strconv.Atoi(v); err != nil {
			b.Fatalf("STAGGER_BENCH_VACUUM_AFTER=%q: %v", v, err)
		}
	}
	s, err := postgres.New(ctx, pool, opts)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	history := benchInt(b, "STAGGER_BENCH_HISTORY")
	addHistory(b, pool, opts.Schema+".stagger_jobs", history)
	cs := &countStore{Store: s}
	var qs queue.Store = cs
	if os.Getenv("STAGGER_BENCH_SPLIT") == "1" {
		qs = splitStore{cs}
	}
	q, err := queue.New(qs, queue.Config{})
	if err != nil {
		b.Fatal(err)
	}
	n := b.N
	enqueueNoops(b, q, n, drainInsertBatch)
	var done atomic.Int64
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ws := make([]*queue.Worker, loops)
	for i := range ws {
		ws[i], err = queue.NewWorker(q, func(context.Context, []byte) error {
			if done.Add(1) == int64(n) {
				cancel()
			}
			return nil
		}, queue.WorkerConfig{Concurrency: c / loops, BatchSize: benchBatch(b), Loops: claimLoops, PollInterval: 50 * time.Millisecond, OnError: func(err error) { b.Error(err) }})
		if err != nil {
			b.Fatal(err)
		}
	}
	settle(b, pool)
	cpu := pgCPU(b, pool)
	b.ResetTimer()
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.Run(wctx); err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	report(b)
	cpu()
	cs.report(b)
	s.Close() // waits for the store's vacuum
	var vacuums int64
	if err := pool.QueryRow(ctx, `SELECT vacuum_count FROM pg_stat_user_tables WHERE relid = $1::regclass`,
		opts.Schema+".stagger_jobs").Scan(&vacuums); err == nil {
		b.ReportMetric(float64(vacuums), "vacuums")
	}
	if st, _ := q.Stats(ctx); st.Done != int64(n+history) {
		b.Fatalf("done %d of %d", st.Done, n+history)
	}
}

// addHistory adds n done jobs (STAGGER_BENCH_HISTORY) to the jobs table
// before a drain, finished an hour before it, as retention would keep
// them, and vacuums the table as the store's vacuums would have.
func addHistory(b *testing.B, pool *pgxpool.Pool, table string, n int) {
	b.Helper()
	if n <= 0 {
		return
	}
	ctx := context.Background()
	hour := time.Now().Add(-time.Hour).UnixMilli()
	if _, err := pool.Exec(ctx, `INSERT INTO `+table+` (id, payload, attempts, max_attempts, available_at, deadline,
			state, created_at, updated_at, finished_at)
		SELECT 'history-' || lpad(i::text, 10, '0'), '\x7b7d', 1, 3, $2::bigint, $2::bigint + 86400000, 'done', $2::bigint, $2::bigint, $2::bigint + i % 1000
		FROM generate_series(1, $1) i`, n, hour); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `VACUUM (ANALYZE) `+table); err != nil {
		b.Fatal(err)
	}
}

// benchBatch is STAGGER_BENCH_BATCH, the Worker's BatchSize (0, the
// default, when unset).
func benchBatch(b *testing.B) int { return benchInt(b, "STAGGER_BENCH_BATCH") }

// benchInt is the integer in the environment variable name, 0 when unset
// (STAGGER_BENCH_LOOPS: the Worker's Loops).
func benchInt(b *testing.B, name string) int {
	v := os.Getenv(name)
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		b.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}

func drainRiver(b *testing.B, pool *pgxpool.Pool, workers int) {
	ctx := context.Background()
	schema := pgSchema(b, pool)
	driver := riverpgxv5.New(pool)
	migrateRiver(b, driver, schema)
	cfg := riverConfig(schema, false)
	cfg.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}}
	cfg.FetchCooldown, cfg.FetchPollInterval = riverFetchCool, riverFetchPolling
	client, err := river.NewClient(driver, cfg)
	if err != nil {
		b.Fatal(err)
	}
	n := b.N
	insertNoopsRiver(b, client, n, drainInsertBatch)
	// A buffer for every event: River drops the events a full one cannot take.
	events, cancelEvents := client.SubscribeConfig(&river.SubscribeConfig{Kinds: []river.EventKind{river.EventKindJobCompleted}, ChanSize: n + 1})
	defer cancelEvents()
	settle(b, pool)
	cpu := pgCPU(b, pool)
	b.ResetTimer()
	if err := client.Start(ctx); err != nil {
		b.Fatal(err)
	}
	awaitRiver(b, events, n)
	b.StopTimer()
	report(b)
	cpu()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	client.Stop(sctx)
}

// warmPool opens every connection the pool may hold before the first
// drain, so that no drain's timed span pays for opening connections (the
// pool opens them lazily, and the first sub-benchmark of a run would pay
// for all of them while the later ones find them open).
func warmPool(b *testing.B, pool *pgxpool.Pool) {
	ctx := context.Background()
	conns := make([]*pgxpool.Conn, 0, pool.Config().MaxConns)
	for range pool.Config().MaxConns {
		c, err := pool.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Ping(ctx); err != nil {
			b.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
}

// pgCPU reads the CPU time (user + system, /proc/<pid>/stat) of the
// server's backends serving benchApp connections and returns a function
// that reports their increase per job as pg-cpu-µs/job, and the
// benchmark process's own CPU per job as go-cpu-µs/job (and checkpoints,
// see there). Backends that start meanwhile count from zero; the server's
// own processes (WAL writer, checkpointer) are not counted. A backend that
// exits meanwhile (the pool closes a connection whose query a canceled
// context ended, as a Worker's last claim at shutdown) counts too: its
// time reaches the postmaster's children's time (cutime, cstime) when it
// is reaped, so that increase, less what the exited backends had used
// before, is theirs (and that of any other child that exited meanwhile:
// on a server that serves only the benchmark, none but a short-lived
// helper). Without access to the server's /proc (a remote server)
// pg-cpu-µs/job is not reported.
func pgCPU(b *testing.B, pool *pgxpool.Pool) func() {
	read := func() map[int]int64 {
		rows, err := pool.Query(context.Background(), `SELECT pid FROM pg_stat_activity WHERE application_name = $1`, benchApp)
		if err != nil {
			b.Fatal(err)
		}
		defer rows.Close()
		out := map[int]int64{}
		for rows.Next() {
			var pid int
			if err := rows.Scan(&pid); err != nil {
				b.Fatal(err)
			}
			if st, ok := procStat(pid); ok {
				out[pid] = st.cpu
			}
		}
		return out
	}
	postmaster := -1
	before, self, cps := read(), selfCPU(), checkpoints(pool)
	for pid := range before {
		if st, ok := procStat(pid); ok {
			postmaster = st.ppid
			break
		}
	}
	children := func() int64 {
		if st, ok := procStat(postmaster); ok {
			return st.children
		}
		return -1
	}
	reaped := children()
	return func() {
		b.ReportMetric(float64(selfCPU()-self)/1e3/float64(b.N), "go-cpu-µs/job")
		if now := checkpoints(pool); cps >= 0 && now >= 0 {
			b.ReportMetric(float64(now-cps), "checkpoints")
		}
		if len(before) == 0 {
			return
		}
		var ticks int64
		after := read()
		for pid, t := range after {
			ticks += t - before[pid]
		}
		if now := children(); reaped >= 0 && now >= 0 {
			ticks += now - reaped
			for pid, t := range before {
				if _, ok := after[pid]; !ok {
					ticks -= t
				}
			}
		}
		const clkTck = 100 // USER_HZ on Linux
		b.ReportMetric(float64(ticks)*1e6/clkTck/float64(b.N), "pg-cpu-µs/job")
	}
}

// settle, with STAGGER_BENCH_SETTLE=1, runs a CHECKPOINT and a sync(2)
// before a drain's clock starts, so that neither a checkpoint nor the
// kernel's writeback of earlier runs' pages (dirty pages are written
// back about 30 s after they were dirtied, in whichever run is going on
// then) falls inside it: a checkpoint comes every max_wal_size of WAL or
// checkpoint_timeout, so a run of 100,000 jobs (77-130 MB of WAL, a few
// seconds) then has none inside. It removes luck from short runs and
// hides the cost of the WAL a run writes, which long runs (1,000,000
// jobs, 1-3 checkpoints inside) keep in view.
func settle(b *testing.B, pool *pgxpool.Pool) {
	b.Helper()
	if os.Getenv("STAGGER_BENCH_SETTLE") != "1" {
		return
	}
	if _, err := pool.Exec(context.Background(), `CHECKPOINT`); err != nil {
		b.Fatalf("STAGGER_BENCH_SETTLE: %v (CHECKPOINT needs a superuser or pg_checkpoint)", err)
	}
	syscall.Sync()
}

// checkpoints is how many checkpoints the server has started so far
// (timed and requested: pg_stat_bgwriter, pg_stat_checkpointer from
// PostgreSQL 17), -1 when it cannot say. The checkpoints metric is how many fell
// in a drain's timed span: a checkpoint comes every max_wal_size of WAL (1
// GB by default, a few drains), lands in whichever drain runs then, and
// makes it write every page it next touches to the WAL in full, so a round
// with one inside is slower for a reason of neither queue's making.
func checkpoints(pool *pgxpool.Pool) int64 {
	var n int64
	for _, q := range []string{
		`SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter`,
		`SELECT num_timed + num_requested FROM pg_stat_checkpointer`,
	} {
		if err := pool.QueryRow(context.Background(), q).Scan(&n); err == nil {
			return n
		}
	}
	return -1
}

// selfCPU is the CPU time (user + system) of the benchmark's own process
// so far, in nanoseconds: the client's side of a drain (go-cpu-µs/job),
// which shares the machine's cores with the server.
func selfCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// pidStat is what /proc/<pid>/stat says of a process's CPU, in clock ticks:
// its own (utime + stime), its reaped children's (cutime + cstime), and
// its parent.
type pidStat struct {
	cpu, children int64
	ppid          int
}

// procStat reads pid's pidStat.
func procStat(pid int) (pidStat, bool) {
	if pid <= 0 {
		return pidStat{}, false
	}
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return pidStat{}, false
	}
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 15 {
		return pidStat{}, false
	}
	var v [5]int64
	for i, k := range []int{1, 11, 12, 13, 14} { // ppid, utime, stime, cutime, cstime
		n, err := strconv.ParseInt(f[k], 10, 64)
		if err != nil {
			return pidStat{}, false
		}
		v[i] = n
	}
	return pidStat{cpu: v[1] + v[2], children: v[3] + v[4], ppid: int(v[0])}, true
}

// BenchmarkQueuePostgresPickup measures how long a job waits from its
// enqueue's commit (the producer's Enqueue returned) to its handler's
// start, one job at a time on an idle consumer with 4 workers. The
// producer is another client on its own pool, so the consumer learns of
// the job from the server (LISTEN/NOTIFY or polling), not from the
// producer's process. stagger: the Worker with its defaults (poll interval
// 1 s); River: its defaults (fetch cooldown 100 ms, poll interval 1 s).
// Reports p50-ms and p99-ms (ns/op includes the pause between jobs).
func BenchmarkQueuePostgresPickup(b *testing.B) {
	consumer, producer := benchPool(b), benchPool(b)
	b.Run("stagger", func(b *testing.B) {
		ctx := context.Background()
		schema := pgSchema(b, consumer)
		open := func(p *pgxpool.Pool) *queue.Queue {
			s, err := postgres.New(ctx, p, postgres.Options{Schema: schema})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(s.Close)
			q, err := queue.New(s, queue.Config{})
			if err != nil {
				b.Fatal(err)
			}
			return q
		}
		cq, pq := open(consumer), open(producer)
		started := make(chan time.Time, 1)
		defer runWorker(b, cq, func(context.Context, []byte) error { started <- time.Now(); return nil })()
		pickup(b, started, func(i int) error {
			_, _, err := pq.Enqueue(ctx, queue.NewJob{ID: fmt.Sprintf("p-%d-%d", b.N, i), Payload: []byte("{}")})
			return err
		})
	})
	b.Run("river", func(b *testing.B) {
		ctx := context.Background()
		schema := pgSchema(b, consumer)
		migrateRiver(b, riverpgxv5.New(consumer), schema)
		started := make(chan time.Time, 1)
		workers := river.NewWorkers()
		river.AddWorker(workers, river.WorkFunc(func(context.Context, *river.Job[noopArgs]) error { started <- time.Now(); return nil }))
		cfg := riverConfig(schema, false)
		cfg.Workers, cfg.FetchCooldown, cfg.FetchPollInterval = workers, 0, 0 // River's defaults
		client, err := river.NewClient(riverpgxv5.New(consumer), cfg)
		if err != nil {
			b.Fatal(err)
		}
		ins, err := river.NewClient(riverpgxv5.New(producer), &river.Config{Schema: schema, Logger: cfg.Logger})
		if err != nil {
			b.Fatal(err)
		}
		defer startRiver(b, client)()
		pickup(b, started, func(int) error { _, err := ins.Insert(ctx, noopArgs{}, nil); return err })
	})
}

// runWorker runs a Worker of benchWorkers handlers h on q until stop.
func runWorker(b *testing.B, q *queue.Queue, h retry.Handler) (stop func()) {
	w, err := queue.NewWorker(q, h, queue.WorkerConfig{Concurrency: benchWorkers, OnError: func(err error) { b.Error(err) }})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	return func() {
		cancel()
		if err := <-ran; err != nil {
			b.Error(err)
		}
	}
}

// startRiver starts client until stop, which gives it 10 s to stop.
func startRiver(b *testing.B, client *river.Client[pgx.Tx]) (stop func()) {
	if err := client.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		client.Stop(ctx)
	}
}

// pickup enqueues b.N jobs one at a time with enqueue, each after the
// previous one's handler started and a pause of 1–3 ms, and reports the
// percentiles of (handler start − enqueue return).
func pickup(b *testing.B, started <-chan time.Time, enqueue func(i int) error) {
	oneAtATime(b, "ms", enqueue, func(i int) time.Duration {
		committed := time.Now()
		d := within(b, started, i).Sub(committed)
		time.Sleep(time.Millisecond + time.Duration(i%3)*time.Millisecond)
		return d
	})
}

// oneAtATime enqueues b.N jobs one at a time with enqueue, each after the
// previous one's measure returned, and reports the percentiles of the
// measures in milliseconds: p50-unit, p99-unit, max-unit.
func oneAtATime(b *testing.B, unit string, enqueue func(i int) error, measure func(i int) time.Duration) {
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		if err := enqueue(i); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, measure(i))
	}
	b.StopTimer()
	slices.Sort(lat)
	at := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))]) / 1e6 }
	b.ReportMetric(at(0.50), "p50-"+unit)
	b.ReportMetric(at(0.99), "p99-"+unit)
	b.ReportMetric(at(1), "max-"+unit)
}

// within receives from c, failing b after 30 s without a value for job i.
func within[T any](b *testing.B, c <-chan T, i int) T {
	select {
	case v := <-c:
		return v
	case <-time.After(30 * time.Second):
		b.Fatalf("job %d: nothing after 30s", i)
		panic("unreachable")
	}
}

// BenchmarkQueuePostgresInsert enqueues b.N jobs in transactions of
// 1,000: stagger's Queue.EnqueueMany against River's InsertMany.
func BenchmarkQueuePostgresInsert(b *testing.B) {
	pool := benchPool(b)
	const batch = 1000
	b.Run("stagger", func(b *testing.B) {
		ctx := context.Background()
		s, err := postgres.New(ctx, pool, postgres.Options{Schema: pgSchema(b, pool)})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		q, err := queue.New(s, queue.Config{})
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		enqueueNoops(b, q, b.N, batch)
		b.StopTimer()
		report(b)
	})
	b.Run("river", func(b *testing.B) {
		schema := pgSchema(b, pool)
		driver := riverpgxv5.New(pool)
		migrateRiver(b, driver, schema)
		client, err := river.NewClient(driver, riverConfig(schema, false))
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		insertNoopsRiver(b, client, b.N, batch)
		b.StopTimer()
		report(b)
	})
}
