// Package sqlite is the embedded default store of stagger's durable retry
// queue: one SQLite file (modernc.org/sqlite, pure Go, no cgo) in WAL mode,
// every write an immediate transaction on a single writer connection, with
// a busy timeout so that several processes can share the file.
//
// Durability: with Synchronous "FULL" (the default) every commit is fsynced
// before it returns, so a claim or an outcome survives a power loss; with
// "NORMAL" a commit survives the process being killed (SIGKILL) but the last
// commits before a power loss may be lost.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"math/bits"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/staggerhq/stagger/internal/queuesql"
	"github.com/staggerhq/stagger/queue"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver
)

// Options configure a Store; zero fields take their defaults.
type Options struct {
	// Synchronous is "FULL" (default: fsync at every commit) or "NORMAL"
	// (WAL without an fsync per commit: safe against a killed process, not
	// against power loss).
	Synchronous string
	// BusyTimeout is how long a write waits for another process's write
	// lock (1ms to 1h). Default 5s.
	BusyTimeout time.Duration
	// Readers is the size of the read-only connection pool used by Get,
	// List and Stats (1 to 64). Default 4.
	Readers int
	// InboxLease is how long an Inbox delivery holds its ID before another
	// delivery may take it over (10ms to 24h). Default 5m.
	InboxLease time.Duration
	// Now is the inbox's clock in Unix ms; nil means the system clock.
	Now func() int64
	// ReadOnly opens an existing queue database without writing to it:
	// no file is created, no schema migrated, every connection is
	// read-only. Open fails, wrapping fs.ErrNotExist, when the file does
	// not exist, and when it holds no queue schema. Only the reads (Get,
	// List, Stats, CountFinished) work on such a store.
	ReadOnly bool
}

// Store is a queue.Store (and a queue.InboxStore) on one SQLite file.
type Store struct {
	w, r  *sql.DB // one writer connection; a pool of readers
	opts  Options
	inbox *Inbox
	// Statements prepared once on the writer connection.
	insert, claimSel, record, extend *sql.Stmt
	// claimUpds[k] leases 1<<k jobs by ID (claimChunks).
	claimUpds [claimChunks]*sql.Stmt
	// readCols are the columns Get and List read: cols, or colsNoTrace.
	readCols string
	// noOps: a read-only store on a file older than version 6, without
	// the operator's tables (no history, no pauses).
	noOps bool
	// idle is set when a claim found nothing: the next claim first looks
	// with a reader, so idle pollers (of many processes) do not take the
	// write lock.
	idle atomic.Bool
}

var _ queue.Store = (*Store)(nil)
var _ queue.InboxStore = (*Store)(nil)
var _ queue.RecordClaimer = (*Store)(nil)
var _ queue.Purger = (*Store)(nil)
var _ queue.LimitedClaimer = (*Store)(nil)

const schemaVersion = 6

// readableVersion is the oldest schema a read-only open reads (version 4
// only adds the limits table, which reads do not use; version 5 the trace
// column, which reads of an older file take as empty; version 6 the
// operator's tables, read as empty when missing).
const readableVersion = 3

const schema = `
CREATE TABLE IF NOT EXISTS stagger_jobs (
	id           TEXT PRIMARY KEY,
	payload      BLOB NOT NULL,
	attempts     INTEGER NOT NULL,
	max_attempts INTEGER NOT NULL,
	available_at INTEGER NOT NULL,
	deadline     INTEGER NOT NULL,
	state        TEXT NOT NULL CHECK (state IN ('pending', 'leased', 'done', 'dead')),
	dead_reason  TEXT NOT NULL DEFAULT '',
	last_error   TEXT NOT NULL DEFAULT '',
	lease_until  INTEGER NOT NULL DEFAULT 0,
	created_at   INTEGER NOT NULL,
	updated_at   INTEGER NOT NULL,
	finished_at  INTEGER NOT NULL DEFAULT 0,
	queue        TEXT NOT NULL DEFAULT 'default',
	trace        TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS stagger_jobs_ready ON stagger_jobs (queue, available_at, id) WHERE state IN ('pending', 'leased');
CREATE INDEX IF NOT EXISTS stagger_jobs_by_state ON stagger_jobs (queue, state, id);
CREATE INDEX IF NOT EXISTS stagger_jobs_finished ON stagger_jobs (state, finished_at) WHERE state IN ('done', 'dead');
CREATE TABLE IF NOT EXISTS stagger_inbox (
	id          TEXT PRIMARY KEY,
	state       TEXT NOT NULL CHECK (state IN ('running', 'done')),
	token       INTEGER NOT NULL,
	lease_until INTEGER NOT NULL,
	done_at     INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS stagger_limits (
	queue  TEXT PRIMARY KEY,
	tokens REAL NOT NULL,
	at     INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS stagger_job_events (
	seq    INTEGER PRIMARY KEY AUTOINCREMENT,
	job_id TEXT NOT NULL,
	at     INTEGER NOT NULL,
	actor  TEXT NOT NULL,
	action TEXT NOT NULL,
	detail TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS stagger_job_events_job ON stagger_job_events (job_id, seq);
CREATE TABLE IF NOT EXISTS stagger_paused (
	queue TEXT PRIMARY KEY,
	at    INTEGER NOT NULL,
	actor TEXT NOT NULL
);
PRAGMA user_version = 6;
`

