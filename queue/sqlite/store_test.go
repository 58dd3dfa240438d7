package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/queue/queuetest"
	"github.com/staggerhq/stagger/queue/sqlite"
)

func open(t *testing.T, opts sqlite.Options) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "q.db"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	queuetest.Run(t, func(t *testing.T) queue.Store { return open(t, sqlite.Options{Synchronous: "NORMAL"}) })
}

func TestConformanceFullSync(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	queuetest.Run(t, func(t *testing.T) queue.Store { return open(t, sqlite.Options{}) })
}

func TestInboxConformance(t *testing.T) {
	queuetest.RunInbox(t, func(t *testing.T) queue.Inbox { return open(t, sqlite.Options{Synchronous: "NORMAL"}).Inbox() })
}

func TestReopenKeepsJobs(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "q.db")
	s, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	clock := queuetest.NewClock(queuetest.Start)
	q, _ := queue.New(s, queue.Config{Now: clock.Now})
	if _, _, err := q.Enqueue(ctx, queue.NewJob{ID: "keep", Payload: []byte("x"), MaxAttempts: 4}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, queue.DefaultQueue, clock.Now(), clock.Now()+1000, 1); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s2, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	j, err := s2.Get(ctx, "keep")
	if err != nil || j.Attempts != 1 || j.State != queue.Leased || string(j.Payload) != "x" {
		t.Fatalf("after reopen: %+v %v", j, err)
	}
}

func TestOptionsValidation(t *testing.T) {
	dir := t.TempDir()
	for field, o := range map[string]sqlite.Options{
		"Synchronous": {Synchronous: "OFF"},
		"BusyTimeout": {BusyTimeout: -1},
		"Readers":     {Readers: 100},
		"InboxLease":  {InboxLease: 1},
	} {
		_, err := sqlite.Open(context.Background(), filepath.Join(dir, "x.db"), o)
		if !errors.Is(err, queue.ErrInvalid) || !strings.Contains(err.Error(), field) {
			t.Errorf("Open(%+v) = %v, want an error naming %s", o, err, field)
		}
	}
	if _, err := sqlite.Open(context.Background(), "a?b", sqlite.Options{}); !errors.Is(err, queue.ErrInvalid) {
		t.Errorf("path with '?' accepted: %v", err)
	}
	if _, err := sqlite.Open(context.Background(), ":memory:", sqlite.Options{}); !errors.Is(err, queue.ErrInvalid) || !strings.Contains(err.Error(), "MemoryStore") {
		t.Errorf("Open(:memory:) = %v, want an error pointing to queue.MemoryStore", err)
	}
}

// A limit below 1 takes nothing: SQLite would read a negative LIMIT as no
// limit and claim, bury or list every row.
func TestNonPositiveLimits(t *testing.T) {
	s := open(t, sqlite.Options{Synchronous: "NORMAL"})
	ctx := context.Background()
	const now = queuetest.Start
	var jobs []queue.Job
	for _, id := range []string{"a", "b", "c"} {
		jobs = append(jobs, queue.Job{ID: id, MaxAttempts: 3, AvailableAt: now, Deadline: now + 1000,
			State: queue.Pending, CreatedAt: now, UpdatedAt: now})
	}
	if _, err := s.Insert(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int{0, -1} {
		if got, err := s.Claim(ctx, queue.DefaultQueue, now, now+10, limit); err != nil || len(got) != 0 {
			t.Errorf("Claim(limit %d) = %d jobs, %v; want none", limit, len(got), err)
		}
		if n, err := s.Bury(ctx, now+5000, limit); err != nil || n != 0 {
			t.Errorf("Bury(limit %d) = %d, %v; want 0", limit, n, err)
		}
		if got, err := s.List(ctx, queue.DefaultQueue, queue.Pending, "", limit); err != nil || len(got) != 0 {
			t.Errorf("List(limit %d) = %d jobs, %v; want none", limit, len(got), err)
		}
	}
	if got, err := s.Claim(ctx, queue.DefaultQueue, now, now+10, 3); err != nil || len(got) != 3 || got[0].Attempts != 1 {
		t.Fatalf("claim after the refused ones: %d jobs, %v", len(got), err)
	}
}

func TestProcessTxExactlyOnce(t *testing.T) {
	s := open(t, sqlite.Options{Synchronous: "NORMAL"})
	ctx := context.Background()
	if _, err := s.DB().ExecContext(ctx, `CREATE TABLE effects (id TEXT, n INTEGER)`); err != nil {
		t.Fatal(err)
	}
	in := s.Inbox().(*sqlite.Inbox)
	var wg sync.WaitGroup
	for range 4 {
		for i := range 25 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := string(rune('a'+i%26)) + "-msg"
				_, err := in.ProcessTx(ctx, id, func(ctx context.Context, tx *sql.Tx) error {
					_, err := tx.ExecContext(ctx, `INSERT INTO effects VALUES (?, 1)`, id)
					return err
				})
				if err != nil {
					t.Error(err)
				}
			}()
		}
	}
	wg.Wait()
	// A failing effect rolls back with its mark.
	boom := errors.New("boom")
	if _, err := in.ProcessTx(ctx, "z-fail", func(ctx context.Context, tx *sql.Tx) error {
		tx.ExecContext(ctx, `INSERT INTO effects VALUES ('z-fail', 1)`)
		return boom
	}); !errors.Is(err, boom) {
		t.Fatal(err)
	}
	var rows, distinct int
	s.DB().QueryRowContext(ctx, `SELECT COUNT(*), COUNT(DISTINCT id) FROM effects`).Scan(&rows, &distinct)
	if rows != 25 || distinct != 25 {
		t.Fatalf("effects: %d rows over %d ids, want 25 each", rows, distinct)
	}
	if ok, _ := in.Processed(ctx, "z-fail"); ok {
		t.Fatal("failed effect marked processed")
	}
}

