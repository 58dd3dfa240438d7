package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/queue/postgres"
	"github.com/staggerhq/stagger/queue/sqlite"
)

// The chaos test runs the real binary: several `stagger queue work`
// processes against one store while jobs flow, SIGKILLed at random moments
// and restarted. Afterwards no job may be lost, none completed twice, no
// attempt count decreased, no deadline moved, and the receiver's inbox must
// show each effect once. Triggers installed in the store by the test record
// every completion and every violation as it happens.
//
// The CI variant takes seconds (500 jobs, 50 kills). STAGGER_CHAOS_LONG=1
// runs 5000 jobs and 300 kills. The binary is built without the race
// detector (modernc's SQLite under -race is an order of magnitude slower);
// STAGGER_CHAOS_RACE=1 builds it with -race, and then a race report in a
// worker fails the test.
//
// It runs real processes, so it uses real time (kill intervals, leases); it
// asserts on outcomes only, never on how long anything took.

type chaosConfig struct {
	jobs, kills, workers int
}

func chaosSize() chaosConfig {
	if os.Getenv("STAGGER_CHAOS_LONG") == "1" {
		return chaosConfig{jobs: 5000, kills: 300, workers: 4}
	}
	return chaosConfig{jobs: 500, kills: 50, workers: 3}
}

// buildCLI builds the CLI into the test's temporary directory (the build
// cache makes the second build a link).
func buildCLI(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "stagger")
	args := []string{"build", "-o", bin}
	if raceEnabled && os.Getenv("STAGGER_CHAOS_RACE") == "1" {
		args = append(args, "-race")
	}
	if out, err := exec.Command("go", append(args, ".")...).CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// chaosBackend is a store under test, seen from the test process.
type chaosBackend struct {
	db         string // --db for the binary
	store      queue.Store
	violations func() ([]string, error)
	doneCounts func() (map[string]int, error)
	effect     func(ctx context.Context, id string) (dup bool, err error)
	effects    func() (map[string]int, error)
}