// Open opens (creating if needed) the SQLite database at path and migrates
// its schema.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	switch {
	case path == "" || strings.ContainsAny(path, "?#"):
		return nil, fmt.Errorf("%w: sqlite path must be a non-empty file name without '?' or '#', got %q", queue.ErrInvalid, path)
	case path == ":memory:":
		// Every connection would open its own empty database: the readers
		// would not see the writer's tables.
		return nil, fmt.Errorf("%w: sqlite path must be a file, not %q (use queue.MemoryStore for a queue in memory)", queue.ErrInvalid, path)
	}
	if opts.ReadOnly {
		if _, err := os.Stat(path); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("sqlite: %s does not exist (nothing was created): %w", path, fs.ErrNotExist)
			}
			return nil, fmt.Errorf("sqlite: %w", err)
		}
	}
	dsn := func(txlock string) string {
		v := url.Values{}
		v.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", opts.BusyTimeout.Milliseconds()))
		if opts.ReadOnly {
			v.Set("mode", "ro")
		} else {
			v.Add("_pragma", "journal_mode(WAL)")
			v.Add("_pragma", "synchronous("+opts.Synchronous+")")
		}
		v.Set("_txlock", txlock)
		return "file:" + path + "?" + v.Encode()
	}
	w, err := sql.Open("sqlite", dsn("immediate"))
	if err != nil {
		return nil, err
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	s := &Store{w: w, opts: opts}
	if err := s.migrate(ctx); err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: opening %s: %w", path, err)
	}
	if err := s.prepare(ctx); err != nil {
		s.closeStmts()
		w.Close()
		return nil, fmt.Errorf("sqlite: opening %s: %w", path, err)
	}
	r, err := sql.Open("sqlite", dsn("deferred"))
	if err != nil {
		s.closeStmts()
		w.Close()
		return nil, err
	}
	r.SetMaxOpenConns(opts.Readers)
	r.SetMaxIdleConns(opts.Readers)
	s.r = r
	s.inbox = &Inbox{s: s}
	return s, nil
}

func (o *Options) fill() error {
	if o.Synchronous == "" {
		o.Synchronous = "FULL"
	}
	o.Synchronous = strings.ToUpper(o.Synchronous)
	if o.BusyTimeout == 0 {
		o.BusyTimeout = 5 * time.Second
	}
	if o.Readers == 0 {
		o.Readers = 4
	}
	if o.InboxLease == 0 {
		o.InboxLease = 5 * time.Minute
	}
	if o.Now == nil {
		o.Now = func() int64 { return time.Now().UnixMilli() }
	}
	switch {
	case o.Synchronous != "FULL" && o.Synchronous != "NORMAL":
		return fmt.Errorf("%w: Synchronous must be FULL or NORMAL, got %q", queue.ErrInvalid, o.Synchronous)
	case o.BusyTimeout < time.Millisecond || o.BusyTimeout > time.Hour:
		return fmt.Errorf("%w: BusyTimeout must be in [1ms, 1h], got %v", queue.ErrInvalid, o.BusyTimeout)
	case o.Readers < 1 || o.Readers > 64:
		return fmt.Errorf("%w: Readers must be in [1, 64], got %d", queue.ErrInvalid, o.Readers)
	case o.InboxLease < 10*time.Millisecond || o.InboxLease > 24*time.Hour:
		return fmt.Errorf("%w: InboxLease must be in [10ms, 24h], got %v", queue.ErrInvalid, o.InboxLease)
	}
	return nil
}