func TestReadOnlyCreatesNothing(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	missing := filepath.Join(dir, "typo.db")
	if _, err := sqlite.Open(ctx, missing, sqlite.Options{ReadOnly: true}); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("ReadOnly Open of a missing file = %v, want fs.ErrNotExist naming it", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("ReadOnly Open created %s: %v", missing, err)
	}
	// A file that is not a queue database is refused and left alone.
	other := filepath.Join(dir, "other.db")
	if err := os.WriteFile(other, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := sqlite.Open(ctx, other, sqlite.Options{ReadOnly: true}); err == nil || !strings.Contains(err.Error(), "not a queue database") {
		t.Fatalf("ReadOnly Open of an empty file = %v", err)
	}
	if fi, _ := os.Stat(other); fi.Size() != 0 {
		t.Fatalf("ReadOnly Open wrote %d bytes into a foreign file", fi.Size())
	}
	// On a queue database the reads work and the writes fail.
	path := filepath.Join(dir, "q.db")
	w, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	q, _ := queue.New(w, queue.Config{})
	if _, _, err := q.Enqueue(ctx, queue.NewJob{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	r, err := sqlite.Open(ctx, path, sqlite.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if st, err := r.Stats(ctx, queue.DefaultQueue, time.Now().UnixMilli()); err != nil || st.PendingDue != 1 {
		t.Fatalf("read-only Stats = %+v, %v", st, err)
	}
	if _, err := r.Insert(ctx, []queue.Job{{ID: "b", State: queue.Pending, MaxAttempts: 1, Deadline: queue.MaxTime}}); err == nil {
		t.Fatal("a read-only store inserted a job")
	}
}

// v1Schema is the schema of version 1 (before retention and named queues).
const v1Schema = `
CREATE TABLE stagger_jobs (
	id TEXT PRIMARY KEY, payload BLOB NOT NULL, attempts INTEGER NOT NULL, max_attempts INTEGER NOT NULL,
	available_at INTEGER NOT NULL, deadline INTEGER NOT NULL,
	state TEXT NOT NULL CHECK (state IN ('pending', 'leased', 'done', 'dead')),
	dead_reason TEXT NOT NULL DEFAULT '', last_error TEXT NOT NULL DEFAULT '', lease_until INTEGER NOT NULL DEFAULT 0,
	created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL, finished_at INTEGER NOT NULL DEFAULT 0);
CREATE INDEX stagger_jobs_due ON stagger_jobs (available_at, id) WHERE state IN ('pending', 'leased');
CREATE INDEX stagger_jobs_state ON stagger_jobs (state, dead_reason, id);
CREATE TABLE stagger_inbox (id TEXT PRIMARY KEY, state TEXT NOT NULL CHECK (state IN ('running', 'done')),
	token INTEGER NOT NULL, lease_until INTEGER NOT NULL, done_at INTEGER NOT NULL DEFAULT 0);
INSERT INTO stagger_jobs (id, payload, attempts, max_attempts, available_at, deadline, state, created_at, updated_at)
	VALUES ('old', x'', 0, 3, 1, 253402300799999, 'pending', 1, 1);
PRAGMA user_version = 1;`

// TestMigratesVersion1: a database of schema version 1 is migrated on
// Open: its jobs are in the default queue, claimable, and retention works.
func TestMigratesVersion1(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "q.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, v1Schema); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := sqlite.Open(ctx, path, sqlite.Options{ReadOnly: true}); err == nil || !strings.Contains(err.Error(), "predates") {
		t.Fatalf("read-only Open of a version-1 file = %v, want a message to migrate it", err)
	}
	s, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var v, idx int
	s.DB().QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v)
	s.DB().QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE name IN ('stagger_jobs_finished', 'stagger_jobs_ready', 'stagger_jobs_by_state', 'stagger_limits')`).Scan(&idx)
	if v != 6 || idx != 4 {
		t.Fatalf("after migration: user_version %d, %d of the 3 new indexes and the limits table", v, idx)
	}
	j, err := s.Get(ctx, "old")
	if err != nil || j.Queue != queue.DefaultQueue {
		t.Fatalf("old job after migration: %+v %v", j, err)
	}
	if got, err := s.Claim(ctx, queue.DefaultQueue, 2, 1000, 5); err != nil || len(got) != 1 || got[0].ID != "old" {
		t.Fatalf("claim after migration: %v %v", got, err)
	}
	if n, err := s.Purge(ctx, queue.Done, queue.MaxTime, 10); err != nil || n != 0 {
		t.Fatalf("Purge = %d, %v", n, err)
	}
	s.Close()
	if s, err = sqlite.Open(ctx, path, sqlite.Options{}); err != nil { // a second open migrates nothing
		t.Fatal(err)
	}
	s.Close()
}

// TestMigratesVersion4: a file of version 4 (no trace column) is read
// by a read-only open as it is, its jobs without a trace, and migrated by
// a writing open; its jobs keep running.
func TestMigratesVersion4(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "q.db")
	s, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	q, _ := queue.New(s, queue.Config{})
	if _, _, err := q.Enqueue(ctx, queue.NewJob{ID: "old"}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `ALTER TABLE stagger_jobs DROP COLUMN trace; PRAGMA user_version = 4`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	r, err := sqlite.Open(ctx, path, sqlite.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if j, err := r.Get(ctx, "old"); err != nil || j.Trace != "" {
		t.Fatalf("read-only Get of a version-4 file: %+v %v", j, err)
	}
	if js, err := r.List(ctx, queue.DefaultQueue, queue.Pending, "", 10); err != nil || len(js) != 1 {
		t.Fatalf("read-only List of a version-4 file: %v %v", js, err)
	}
	if _, err := r.Insert(ctx, []queue.Job{{ID: "b", State: queue.Pending, MaxAttempts: 1, Deadline: queue.MaxTime}}); err == nil {
		t.Fatal("a read-only store inserted a job")
	}
	if _, err := r.Claim(ctx, queue.DefaultQueue, 1, 2, 1); err == nil {
		t.Fatal("a read-only store claimed a job")
	}
	r.Close()
	s, err = sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var v int
	s.DB().QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v)
	if v != 6 {
		t.Fatalf("after migration: user_version %d", v)
	}
	if got, err := s.Claim(ctx, queue.DefaultQueue, time.Now().UnixMilli()+1000, time.Now().UnixMilli()+60000, 5); err != nil || len(got) != 1 || got[0].ID != "old" || got[0].Trace != "" {
		t.Fatalf("claim after migration: %v %v", got, err)
	}
}

// sqliteEnqueueTx is queuetest's EnqueueTx on a transaction of s.DB().
func sqliteEnqueueTx(s *sqlite.Store) queuetest.EnqueueTx {
	return func(ctx context.Context, q *queue.Queue, commit bool, jobs ...queue.NewJob) ([]queue.Inserted, error) {
		tx, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			return nil, err
		}
		res, err := s.EnqueueTx(ctx, tx, q, jobs...)
		if err != nil || !commit {
			return res, errors.Join(err, tx.Rollback())
		}
		return res, tx.Commit()
	}
}

func TestEnqueueTxConformance(t *testing.T) {
	queuetest.RunEnqueueTx(t, func(t *testing.T) (queue.Store, queuetest.EnqueueTx) {
		s := open(t, sqlite.Options{Synchronous: "NORMAL"})
		return s, sqliteEnqueueTx(s)
	})
}

// TestEnqueueTxWithBusinessRow: the application's row and its job commit
// or roll back together.
func TestEnqueueTxWithBusinessRow(t *testing.T) {
	ctx := context.Background()
	s := open(t, sqlite.Options{Synchronous: "NORMAL"})
	q, _ := queue.New(s, queue.Config{})
	if _, err := s.DB().ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	place := func(id string, commit bool) {
		tx, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO orders VALUES (?)`, id); err != nil {
			t.Fatal(err)
		}
		if _, err := s.EnqueueTx(ctx, tx, q, queue.NewJob{ID: "ship-" + id}); err != nil {
			t.Fatal(err)
		}
		if commit {
			err = tx.Commit()
		} else {
			err = tx.Rollback()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	place("1", false)
	place("2", true)
	for id, want := range map[string]bool{"1": false, "2": true} {
		var n int
		s.DB().QueryRowContext(ctx, `SELECT count(*) FROM orders WHERE id = ?`, id).Scan(&n)
		_, err := s.Get(ctx, "ship-"+id)
		if (n == 1) != want || (err == nil) != want {
			t.Fatalf("order %s: row %d, job err %v; want both present = %v", id, n, err, want)
		}
	}
}

// TestMigratesVersion5: a file of version 5 (before the operator's
// tables) is read by a read-only open, with no history and no pauses, and
// migrated by a writing open, after which a job is cancelled and its
// history kept.
func TestMigratesVersion5(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "q.db")
	s, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	q, _ := queue.New(s, queue.Config{})
	if _, _, err := q.Enqueue(ctx, queue.NewJob{ID: "old"}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `DROP TABLE stagger_job_events; DROP TABLE stagger_paused; PRAGMA user_version = 5`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	r, err := sqlite.Open(ctx, path, sqlite.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if h, err := r.History(ctx, "old"); err != nil || len(h) != 0 {
		t.Fatalf("read-only History of a version-5 file: %v %v", h, err)
	}
	if p, err := r.Pauses(ctx); err != nil || len(p) != 0 {
		t.Fatalf("read-only Pauses of a version-5 file: %v %v", p, err)
	}
	if js, err := r.Search(ctx, queue.Search{Queue: queue.DefaultQueue, States: queue.AllStates, Limit: 10}); err != nil || len(js) != 1 {
		t.Fatalf("read-only Search of a version-5 file: %v %v", js, err)
	}
	r.Close()
	if s, err = sqlite.Open(ctx, path, sqlite.Options{}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var v int
	s.DB().QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v)
	if v != 6 {
		t.Fatalf("after migration: user_version %d", v)
	}
	q, _ = queue.New(s, queue.Config{})
	if _, err := q.Cancel(ctx, "old", "ops"); err != nil {
		t.Fatal(err)
	}
	if h, err := q.History(ctx, "old"); err != nil || len(h) != 1 || h[0].Actor != "ops" {
		t.Fatalf("History after migration: %v %v", h, err)
	}
}

// TestPauseSeenByOtherProcesses: a pause written through one store is
// obeyed by the claims of another store on the same file, as by another
// process's workers.
func TestPauseSeenByOtherProcesses(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "q.db")
	a, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	qa, _ := queue.New(a, queue.Config{})
	if _, _, err := qa.Enqueue(ctx, queue.NewJob{ID: "j"}); err != nil {
		t.Fatal(err)
	}
	if _, err := qa.Pause(ctx, "", "ops"); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli() + 1000
	for range 2 { // the second claim takes the idle path
		if got, err := b.Claim(ctx, queue.DefaultQueue, now, now+1000, 5); err != nil || len(got) != 0 {
			t.Fatalf("claim through another store of a paused queue = %v, %v", got, err)
		}
	}
	if _, err := qa.Resume(ctx, "", "ops"); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Claim(ctx, queue.DefaultQueue, now, now+1000, 5); err != nil || len(got) != 1 {
		t.Fatalf("claim through another store after resume = %v, %v", got, err)
	}
}

// TestClaimChunks: claims of every size up to two chunks of 64 lease
// exactly the jobs they return, each once (the update runs in prepared
// chunks of 1, 2, 4 ... 64 jobs).
func TestClaimChunks(t *testing.T) {
	s := open(t, sqlite.Options{})
	ctx := context.Background()
	const now = int64(1_000_000)
	var jobs []queue.Job
	total := 0
	for n := 1; n <= 130; n++ {
		total += n
	}
	for i := range total {
		jobs = append(jobs, queue.Job{ID: fmt.Sprintf("j%06d", i), Payload: []byte("{}"), MaxAttempts: 3,
			AvailableAt: now, Deadline: now + 1e9, State: queue.Pending, CreatedAt: now, UpdatedAt: now})
	}
	if _, err := s.Insert(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for n := 1; n <= 130; n++ {
		got, err := s.Claim(ctx, queue.DefaultQueue, now, now+60_000, n)
		if err != nil || len(got) != n {
			t.Fatalf("claim of %d: %d jobs, %v", n, len(got), err)
		}
		for _, j := range got {
			if seen[j.ID] {
				t.Fatalf("claim of %d: %s claimed twice", n, j.ID)
			}
			seen[j.ID] = true
			if stored, err := s.Get(ctx, j.ID); err != nil || stored.State != queue.Leased || stored.Attempts != 1 || stored.LeaseUntil != now+60_000 {
				t.Fatalf("claim of %d: %s stored as %+v, %v", n, j.ID, stored, err)
			}
		}
	}
	if st, err := s.Stats(ctx, queue.DefaultQueue, now); err != nil || st.Leased != int64(total) || st.Pending() != 0 {
		t.Fatalf("after the claims: %+v, %v", st, err)
	}
}