func TestQueueChaosSQLite(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos test: not in -short")
	}
	dir := t.TempDir()
	db := filepath.Join(dir, "chaos.db")
	ctx := context.Background()
	s, err := sqlite.Open(ctx, db, sqlite.Options{Synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, q := range []string{
		`CREATE TABLE audit_done (id TEXT, attempts INTEGER)`,
		`CREATE TABLE audit_violation (id TEXT, what TEXT)`,
		`CREATE TRIGGER audit_done AFTER UPDATE ON stagger_jobs WHEN NEW.state = 'done' AND OLD.state <> 'done'
			BEGIN INSERT INTO audit_done VALUES (NEW.id, NEW.attempts); END`,
		`CREATE TRIGGER audit_attempts AFTER UPDATE ON stagger_jobs WHEN NEW.attempts < OLD.attempts
			BEGIN INSERT INTO audit_violation VALUES (NEW.id, 'attempts decreased'); END`,
		`CREATE TRIGGER audit_deadline AFTER UPDATE ON stagger_jobs WHEN NEW.deadline <> OLD.deadline
			BEGIN INSERT INTO audit_violation VALUES (NEW.id, 'deadline moved'); END`,
		`CREATE TRIGGER audit_done_changed AFTER UPDATE ON stagger_jobs WHEN OLD.state = 'done'
			BEGIN INSERT INTO audit_violation VALUES (NEW.id, 'done job changed'); END`,
		`CREATE TRIGGER audit_delete AFTER DELETE ON stagger_jobs
			BEGIN INSERT INTO audit_violation VALUES (OLD.id, 'deleted'); END`,
	} {
		if _, err := s.DB().ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	// The receiver's inbox lives in its own database.
	rs, err := sqlite.Open(ctx, filepath.Join(dir, "receiver.db"), sqlite.Options{Synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	if _, err := rs.DB().ExecContext(ctx, `CREATE TABLE effects (id TEXT)`); err != nil {
		t.Fatal(err)
	}
	inbox := rs.Inbox().(*sqlite.Inbox)
	runChaos(t, chaosBackend{
		db: db, store: s,
		violations: func() ([]string, error) { return sqlStrings(s.DB(), `SELECT id || ': ' || what FROM audit_violation`) },
		doneCounts: func() (map[string]int, error) {
			return sqlCounts(s.DB(), `SELECT id, COUNT(*) FROM audit_done GROUP BY id`)
		},
		effect: func(ctx context.Context, id string) (bool, error) {
			return inbox.ProcessTx(ctx, id, func(ctx context.Context, tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, `INSERT INTO effects VALUES (?)`, id)
				return err
			})
		},
		effects: func() (map[string]int, error) {
			return sqlCounts(rs.DB(), `SELECT id, COUNT(*) FROM effects GROUP BY id`)
		},
	})
}

func TestQueueChaosPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos test: not in -short")
	}
	ctx := context.Background()
	pool, url := testPool(t)
	defer pool.Close()
	b := make([]byte, 6)
	rand.Read(b)
	schema := "stagger_chaos_" + hex.EncodeToString(b)
	if _, err := pool.Exec(ctx, `CREATE SCHEMA `+schema); err != nil {
		t.Fatal(err)
	}
	defer pool.Exec(context.Background(), `DROP SCHEMA `+schema+` CASCADE`)
	s, err := postgres.New(ctx, pool, postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, q := range []string{
		`CREATE TABLE ` + schema + `.audit_done (id text, attempts int)`,
		`CREATE TABLE ` + schema + `.audit_violation (id text, what text)`,
		`CREATE TABLE ` + schema + `.effects (id text)`,
		`CREATE FUNCTION ` + schema + `.audit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF TG_OP = 'DELETE' THEN
				INSERT INTO ` + schema + `.audit_violation VALUES (OLD.id, 'deleted');
				RETURN OLD;
			END IF;
			IF NEW.attempts < OLD.attempts THEN INSERT INTO ` + schema + `.audit_violation VALUES (NEW.id, 'attempts decreased'); END IF;
			IF NEW.deadline <> OLD.deadline THEN INSERT INTO ` + schema + `.audit_violation VALUES (NEW.id, 'deadline moved'); END IF;
			IF OLD.state = 'done' THEN INSERT INTO ` + schema + `.audit_violation VALUES (NEW.id, 'done job changed'); END IF;
			IF NEW.state = 'done' AND OLD.state <> 'done' THEN INSERT INTO ` + schema + `.audit_done VALUES (NEW.id, NEW.attempts); END IF;
			RETURN NEW;
		END $$`,
		`CREATE TRIGGER audit AFTER UPDATE OR DELETE ON ` + schema + `.stagger_jobs FOR EACH ROW EXECUTE FUNCTION ` + schema + `.audit()`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	inbox := s.Inbox().(*postgres.Inbox)
	runChaos(t, chaosBackend{
		db: url + sep + "search_path=" + schema, store: s,
		violations: func() ([]string, error) {
			return pgStrings(pool, `SELECT id || ': ' || what FROM `+schema+`.audit_violation`)
		},
		doneCounts: func() (map[string]int, error) {
			return pgCounts(pool, `SELECT id, count(*) FROM `+schema+`.audit_done GROUP BY id`)
		},
		effect: func(ctx context.Context, id string) (bool, error) {
			return inbox.ProcessTx(ctx, id, func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `INSERT INTO `+schema+`.effects VALUES ($1)`, id)
				return err
			})
		},
		effects: func() (map[string]int, error) {
			return pgCounts(pool, `SELECT id, count(*) FROM `+schema+`.effects GROUP BY id`)
		},
	})
}

// worker is one `stagger queue work` process slot.
type worker struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
}