func (s *Store) migrate(ctx context.Context) error {
	var v int
	if err := s.w.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return err
	}
	if v > schemaVersion {
		return fmt.Errorf("schema version %d is newer than this build's %d", v, schemaVersion)
	}
	s.readCols = cols
	if s.opts.ReadOnly {
		if v < 5 {
			s.readCols = colsNoTrace
		}
		s.noOps = v < 6
		switch {
		case v == 0:
			return errors.New("not a queue database: it holds no queue schema (read-only: nothing was created)")
		case v < readableVersion:
			return fmt.Errorf("schema version %d predates this build's %d: open it once with a writing command (enqueue, work) to migrate it (read-only: nothing was changed)", v, schemaVersion)
		}
		return nil
	}
	if v == schemaVersion {
		return nil
	}
	return s.tx(ctx, func(tx *sql.Tx) error {
		if v > 0 && v < 3 {
			// Version 3 adds named queues: a queue column (existing jobs
			// are in the default queue) and the indexes that lead with it.
			if err := addColumn(ctx, tx, "queue", `TEXT NOT NULL DEFAULT 'default'`); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `DROP INDEX IF EXISTS stagger_jobs_due; DROP INDEX IF EXISTS stagger_jobs_state`); err != nil {
				return err
			}
		}
		if v > 0 && v < 5 {
			// Version 5 adds the enqueuer's trace context (Job.Trace):
			// existing jobs have none.
			if err := addColumn(ctx, tx, "trace", `TEXT NOT NULL DEFAULT ''`); err != nil {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, schema)
		return err
	})
}

// addColumn adds the column name of type def to stagger_jobs unless it is
// there.
func addColumn(ctx context.Context, tx *sql.Tx, name, def string) error {
	var has int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('stagger_jobs') WHERE name = ?`, name).Scan(&has); err != nil || has > 0 {
		return err
	}
	_, err := tx.ExecContext(ctx, `ALTER TABLE stagger_jobs ADD COLUMN `+name+` `+def)
	return err
}

// Close closes the database.
func (s *Store) Close() error {
	s.closeStmts()
	return errors.Join(s.r.Close(), s.w.Close())
}

const (
	insertSQL   = `INSERT INTO stagger_jobs (` + cols + `) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT (id) DO NOTHING`
	claimSelSQL = `SELECT ` + cols + ` FROM stagger_jobs INDEXED BY stagger_jobs_ready
		WHERE queue = ?3 AND state IN ('pending', 'leased') AND available_at <= ?1 AND attempts < max_attempts AND deadline > ?1
		AND NOT EXISTS (SELECT 1 FROM stagger_paused WHERE queue = ?3)
		ORDER BY available_at, id LIMIT ?2`
	claimUpd  = `UPDATE stagger_jobs SET state = 'leased', attempts = attempts + 1, lease_until = ?2, available_at = ?2, updated_at = ?1 WHERE id `
	extendSQL = `UPDATE stagger_jobs SET lease_until = ?3, available_at = ?3, updated_at = ?4 WHERE id = ?1 AND state = 'leased' AND attempts = ?2 AND lease_until > ?4`
)

// prepare prepares the hot statements once (SQLite parsing is a large part
// of a small transaction's cost). A read-only store prepares none: they
// all write (or feed a write), and every write transaction refuses it (tx);
// on a file older than version 5 some would not even parse.
func (s *Store) prepare(ctx context.Context) error {
	if s.opts.ReadOnly {
		return nil
	}
	for _, p := range []struct {
		dst **sql.Stmt
		q   string
	}{
		{&s.insert, insertSQL}, {&s.claimSel, claimSelSQL}, {&s.claimUpds[0], claimUpd + `= ?3`},
		{&s.record, recordSQL}, {&s.extend, extendSQL},
	} {
		st, err := s.w.PrepareContext(ctx, p.q)
		if err != nil {
			return err
		}
		*p.dst = st
	}
	for k := 1; k < claimChunks; k++ {
		st, err := s.w.PrepareContext(ctx, claimUpd+`IN (?3`+strings.Repeat(",?", 1<<k-1)+`)`)
		if err != nil {
			return err
		}
		s.claimUpds[k] = st
	}
	return nil
}

// claimChunks is how many claim updates are prepared: of 1, 2, 4, … 64
// jobs. A claim of n jobs runs those of n's binary digits (64 jobs at a
// time beyond 127) rather than an UPDATE … IN of n placeholders prepared
// for that n: preparing it was 31% of the instructions of a 4-job turn
// (callgrind, BenchmarkRecordAndClaim), more than retention's
// finished-jobs index costs a turn (8%).
const claimChunks = 7

func (s *Store) closeStmts() {
	sts := append([]*sql.Stmt{s.insert, s.claimSel, s.record, s.extend}, s.claimUpds[:]...)
	for _, st := range sts {
		if st != nil {
			st.Close()
		}
	}
}

// DB returns the writer connection pool (one connection; transactions are
// BEGIN IMMEDIATE): for an application's own tables next to the queue's.
func (s *Store) DB() *sql.DB { return s.w }

// Inbox returns the store's durable inbox.
func (s *Store) Inbox() queue.Inbox { return s.inbox }

var errReadOnly = errors.New("sqlite: the store was opened read-only (Options.ReadOnly)")

// tx runs fn in an immediate write transaction.
func (s *Store) tx(ctx context.Context, fn func(*sql.Tx) error) error {
	if s.opts.ReadOnly {
		return errReadOnly
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

const cols = `id, payload, attempts, max_attempts, available_at, deadline, state, dead_reason, last_error, lease_until, created_at, updated_at, finished_at, queue, trace`

// colsNoTrace is cols for a read-only open of a file older than version 5.
var colsNoTrace = strings.Replace(cols, ", trace", ", ''", 1)

type scanner interface{ Scan(...any) error }

func scan(r scanner) (queue.Job, error) {
	var j queue.Job
	var state, reason string
	err := r.Scan(&j.ID, &j.Payload, &j.Attempts, &j.MaxAttempts, &j.AvailableAt, &j.Deadline,
		&state, &reason, &j.LastError, &j.LeaseUntil, &j.CreatedAt, &j.UpdatedAt, &j.FinishedAt, &j.Queue, &j.Trace)
	j.State, j.DeadReason = queue.State(state), queue.DeadReason(reason)
	if j.Payload == nil {
		j.Payload = []byte{}
	}
	return j, err
}

// Insert implements queue.Store.
func (s *Store) Insert(ctx context.Context, jobs []queue.Job) ([]queue.Inserted, error) {
	var out []queue.Inserted
	err := s.tx(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = insertTx(ctx, tx, tx.StmtContext(ctx, s.insert).ExecContext, jobs)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// EnqueueTx enqueues jobs (validated by q, as Queue.EnqueueMany does)
// inside the caller's transaction tx, so that they commit or roll back
// with the caller's own writes: the outbox pattern. tx must be a write
// transaction on this database, best one of DB() (BEGIN IMMEDIATE, the
// store's one writer connection). The results are those of Insert; the
// jobs are claimable once tx commits. Workers find them at their next
// poll, or at once when the caller calls q.Wake after the commit. Nothing
// is written when a job is invalid, and the caller should roll back.
func (s *Store) EnqueueTx(ctx context.Context, tx *sql.Tx, q *queue.Queue, jobs ...queue.NewJob) ([]queue.Inserted, error) {
	rows, err := q.NewRowsContext(ctx, jobs)
	if err != nil {
		return nil, err
	}
	exec := func(ctx context.Context, args ...any) (sql.Result, error) {
		return tx.ExecContext(ctx, insertSQL, args...)
	}
	return insertTx(ctx, tx, exec, rows)
}

// insertTx inserts jobs in tx with exec (insertSQL, prepared or not).
func insertTx(ctx context.Context, tx *sql.Tx, exec func(context.Context, ...any) (sql.Result, error), jobs []queue.Job) ([]queue.Inserted, error) {
	out := make([]queue.Inserted, len(jobs))
	for i, j := range jobs {
		p := j.Payload
		if p == nil {
			p = []byte{}
		}
		if j.Queue == "" {
			j.Queue = queue.DefaultQueue
		}
		res, err := exec(ctx, j.ID, p, j.Attempts, j.MaxAttempts, j.AvailableAt, j.Deadline,
			string(j.State), string(j.DeadReason), j.LastError, j.LeaseUntil, j.CreatedAt, j.UpdatedAt, j.FinishedAt, j.Queue, j.Trace)
		if err != nil {
			return nil, err
		}
		if n, _ := res.RowsAffected(); n == 1 {
			j.Payload = p
			out[i] = queue.Inserted{Job: j, Created: true}
			continue
		}
		cur, err := scan(tx.QueryRowContext(ctx, `SELECT `+cols+` FROM stagger_jobs WHERE id = ?`, j.ID))
		if err != nil {
			return nil, err
		}
		out[i] = queue.Inserted{Job: cur}
	}
	return out, nil
}

// Claim implements queue.Store.
func (s *Store) Claim(ctx context.Context, name string, now, leaseUntil int64, limit int) ([]queue.Job, error) {
	if s.idle.Load() {
		var one int
		err := s.r.QueryRowContext(ctx, `SELECT 1 FROM stagger_jobs INDEXED BY stagger_jobs_ready
			WHERE queue = ?2 AND state IN ('pending', 'leased') AND available_at <= ?1 AND attempts < max_attempts AND deadline > ?1
			AND NOT EXISTS (SELECT 1 FROM stagger_paused WHERE queue = ?2) LIMIT 1`, now, name).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
	}
	var out []queue.Job
	err := s.tx(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = s.claimTx(ctx, tx, name, now, leaseUntil, limit)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ClaimLimited implements queue.LimitedClaimer: in the claim's write
// transaction (which every process of the database takes in turn) it
// counts the queue's live leases and reads its claim-rate bucket, claims
// what lim allows, and writes the bucket back.
func (s *Store) ClaimLimited(ctx context.Context, name string, lim queue.Limits, now, leaseUntil int64, limit int) ([]queue.Job, error) {
	var out []queue.Job
	err := s.tx(ctx, func(tx *sql.Tx) error {
		var inFlight int
		if lim.MaxInFlight > 0 {
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM stagger_jobs INDEXED BY stagger_jobs_by_state
				WHERE queue = ?1 AND state = 'leased' AND lease_until > ?2`, name, now).Scan(&inFlight); err != nil {
				return err
			}
		}
		b := lim.FullBucket(now)
		if lim.Rate > 0 {
			err := tx.QueryRowContext(ctx, `SELECT tokens, at FROM stagger_limits WHERE queue = ?1`, name).Scan(&b.Tokens, &b.At)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return err
			}
		}
		var err error
		if out, err = s.claimTx(ctx, tx, name, now, leaseUntil, lim.Allow(inFlight, b, now, limit)); err != nil {
			return err
		}
		if lim.Rate > 0 {
			b = lim.Spend(b, now, len(out))
			_, err = tx.ExecContext(ctx, `INSERT INTO stagger_limits (queue, tokens, at) VALUES (?1, ?2, ?3)
				ON CONFLICT (queue) DO UPDATE SET tokens = excluded.tokens, at = excluded.at`, name, b.Tokens, b.At)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// RecordAndClaim implements queue.RecordClaimer: Record and Claim in one
// transaction.
func (s *Store) RecordAndClaim(ctx context.Context, outcomes []queue.Outcome, name string, now, leaseUntil int64, limit int) ([]queue.Job, error) {
	var out []queue.Job
	err := s.tx(ctx, func(tx *sql.Tx) error {
		if err := s.recordTx(ctx, tx, outcomes); err != nil {
			return err
		}
		var err error
		out, err = s.claimTx(ctx, tx, name, now, leaseUntil, limit)
		return err
	})
	if err != nil {
		notApplied(outcomes) // rolled back
		return nil, err
	}
	return out, nil
}

func (s *Store) claimTx(ctx context.Context, tx *sql.Tx, name string, now, leaseUntil int64, limit int) ([]queue.Job, error) {
	if limit < 1 {
		return nil, nil // SQLite reads a negative LIMIT as no limit at all
	}
	rows, err := tx.StmtContext(ctx, s.claimSel).QueryContext(ctx, now, limit, name)
	if err != nil {
		return nil, err
	}
	var out []queue.Job
	for rows.Next() {
		j, err := scan(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, j)
	}
	// Close does not report an error that ended the iteration: Err does.
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, err
	}
	s.idle.Store(len(out) == 0)
	if len(out) == 0 {
		return nil, nil
	}
	args := make([]any, 0, 2+1<<(claimChunks-1))
	for i := 0; i < len(out); {
		k := min(bits.Len(uint(len(out)-i))-1, claimChunks-1)
		args = append(args[:0], now, leaseUntil)
		for _, j := range out[i : i+1<<k] {
			args = append(args, j.ID)
		}
		if _, err := tx.StmtContext(ctx, s.claimUpds[k]).ExecContext(ctx, args...); err != nil {
			return nil, err
		}
		i += 1 << k
	}
	for i := range out {
		j := &out[i]
		j.State, j.Attempts, j.LeaseUntil, j.AvailableAt, j.UpdatedAt = queue.Leased, j.Attempts+1, leaseUntil, leaseUntil, now
	}
	return out, nil
}