// syncBuffer is a bytes.Buffer safe for a writing process and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// childEnv is the environment of the binary's processes: a race-enabled
// build must not sleep a second at exit, and must fail on a race.
func childEnv() []string {
	return append(os.Environ(), "GORACE=atexit_sleep_ms=0 halt_on_error=1")
}

func runChaos(t *testing.T, b chaosBackend) {
	cfg := chaosSize()
	bin := buildCLI(t)
	ctx := context.Background()

	// The receiver: 8% of deliveries fail with 503 before any effect; the
	// others apply the effect through the inbox.
	var mu sync.Mutex
	deliveries := map[string]int{}
	dups := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("Idempotency-Key")
		mu.Lock()
		deliveries[id]++
		mu.Unlock()
		if mrand.IntN(100) < 8 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		time.Sleep(time.Duration(mrand.IntN(3000)) * time.Microsecond) // work
		dup, err := b.effect(r.Context(), id)
		if err != nil {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		if dup {
			mu.Lock()
			dups++
			mu.Unlock()
		}
	}))
	defer srv.Close()

	start := func(slot int) worker {
		batch := "1"
		if slot == 0 {
			batch = "4" // one process claims in batches
		}
		stderr := &syncBuffer{}
		c := exec.Command(bin, "queue", "work", "--db", b.db, "--http", srv.URL, "--sqlite-sync", "NORMAL",
			"--concurrency", "3", "--batch", batch, "--lease", "1s", "--timeout", "900ms", "--poll", "50ms",
			"--sweep", "300ms", "--base", "10ms", "--cap", "100ms", "--grace", "2s")
		c.Stderr = stderr
		c.Env = childEnv()
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		return worker{cmd: c, stderr: stderr}
	}
	enqueue := func(from, n int) {
		var in strings.Builder
		for i := from; i < from+n; i++ {
			fmt.Fprintf(&in, `{"id":"job-%05d","payload":"%d","max_attempts":1000,"deadline":"1h"}`+"\n", i, i)
		}
		c := exec.Command(bin, "queue", "enqueue", "--db", b.db)
		c.Stdin = strings.NewReader(in.String())
		c.Env = childEnv()
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("enqueue: %v\n%s", err, out)
		}
	}

	began := time.Now()
	chunk := (cfg.jobs + cfg.kills - 1) / cfg.kills
	enqueued := 0
	workers := make([]worker, cfg.workers)
	for i := range workers {
		workers[i] = start(i)
	}
	var killLog []string
	kills := 0
	for kills < cfg.kills || enqueued < cfg.jobs {
		if enqueued < cfg.jobs {
			n := min(chunk, cfg.jobs-enqueued)
			enqueue(enqueued, n)
			enqueued += n
		}
		time.Sleep(time.Duration(10+mrand.IntN(50)) * time.Millisecond)
		i := mrand.IntN(len(workers))
		workers[i].cmd.Process.Signal(syscall.SIGKILL)
		workers[i].cmd.Wait()
		kills++
		stderr := workers[i].stderr.String()
		if strings.Contains(stderr, "DATA RACE") {
			t.Fatalf("data race in a worker:\n%s", stderr)
		}
		for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
			if strings.Contains(line, "level=ERROR") || strings.Contains(line, "level=WARN") {
				killLog = append(killLog, line)
			}
		}
		workers[i] = start(i)
	}
	killPhase := time.Since(began)
	// Let the survivors drain the queue (killed leases expire after 1s).
	drainBy := time.Now().Add(2 * time.Minute)
	var st queue.Stats
	for {
		var err error
		if st, err = b.store.Stats(ctx, queue.DefaultQueue, time.Now().UnixMilli()); err != nil {
			t.Fatal(err)
		}
		if st.Done+st.Dead() == int64(cfg.jobs) {
			break
		}
		if os.Getenv("STAGGER_CHAOS_DEBUG") == "1" {
			t.Logf("drain %v: %+v", time.Since(began).Round(time.Millisecond), st)
		}
		if time.Now().After(drainBy) {
			t.Fatalf("queue did not drain: %+v", st)
		}
		time.Sleep(50 * time.Millisecond)
	}
	elapsed := time.Since(began)
	for _, w := range workers {
		// A process SIGTERMed before it installed its handler would die
		// of the signal: wait for its start-up line first.
		for deadline := time.Now().Add(30 * time.Second); !strings.Contains(w.stderr.String(), "working on") && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		w.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, w := range workers {
		done := make(chan error, 1)
		go func() { done <- w.cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("worker exited with %v after SIGTERM: %s", err, w.stderr)
			}
		case <-time.After(10 * time.Second):
			w.cmd.Process.Kill()
			t.Errorf("worker ignored SIGTERM for 10s")
		}
	}

	// No job lost: every ID is there, done (max_attempts 1000, deadline 1h).
	if st.Done != int64(cfg.jobs) || st.Dead() != 0 || st.Pending() != 0 || st.Leased != 0 {
		t.Errorf("final stats %+v, want %d done", st, cfg.jobs)
	}
	maxAttempts, retried := 0, 0
	for i := range cfg.jobs {
		id := fmt.Sprintf("job-%05d", i)
		j, err := b.store.Get(ctx, id)
		if err != nil {
			t.Fatalf("%s lost: %v", id, err)
		}
		if j.State != queue.Done || j.Attempts < 1 {
			t.Errorf("%s: %+v", id, j)
		}
		maxAttempts = max(maxAttempts, j.Attempts)
		if j.Attempts > 1 {
			retried++
		}
	}
	// None completed twice, attempts never decreased, no deadline moved.
	v, err := b.violations()
	if err != nil {
		t.Fatal(err)
	}
	if len(v) > 0 {
		t.Errorf("%d violations, e.g. %v", len(v), v[:min(len(v), 10)])
	}
	done, err := b.doneCounts()
	eachOnce(t, "jobs done in the store", done, err, cfg.jobs)
	// The inbox shows each effect once.
	effects, err := b.effects()
	eachOnce(t, "effects applied", effects, err, cfg.jobs)
	mu.Lock()
	total := 0
	for _, n := range deliveries {
		total += n
	}
	mu.Unlock()
	sort.Strings(killLog)
	t.Logf("chaos: %d jobs, %d workers, %d SIGKILLs in %v, drained after %v; %d deliveries (%d duplicates suppressed by the inbox); %d jobs needed more than one attempt, max attempts %d",
		cfg.jobs, cfg.workers, kills, killPhase.Round(time.Millisecond), elapsed.Round(time.Millisecond), total, dups, retried, maxAttempts)
	if len(killLog) > 0 {
		t.Logf("%d error and warning lines from killed workers, e.g. %q", len(killLog), killLog[0])
	}
}

// eachOnce checks that counts (what, per job ID) holds every one of the
// jobs exactly once.
func eachOnce(t *testing.T, what string, counts map[string]int, err error, jobs int) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if len(counts) != jobs {
		t.Errorf("%s: %d jobs, want %d", what, len(counts), jobs)
	}
	for id, n := range counts {
		if n != 1 {
			t.Errorf("%s: %s %d times", what, id, n)
		}
	}
}

func sqlStrings(db *sql.DB, q string) ([]string, error) {
	rows, err := db.Query(q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

func sqlCounts(db *sql.DB, q string) (map[string]int, error) {
	rows, err := db.Query(q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			return nil, err
		}
		out[id] = n
	}
	return out, rows.Err()
}

func pgStrings(p *pgxpool.Pool, q string) ([]string, error) {
	rows, err := p.Query(context.Background(), q)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

func pgCounts(p *pgxpool.Pool, q string) (map[string]int, error) {
	rows, err := p.Query(context.Background(), q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int64
		if err := rows.Scan(&id, &n); err != nil {
			return nil, err
		}
		out[id] = int(n)
	}
	return out, rows.Err()
}