const recordSQL = `UPDATE stagger_jobs SET
	state = ?3,
	available_at = CASE WHEN ?3 = 'pending' THEN ?4 ELSE available_at END,
	dead_reason = ?5,
	last_error = CASE WHEN ?3 = 'done' THEN last_error ELSE ?6 END,
	lease_until = CASE WHEN ?3 = 'leased' THEN lease_until ELSE 0 END,
	finished_at = CASE WHEN ?3 IN ('done', 'dead') THEN ?7 ELSE finished_at END,
	updated_at = ?7
	WHERE id = ?1 AND state = 'leased' AND attempts = ?2`

// Record implements queue.Store.
func (s *Store) Record(ctx context.Context, outcomes []queue.Outcome) error {
	err := s.tx(ctx, func(tx *sql.Tx) error { return s.recordTx(ctx, tx, outcomes) })
	if err != nil {
		notApplied(outcomes) // rolled back
	}
	return err
}

func notApplied(outcomes []queue.Outcome) {
	for i := range outcomes {
		outcomes[i].Applied = false
	}
}

func (s *Store) recordTx(ctx context.Context, tx *sql.Tx, outcomes []queue.Outcome) error {
	st := tx.StmtContext(ctx, s.record)
	for i := range outcomes {
		o := &outcomes[i]
		res, err := st.ExecContext(ctx, o.ID, o.Attempt, string(o.State), o.AvailableAt, string(o.DeadReason), o.LastError, o.Now)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		o.Applied = n == 1
	}
	return nil
}

// Extend implements queue.Store.
func (s *Store) Extend(ctx context.Context, leases []queue.Lease, now, leaseUntil int64) error {
	err := s.tx(ctx, func(tx *sql.Tx) error {
		st := tx.StmtContext(ctx, s.extend)
		for i := range leases {
			res, err := st.ExecContext(ctx, leases[i].ID, leases[i].Attempt, leaseUntil, now)
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			leases[i].Held = n == 1
		}
		return nil
	})
	if err != nil {
		for i := range leases {
			leases[i].Held = false // rolled back
		}
	}
	return err
}

// Bury implements queue.Store.
func (s *Store) Bury(ctx context.Context, now int64, limit int) (int, error) {
	if limit < 1 {
		return 0, nil
	}
	var n int64
	err := s.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE stagger_jobs SET state = 'dead',
			dead_reason = CASE WHEN attempts >= max_attempts THEN 'exhausted' ELSE 'deadline' END,
			last_error = CASE WHEN attempts >= max_attempts AND last_error = '' THEN ?3 ELSE last_error END,
			lease_until = 0, finished_at = ?1, updated_at = ?1
			WHERE id IN (SELECT id FROM stagger_jobs
				WHERE (state = 'pending' OR (state = 'leased' AND available_at <= ?1))
				AND (attempts >= max_attempts OR deadline <= ?1) LIMIT ?2)`, now, limit, queue.UnknownOutcome)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}

// Purge implements queue.Purger: the jobs and their history.
func (s *Store) Purge(ctx context.Context, state queue.State, before int64, limit int) (int, error) {
	if limit < 1 {
		return 0, nil
	}
	var n int64
	err := s.tx(ctx, func(tx *sql.Tx) error {
		// The same selection twice in one write transaction: the same rows.
		sel := `SELECT id FROM stagger_jobs INDEXED BY stagger_jobs_finished
			WHERE state = ?1 AND state IN ('done', 'dead') AND finished_at < ?2 ORDER BY finished_at LIMIT ?3`
		if _, err := tx.ExecContext(ctx, `DELETE FROM stagger_job_events WHERE job_id IN (`+sel+`)`, string(state), before, limit); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM stagger_jobs WHERE id IN (`+sel+`)`, string(state), before, limit)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}

// CountFinished implements queue.Purger.
func (s *Store) CountFinished(ctx context.Context, state queue.State, before int64) (int64, error) {
	var n int64
	err := s.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM stagger_jobs INDEXED BY stagger_jobs_finished
		WHERE state = ?1 AND state IN ('done', 'dead') AND finished_at < ?2`, string(state), before).Scan(&n)
	return n, err
}

// Get implements queue.Store.
func (s *Store) Get(ctx context.Context, id string) (queue.Job, error) {
	j, err := scan(s.r.QueryRowContext(ctx, `SELECT `+s.readCols+` FROM stagger_jobs WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return queue.Job{}, queue.ErrNotFound
	}
	return j, err
}

// List implements queue.Store.
func (s *Store) List(ctx context.Context, name string, state queue.State, after string, limit int) ([]queue.Job, error) {
	if limit < 1 {
		return nil, nil
	}
	return s.query(ctx, `SELECT `+s.readCols+` FROM stagger_jobs WHERE queue = ? AND state = ? AND id > ? ORDER BY id LIMIT ?`,
		name, string(state), after, limit)
}

// query reads the jobs a query of the readers returns.
func (s *Store) query(ctx context.Context, text string, args ...any) ([]queue.Job, error) {
	rows, err := s.r.QueryContext(ctx, text, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []queue.Job
	for rows.Next() {
		j, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, rows.Err()
}

// Requeue implements queue.Store.
func (s *Store) Requeue(ctx context.Context, id string, grant int, deadline, now int64) (queue.Job, error) {
	var j queue.Job
	err := s.tx(ctx, func(tx *sql.Tx) error {
		var err error
		j, err = requeueTx(ctx, tx, id, grant, deadline, now)
		return err
	})
	return j, err
}

func requeueTx(ctx context.Context, tx *sql.Tx, id string, grant int, deadline, now int64) (queue.Job, error) {
	var state string
	err := tx.QueryRowContext(ctx, `SELECT state FROM stagger_jobs WHERE id = ?`, id).Scan(&state)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return queue.Job{}, queue.ErrNotFound
	case err != nil:
		return queue.Job{}, err
	case state != string(queue.Dead):
		return queue.Job{}, queue.ErrNotDead
	}
	if _, err := tx.ExecContext(ctx, `UPDATE stagger_jobs SET state = 'pending', max_attempts = attempts + ?2,
		deadline = ?3, available_at = ?4, updated_at = ?4, dead_reason = '', finished_at = 0, lease_until = 0
		WHERE id = ?1`, id, grant, deadline, now); err != nil {
		return queue.Job{}, err
	}
	return scan(tx.QueryRowContext(ctx, `SELECT `+cols+` FROM stagger_jobs WHERE id = ?`, id))
}

// Stats implements queue.Store.
func (s *Store) Stats(ctx context.Context, name string, now int64) (queue.Stats, error) {
	all, err := s.countStats(ctx, now, name)
	return queuesql.QueueStats(all, name, now), err
}

// StatsByQueue implements queue.StatsByQueuer: one GROUP BY over every
// queue.
func (s *Store) StatsByQueue(ctx context.Context, now int64) (map[string]queue.Stats, error) {
	return s.countStats(ctx, now, "")
}

// countStats counts the jobs of the named queue ("": of every queue).
func (s *Store) countStats(ctx context.Context, now int64, name string) (map[string]queue.Stats, error) {
	args := []any{now}
	if name != "" {
		args = append(args, name)
	}
	rows, err := s.r.QueryContext(ctx, queuesql.StatsSQL("stagger_jobs", "?", name != ""), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return queuesql.ScanStats(rows, now)
}
