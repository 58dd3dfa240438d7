// Package postgres is the PostgreSQL store of stagger's durable retry queue
// (pgx v5): claims with FOR UPDATE SKIP LOCKED, so any number of workers on
// any number of hosts can share one table; LISTEN/NOTIFY wake-ups; a schema
// migration run on Open. Every transition is one committed statement or
// transaction; PostgreSQL's own durability settings (synchronous_commit,
// fsync) decide what survives a crash of the server.
//
// The Worker's turn — record the finished jobs' outcomes, claim new ones —
// is one transaction sent as one pipelined round trip (RecordAndClaim).
// The hot statements are written so that their plans do not depend on
// table statistics, which are missing or stale on a queue table exactly
// when a backlog builds up: a claim walks the due index in order and stops
// after its limit, outcome and heartbeat updates look jobs up by primary
// key.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/internal/queuesql"
	"github.com/staggerhq/stagger/internal/redact"
	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/retry"
)

// Options configure a Store; zero fields take their defaults.
type Options struct {
	// Schema holds the queue's tables; "" means the connection's
	// search_path (usually public). It is created if missing. Lower-case
	// letters, digits and underscores, at most 40 bytes.
	Schema string
	// InboxLease is how long an Inbox delivery holds its ID before another
	// delivery may take it over (10ms to 24h). Default 5m.
	InboxLease time.Duration
	// Now is the inbox's clock in Unix ms; nil means the system clock.
	Now func() int64
	// ReadOnly opens an existing queue without writing: no schema or table
	// is created or migrated. New fails when the queue's table does not
	// exist. Only the reads (Get, List, Stats, CountFinished) are meant
	// for such a store.
	ReadOnly bool
	// VacuumAfter is how many jobs claimed through the store start a
	// VACUUM of the jobs table in the background (see vacuumer): every
	// claim and every outcome leaves dead entries at the head of the due
	// index, which each later claim walks until a vacuum removes them.
	// Default DefaultVacuumAfter; NoVacuum leaves it to autovacuum.
	VacuumAfter int
	// StartWait is how long Open and New keep trying to reach a server
	// that is down or not ready (connection refused or reset, a timeout,
	// SQLSTATE class 08, 53300 too many connections, 57P01-57P03 shutting
	// down or starting up) before they fail: a worker started during an
	// outage waits for the server as a running worker rides it out. Waits
	// grow exponentially from 100ms to 5s, jittered (retry.Do); a canceled
	// ctx ends them at once. Other errors (a login refused, a bad schema)
	// fail at once. 0, the default: the first failure is returned. At most
	// MaxStartWait.
	StartWait time.Duration
	// OnStartRetry, when set, is called before each wait of StartWait with
	// the failure (it never holds the connection string's password) and
	// the wait, for a log line.
	OnStartRetry func(err error, wait time.Duration)
}

// MaxStartWait bounds Options.StartWait.
const MaxStartWait = 24 * time.Hour

// Defaults and bounds of Options.VacuumAfter.
const (
	DefaultVacuumAfter = 20_000
	NoVacuum           = -1
	// vacuumDuty bounds the share of time the store's vacuum runs: a
	// vacuum starts only when the previous one ended at least
	// vacuumDuty-1 times its own duration ago.
	vacuumDuty = 5
)

var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,39}$`)

func (o *Options) fill() error {
	if o.InboxLease == 0 {
		o.InboxLease = 5 * time.Minute
	}
	if o.Now == nil {
		o.Now = func() int64 { return time.Now().UnixMilli() }
	}
	switch {
	case o.Schema != "" && !schemaName.MatchString(o.Schema):
		return fmt.Errorf("%w: Schema must match %s, got %q", queue.ErrInvalid, schemaName, o.Schema)
	case o.InboxLease < 10*time.Millisecond || o.InboxLease > 24*time.Hour:
		return fmt.Errorf("%w: InboxLease must be in [10ms, 24h], got %v", queue.ErrInvalid, o.InboxLease)
	case o.StartWait < 0 || o.StartWait > MaxStartWait:
		return fmt.Errorf("%w: StartWait must be in [0, %v] (0: no wait), got %v", queue.ErrInvalid, MaxStartWait, o.StartWait)
	case o.VacuumAfter < NoVacuum:
		return fmt.Errorf("%w: VacuumAfter must be a count of jobs >= 1 (0 means %d, NoVacuum turns it off), got %d", queue.ErrInvalid, DefaultVacuumAfter, o.VacuumAfter)
	}
	if o.VacuumAfter == 0 {
		o.VacuumAfter = DefaultVacuumAfter
	}
	return nil
}

// Store is a queue.Store (and a queue.InboxStore, and a queue.Notifier) on
// PostgreSQL.
type Store struct {
	pool    *pgxpool.Pool
	ownPool bool
	opts    Options
	jobs    string // qualified table names
	inboxT  string
	limitsT string
	eventsT string // the jobs' history (admin.go)
	pausedT string // the paused queues (admin.go)
	channel string // LISTEN/NOTIFY channel
	inbox   *Inbox
	// readCols are the columns Get and List read: cols, or colsNoTrace.
	readCols string
	// noOps: a read-only store on a table older than the operator's
	// tables (no history, no pauses).
	noOps bool

	lmu     sync.Mutex
	subs    map[chan struct{}]struct{}
	lcancel context.CancelFunc
	ldone   chan struct{}

	vac vacuumer
	// lastClaims holds, for each queue name, how many jobs its last claim
	// brought (an *atomic.Int32; see scanClaimed); lastClaimsN counts its
	// entries, at most lastClaimsMax (the package's, when New ran).
	lastClaims    sync.Map
	lastClaimsN   atomic.Int32
	lastClaimsMax int32
}

// lastClaimsMax bounds the queue names whose last claim's size a Store
// keeps: a process that claims from ever new names (a queue per tenant,
// per day) keeps the first lastClaimsMax, and the claims of the others are
// sized as they come.
var lastClaimsMax int32 = 4096

var (
	_ queue.Store          = (*Store)(nil)
	_ queue.InboxStore     = (*Store)(nil)
	_ queue.Notifier       = (*Store)(nil)
	_ queue.RecordClaimer  = (*Store)(nil)
	_ queue.Purger         = (*Store)(nil)
	_ queue.LimitedClaimer = (*Store)(nil)
)

// Open connects to dsn (a postgres:// URL or key=value string), migrates the
// schema and returns the store; Close closes the pool. Errors never contain
// the DSN's password.
func Open(ctx context.Context, dsn string, opts Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("%w: postgres: cannot parse the connection string (its text is not repeated here: it may hold a password)", queue.ErrInvalid)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", redact.Error(err, dsn))
	}
	s, err := New(ctx, pool, opts)
	if err != nil {
		pool.Close()
		return nil, redact.Error(err, dsn)
	}
	s.ownPool = true
	return s, nil
}

// New returns a store on an existing pool (which the caller closes) and
// migrates the schema.
func New(ctx context.Context, pool *pgxpool.Pool, opts Options) (*Store, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	prefix, channel := "", "stagger_jobs"
	if opts.Schema != "" {
		prefix, channel = `"`+opts.Schema+`".`, "stagger_jobs_"+opts.Schema
	}
	s := &Store{
		pool: pool, opts: opts, jobs: prefix + "stagger_jobs", inboxT: prefix + "stagger_inbox", limitsT: prefix + "stagger_limits",
		eventsT: prefix + "stagger_job_events", pausedT: prefix + "stagger_paused",
		channel: channel, subs: map[chan struct{}]struct{}{}, readCols: cols, lastClaimsMax: lastClaimsMax,
	}
	s.inbox = &Inbox{s: s}
	s.vac.init()
	if err := s.start(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// start checks (read-only) or migrates the schema, waiting up to
// StartWait for a server that is down or not ready.
func (s *Store) start(ctx context.Context) error {
	if s.opts.StartWait == 0 {
		return s.open(ctx)
	}
	p := &retry.Policy{
		MaxAttempts: math.MaxInt32,
		Timeout:     s.opts.StartWait,
		Schedule:    backoff.Exponential{Base: 100 * time.Millisecond, Cap: 5 * time.Second},
	}
	if f := s.opts.OnStartRetry; f != nil {
		p.Hooks.OnRetry = func(e retry.Event) { f(e.Err, e.Delay) }
	}
	err := retry.Do(ctx, p, func(ctx context.Context) error {
		err := s.open(ctx)
		if err == nil || !serverDown(err) {
			return retry.Permanent(err)
		}
		return retry.Retryable(err)
	})
	var re *retry.Error
	if errors.As(err, &re) && re.Err != nil && re.Reason == retry.PermanentError {
		return re.Err // not a wait: the error as without StartWait
	}
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("postgres: the server was not ready within StartWait (%v): %w", s.opts.StartWait, err)
	}
	return err
}

// serverDown reports whether err says the server is down or not ready,
// which waiting may cure.
func serverDown(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		c := pe.Code
		return strings.HasPrefix(c, "08") || c == "53300" || c == "57P01" || c == "57P02" || c == "57P03"
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) || pgconn.Timeout(err) || pgconn.SafeToRetry(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET)
}

// open checks (read-only) or migrates the schema.
func (s *Store) open(ctx context.Context) error {
	pool, opts := s.pool, s.opts
	if opts.ReadOnly {
		var found bool
		if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, s.jobs).Scan(&found); err != nil {
			return fmt.Errorf("postgres: %w", err)
		}
		if !found {
			return fmt.Errorf("postgres: no queue table %s (read-only: nothing was created)", s.jobs)
		}
		if found, err := hasColumn(ctx, pool, s.jobs, "queue"); err != nil {
			return fmt.Errorf("postgres: %w", err)
		} else if !found {
			return fmt.Errorf("postgres: the queue table %s predates named queues: open it once with a writing command (enqueue, work) to migrate it (read-only: nothing was changed)", s.jobs)
		}
		if err := s.checkOps(ctx); err != nil {
			return fmt.Errorf("postgres: %w", err)
		}
		if found, err := hasColumn(ctx, pool, s.jobs, "trace"); err != nil {
			return fmt.Errorf("postgres: %w", err)
		} else if !found {
			s.readCols = colsNoTrace // a table of before the trace column: read it as empty
		}
		return nil
	}
	if err := s.migrate(ctx); err != nil {
		return fmt.Errorf("postgres: migrating: %w", err)
	}
	return nil
}

func (s *Store) migrate(ctx context.Context) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// Serialize concurrent migrations (many workers starting at once).
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(7400117)`); err != nil {
			return err
		}
		var stmts []string
		if s.opts.Schema != "" {
			stmts = append(stmts, `CREATE SCHEMA IF NOT EXISTS "`+s.opts.Schema+`"`)
		}
		// The text keys are in byte order (COLLATE "C"), whatever the
		// database's collation: every claim and outcome writes an entry in
		// each index, and a B-tree insert compares keys all the way down,
		// with strcoll under a language's collation (a claim plus its
		// completion cost 1-6 % less server time a job, C.UTF-8 against
		// "C"). Equality, and so uniqueness, is the same in both. A table
		// made before keeps its collation and works as it did.
		stmts = append(stmts,
			`CREATE TABLE IF NOT EXISTS `+s.jobs+` (
				id           text COLLATE "C" PRIMARY KEY,
				payload      bytea NOT NULL,
				attempts     integer NOT NULL,
				max_attempts integer NOT NULL,
				available_at bigint NOT NULL,
				deadline     bigint NOT NULL,
				state        text COLLATE "C" NOT NULL CHECK (state IN ('pending', 'leased', 'done', 'dead')),
				dead_reason  text NOT NULL DEFAULT '',
				last_error   text NOT NULL DEFAULT '',
				lease_until  bigint NOT NULL DEFAULT 0,
				created_at   bigint NOT NULL,
				updated_at   bigint NOT NULL,
				finished_at  bigint NOT NULL DEFAULT 0,
				queue        text COLLATE "C" NOT NULL DEFAULT 'default',
				trace        text NOT NULL DEFAULT '')`,
		)
		for _, q := range stmts {
			if _, err := tx.Exec(ctx, q); err != nil {
				return err
			}
		}
		stmts = nil
		// Named queues came later: a table made before them gets the queue
		// column (its jobs are in the default queue) and the indexes that
		// lead with it. Checked first, so that a worker's start does not
		// take the table's exclusive lock when there is nothing to do.
		for _, c := range [...]struct{ name, def string }{
			{"queue", `text NOT NULL DEFAULT 'default'`},
			// The enqueuer's trace context (Job.Trace) came later still:
			// older jobs have none.
			{"trace", `text NOT NULL DEFAULT ''`},
		} {
			has, err := hasColumn(ctx, tx, s.jobs, c.name)
			if err != nil {
				return err
			}
			if !has {
				stmts = append(stmts, `ALTER TABLE `+s.jobs+` ADD COLUMN IF NOT EXISTS `+c.name+` `+c.def)
			}
		}
		stmts = append(stmts,
			`CREATE INDEX IF NOT EXISTS stagger_jobs_pending ON `+s.jobs+` (queue, available_at, id) WHERE state = 'pending'`,
			`CREATE INDEX IF NOT EXISTS stagger_jobs_leased ON `+s.jobs+` (queue, available_at, id) WHERE state = 'leased'`,
			`DROP INDEX IF EXISTS `+s.prefix()+`stagger_jobs_ready`,
			`DROP INDEX IF EXISTS `+s.prefix()+`stagger_jobs_due`,
			`DROP INDEX IF EXISTS `+s.prefix()+`stagger_jobs_state`,
			`CREATE INDEX IF NOT EXISTS stagger_jobs_finished ON `+s.jobs+` (state, finished_at) WHERE state IN ('done', 'dead')`,
			`CREATE TABLE IF NOT EXISTS `+s.inboxT+` (
				id          text PRIMARY KEY,
				state       text NOT NULL CHECK (state IN ('running', 'done')),
				token       bigint NOT NULL,
				lease_until bigint NOT NULL,
				done_at     bigint NOT NULL DEFAULT 0)`,
			`CREATE TABLE IF NOT EXISTS `+s.limitsT+` (
				queue  text PRIMARY KEY,
				tokens double precision NOT NULL,
				at     bigint NOT NULL)`,
		)
		stmts = append(stmts, s.opsSchema()...)
		for _, q := range stmts {
			if _, err := tx.Exec(ctx, q); err != nil {
				return err
			}
		}
		// Statistics of the (empty) new table, so the planner estimates
		// sizes from the table's pages rather than from defaults. The hot
		// statements do not depend on them (see claimPlan, leaseHeld).
		var tuples float64
		if err := tx.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE oid = $1::regclass`, s.jobs).Scan(&tuples); err != nil {
			return err
		}
		if tuples < 0 {
			if _, err := tx.Exec(ctx, `ANALYZE `+s.jobs); err != nil {
				return err
			}
		}
		return nil
	})
}

// inFlightSQL counts the live leases of queue $1 at now $2 (fleet limits:
// Limits.MaxInFlight): a range of stagger_jobs_leased, since a leased job's
// available_at is its lease_until (a claim and an extension set both).
func (s *Store) inFlightSQL() string {
	return `SELECT count(*) FROM ` + s.jobs + ` WHERE queue = $1 AND state = 'leased' AND available_at > $2 AND lease_until > $2`
}

// hasColumn reports whether the table has the column.
func hasColumn(ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, table, column string) (bool, error) {
	var has bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_attribute
		WHERE attrelid = $1::regclass AND attname = $2 AND NOT attisdropped)`, table, column).Scan(&has)
	return has, err
}

// Close stops the notification listener and, for a store made by Open,
// closes the pool.
func (s *Store) Close() {
	s.vac.stop()
	s.lmu.Lock()
	if s.lcancel != nil {
		s.lcancel()
	}
	done := s.ldone
	s.lmu.Unlock()
	if done != nil {
		<-done
	}
	if s.ownPool {
		s.pool.Close()
	}
}

// Pool returns the connection pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Inbox returns the store's durable inbox.
func (s *Store) Inbox() queue.Inbox { return s.inbox }

const cols = `id, payload, attempts, max_attempts, available_at, deadline, state, dead_reason, last_error, lease_until, created_at, updated_at, finished_at, queue, trace`

// colsNoTrace is cols for a read-only store on a table older than the
// trace column.
var colsNoTrace = strings.Replace(cols, ", trace", ", ''::text", 1)

func scanJob(row pgx.Row, extra ...any) (queue.Job, error) {
	var j queue.Job
	var state, reason string
	dst := []any{&j.ID, &j.Payload, &j.Attempts, &j.MaxAttempts, &j.AvailableAt, &j.Deadline,
		&state, &reason, &j.LastError, &j.LeaseUntil, &j.CreatedAt, &j.UpdatedAt, &j.FinishedAt, &j.Queue, &j.Trace}
	err := row.Scan(append(dst, extra...)...)
	j.State, j.DeadReason = queue.State(state), queue.DeadReason(reason)
	if j.Payload == nil {
		j.Payload = []byte{}
	}
	return j, err
}

// Insert implements queue.Store.
func (s *Store) Insert(ctx context.Context, jobs []queue.Job) ([]queue.Inserted, error) {
	var out []queue.Inserted
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		out, err = s.insertTx(ctx, tx, jobs)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// insertTx is Insert in tx.
func (s *Store) insertTx(ctx context.Context, tx pgx.Tx, jobs []queue.Job) ([]queue.Inserted, error) {
	n := len(jobs)
	var (
		ids                                         = make([]string, n)
		payloads                                    = make([][]byte, n)
		maxA                                        = make([]int32, n)
		avail, dl, created, updated, finished, leas = make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		attempts                                    = make([]int32, n)
		states, reasons, lastErr, queues, traces    = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	)
	for i, j := range jobs {
		ids[i], payloads[i], attempts[i], maxA[i] = j.ID, j.Payload, int32(j.Attempts), int32(j.MaxAttempts)
		if payloads[i] == nil {
			payloads[i] = []byte{}
		}
		avail[i], dl[i], states[i], reasons[i], lastErr[i] = j.AvailableAt, j.Deadline, string(j.State), string(j.DeadReason), j.LastError
		leas[i], created[i], updated[i], finished[i] = j.LeaseUntil, j.CreatedAt, j.UpdatedAt, j.FinishedAt
		traces[i] = j.Trace
		if queues[i] = j.Queue; j.Queue == "" {
			queues[i] = queue.DefaultQueue
		}
	}
	out := make([]queue.Inserted, n)
	err := func() error {
		rows, err := tx.Query(ctx, `INSERT INTO `+s.jobs+` (`+cols+`)
			SELECT * FROM unnest($1::text[], $2::bytea[], $3::int[], $4::int[], $5::bigint[], $6::bigint[], $7::text[],
				$8::text[], $9::text[], $10::bigint[], $11::bigint[], $12::bigint[], $13::bigint[], $14::text[], $15::text[])
			ON CONFLICT (id) DO NOTHING RETURNING id`,
			textArray(ids), byteaArray(payloads), attempts, maxA, int8Array(avail), int8Array(dl), textArray(states), textArray(reasons),
			textArray(lastErr), int8Array(leas), int8Array(created), int8Array(updated), int8Array(finished), textArray(queues), textArray(traces))
		if err != nil {
			return err
		}
		made, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		isNew := make(map[string]bool, len(made))
		for _, id := range made {
			isNew[id] = true
		}
		var missing []string
		dueNow := false // a created job is due at once: the listeners are told
		for i, j := range jobs {
			if isNew[j.ID] {
				isNew[j.ID] = false // a later duplicate in the input is not created
				j.Payload = payloads[i]
				out[i] = queue.Inserted{Job: j, Created: true}
				dueNow = dueNow || j.AvailableAt <= j.CreatedAt
			} else {
				missing = append(missing, j.ID)
			}
		}
		if len(missing) > 0 {
			rows, err := tx.Query(ctx, `SELECT `+cols+` FROM `+s.jobs+` WHERE id = ANY($1)`, missing)
			if err != nil {
				return err
			}
			cur := map[string]queue.Job{}
			for rows.Next() {
				j, err := scanJob(rows)
				if err != nil {
					rows.Close()
					return err
				}
				cur[j.ID] = j
			}
			if err := rows.Err(); err != nil {
				return err
			}
			for i := range out {
				if !out[i].Created {
					out[i].Job = cur[jobs[i].ID]
				}
			}
		}
		if dueNow {
			// Delayed jobs alone wake no one: a loop woken now would
			// find nothing. This process's loops learn their due times.
			_, err = tx.Exec(ctx, `SELECT pg_notify($1, '')`, s.channel)
		}
		return err
	}()
	if err != nil {
		return nil, err
	}
	return out, nil
}

// EnqueueTx enqueues jobs (validated by q, as Queue.EnqueueMany does)
// inside the caller's transaction tx, so that they commit or roll back
// with the caller's own writes: the outbox pattern. tx must be on this
// store's database; the results are those of Insert. The jobs are
// claimable, and the workers notified, once tx commits. Nothing is written
// when a job is invalid; after any error the caller should roll back.
func (s *Store) EnqueueTx(ctx context.Context, tx pgx.Tx, q *queue.Queue, jobs ...queue.NewJob) ([]queue.Inserted, error) {
	rows, err := q.NewRowsContext(ctx, jobs)
	if err != nil {
		return nil, err
	}
	return s.insertTx(ctx, tx, rows)
}

// Claim implements queue.Store.
func (s *Store) Claim(ctx context.Context, name string, now, leaseUntil int64, limit int) ([]queue.Job, error) {
	b := &pgx.Batch{}
	b.Queue(claimAlone)
	b.Queue(s.claimSQL(), now, leaseUntil, limit, name)
	br := s.pool.SendBatch(ctx, b)
	jobs, err := func() ([]queue.Job, error) {
		if _, err := br.Exec(); err != nil {
			return nil, err
		}
		rows, err := br.Query()
		if err != nil {
			return nil, err
		}
		return s.scanClaimed(rows, name, now, leaseUntil, limit)
	}()
	// The claim commits at the pipeline's Sync: only a clean Close says it
	// did.
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	s.claimed(len(jobs), limit)
	return jobs, nil
}

// claimPlan is sent first in the transaction of every claim and outcome
// update (a pgx batch is one implicit transaction; the settings end with
// it): the hot statements' plans must not depend on table statistics,
// which are missing or stale on a queue table exactly when a backlog
// builds up.
//
// A claim must walk the due index in (available_at, id) order and stop
// after limit rows. Without statistics on the state column — a new table
// (analyzed empty at migration), autovacuum off or not run yet — the
// planner guesses that few jobs are due and fetches every due row to sort
// them, which makes a claim cost time proportional to the backlog (1–2 ms
// at 3,000 due jobs instead of 0.05–0.2 ms), exactly when the backlog is
// large. With sorts disabled, the ordered index scan is the only plan left.
//
// An outcome or heartbeat update joins its arrays to the table by primary
// key. Given a custom plan for a turn of 1,000 outcomes (the first five
// runs of each prepared statement on each connection), the planner hashes
// the whole table instead — a sequential scan of every job, 200 ms at
// 100,000 jobs, for one turn. With hash and merge joins disabled, the
// nested loop over the primary key is the only plan left.
//
// A sort the claim cannot do without (of the few leases that ran out and
// the pending rows beside them, see claimSQL) then costs the plan the
// planner's penalty for a disabled method, which would cross the JIT's
// cost threshold and compile the claim at every run (~130 ms): JIT is off
// for these transactions, as their statements touch a turn's rows and no
// more.
const claimPlan = `SELECT ` + sortOff + `, ` + mergeOff + `, set_config('enable_hashjoin', 'off', true), ` + jitOff

// The settings the claim's transactions share (see claimPlan, claimJoin).
const (
	sortOff  = `set_config('enable_sort', 'off', true)`
	jitOff   = `set_config('jit', 'off', true)`
	mergeOff = `set_config('enable_mergejoin', 'off', true)`
	hashJoin = `set_config('enable_hashjoin', 'on', true), set_config('enable_nestloop', 'off', true)`
)

// claimJoin is sent after claimPlan and before claimSQL, in the same
// transaction: claimSQL joins the rows it locked to the table by tuple ID,
// and the only plan without a nested loop is the one wanted, a hash join
// over one scan of all the tuple IDs. A nested loop scans the tuple IDs
// one at a time, and PostgreSQL 15 asks the kernel for the table's size
// (lseek) at each such scan: one system call for every job claimed. (A
// server that cannot hash tuple IDs still has the nested loop, as before:
// turning a join method off only makes it the last resort.)
const claimJoin = `SELECT ` + hashJoin

// claimAlone is claimPlan then claimJoin in one statement, for a
// transaction that only claims.
const claimAlone = `SELECT ` + sortOff + `, ` + mergeOff + `, ` + hashJoin + `, ` + jitOff

// claimSQL leases up to $3 due jobs of queue $4 at now $1 until $2,
// returning each claimed row's columns that the claim did not set (see
// claimedCols) and its previous available_at. Run it after claimPlan and
// claimJoin (or claimAlone).
//
// The due jobs are two ranges: leases that ran out (l, on
// stagger_jobs_leased) and pending jobs (p, on stagger_jobs_pending), both
// (queue, available_at, id), each locked in order up to the limit; the
// claim takes the first limit of both in (available_at, id) order (a sort
// of the rows locked, never of every due row). Two partial indexes, one
// per state, let a count or listing of a queue's leases be a range too, so
// the listing index leaves leased jobs out, and a claim writes two index
// entries, not three. A lease runs out at its available_at, so the leased
// range up to now holds only leases that ran out: usually none, one
// descent of a small index. When it holds some, up to as many pending rows
// as it holds stay locked, not claimed, until the claim commits. Whether
// the queue is paused is read once (g).
//
// The update finds the rows the CTE locked by their tuple ID (one TID
// scan of them all, one heap page per job, hashed and joined to the CTE's
// rows for their previous available_at) rather than by a second descent
// of the primary key (three to four pages per job): the row lock keeps
// every other transaction from moving the tuple in between. A row that
// another transaction updated after this statement's snapshot and before
// the lock (the lock then holds the newer version, which the snapshot does
// not see) is not claimed this time — as if it had been locked — and stays
// due.
func (s *Store) claimSQL() string {
	due := func(state string) string {
		return `SELECT ctid AS t, available_at AS prev, id FROM ` + s.jobs + `
			WHERE queue = $4 AND state = '` + state + `' AND available_at <= $1 AND attempts < max_attempts AND deadline > $1
			AND (SELECT open FROM g)
			ORDER BY available_at, id LIMIT $3 FOR UPDATE SKIP LOCKED`
	}
	return `WITH g AS MATERIALIZED (SELECT ` + s.notPaused("$4") + ` AS open),
		c AS (SELECT t, prev FROM (SELECT * FROM (` + due("leased") + `) l UNION ALL SELECT * FROM (` + due("pending") + `) p) u
			ORDER BY prev, id LIMIT $3)
		UPDATE ` + s.jobs + ` j SET state = 'leased', attempts = j.attempts + 1, lease_until = $2, available_at = $2, updated_at = $1
		FROM c WHERE j.ctid = ANY(ARRAY(SELECT t FROM c)) AND j.ctid = c.t
		RETURNING ` + claimedCols + `, c.prev`
}

// claimedCols are the columns claimSQL returns: the claim sets the others
// (state, available_at, lease_until, updated_at) to its arguments, and
// selects by queue, so the server need not send them nor the client decode
// them.
const claimedCols = `j.id, j.payload, j.attempts, j.max_attempts, j.deadline, j.dead_reason, j.last_error, j.created_at, j.finished_at, j.trace`

// scanClaimed reads the rows of claimSQL, run with queue name, now and
// leaseUntil with limit, in claim order: (available_at before the claim,
// id).
//
// The rows are scanned straight into the slice returned, with their
// previous available_at beside them, and put in order where they are (a
// claim's rows usually come in order already). The slice is sized for as
// many jobs as the last claim of the queue brought: a backlog's claims of
// 1,000 jobs each allocate them once, and an idle queue's poll allocates
// nothing.
func (s *Store) scanClaimed(rows pgx.Rows, name string, now, leaseUntil int64, limit int) ([]queue.Job, error) {
	defer rows.Close()
	last := s.lastClaim(name)
	size := min(limit, int(last.Load()))
	c := claimOrder{jobs: make([]queue.Job, 0, size), prev: make([]int64, 0, size)}
	var j queue.Job
	var prev int64
	var reason string
	dst := []any{&j.ID, &j.Payload, &j.Attempts, &j.MaxAttempts, &j.Deadline, &reason, &j.LastError,
		&j.CreatedAt, &j.FinishedAt, &j.Trace, &prev}
	for rows.Next() {
		j = queue.Job{}
		if err := rows.Scan(dst...); err != nil {
			return nil, err
		}
		j.State, j.DeadReason, j.Queue = queue.Leased, queue.DeadReason(reason), name
		j.AvailableAt, j.LeaseUntil, j.UpdatedAt = leaseUntil, leaseUntil, now
		if j.Payload == nil {
			j.Payload = []byte{}
		}
		c.jobs, c.prev = append(c.jobs, j), append(c.prev, prev)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if !sort.IsSorted(c) {
		sort.Sort(c)
	}
	last.Store(int32(len(c.jobs)))
	return c.jobs, nil
}

// lastClaim is how many jobs the last claim of queue name brought: 0, and
// not kept, for a name past the first lastClaimsMax.
func (s *Store) lastClaim(name string) *atomic.Int32 {
	if v, ok := s.lastClaims.Load(name); ok {
		return v.(*atomic.Int32)
	}
	if s.lastClaimsN.Add(1) > s.lastClaimsMax { // a place for name, taken before it is stored
		s.lastClaimsN.Add(-1)
		return new(atomic.Int32)
	}
	v, loaded := s.lastClaims.LoadOrStore(name, new(atomic.Int32))
	if loaded {
		s.lastClaimsN.Add(-1)
	}
	return v.(*atomic.Int32)
}

// claimOrder sorts claimed jobs by their available_at before the claim
// (prev), then ID.
type claimOrder struct {
	jobs []queue.Job
	prev []int64
}

func (c claimOrder) Len() int { return len(c.jobs) }

func (c claimOrder) Less(a, b int) bool {
	if c.prev[a] != c.prev[b] {
		return c.prev[a] < c.prev[b]
	}
	return c.jobs[a].ID < c.jobs[b].ID
}

func (c claimOrder) Swap(a, b int) {
	c.jobs[a], c.jobs[b] = c.jobs[b], c.jobs[a]
	c.prev[a], c.prev[b] = c.prev[b], c.prev[a]
}

// ClaimLimited implements queue.LimitedClaimer. The queue's row in the
// limits table is locked (FOR UPDATE) for the claim's transaction, so the
// limited claims of one queue, from every process and host, take turns:
// each counts the live leases and reads the claim-rate bucket after the
// previous one committed, claims what lim allows, and writes the bucket
// back. Unlimited claims of other queues do not wait on it.
func (s *Store) ClaimLimited(ctx context.Context, name string, lim queue.Limits, now, leaseUntil int64, limit int) ([]queue.Job, error) {
	var out []queue.Job
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		full := lim.FullBucket(now)
		if _, err := tx.Exec(ctx, `INSERT INTO `+s.limitsT+` (queue, tokens, at) VALUES ($1, $2, $3)
			ON CONFLICT (queue) DO NOTHING`, name, full.Tokens, full.At); err != nil {
			return err
		}
		var b queue.Bucket
		if err := tx.QueryRow(ctx, `SELECT tokens, at FROM `+s.limitsT+` WHERE queue = $1 FOR UPDATE`, name).Scan(&b.Tokens, &b.At); err != nil {
			return err
		}
		var inFlight int
		if lim.MaxInFlight > 0 {
			if err := tx.QueryRow(ctx, s.inFlightSQL(), name, now).Scan(&inFlight); err != nil {
				return err
			}
		}
		if n := lim.Allow(inFlight, b, now, limit); n > 0 {
			if _, err := tx.Exec(ctx, claimAlone); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, s.claimSQL(), now, leaseUntil, n, name)
			if err != nil {
				return err
			}
			if out, err = s.scanClaimed(rows, name, now, leaseUntil, n); err != nil {
				return err
			}
		}
		if lim.Rate > 0 {
			b = lim.Spend(b, now, len(out))
			if _, err := tx.Exec(ctx, `UPDATE `+s.limitsT+` SET tokens = $2, at = $3 WHERE queue = $1`, name, b.Tokens, b.At); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.claimed(len(out), limit)
	return out, nil
}

// RecordAndClaim implements queue.RecordClaimer: Record and Claim sent
// together in one round trip, run in one transaction (a pipeline with one
// Sync is one implicit transaction) and committed together.
func (s *Store) RecordAndClaim(ctx context.Context, outcomes []queue.Outcome, name string, now, leaseUntil int64, limit int) ([]queue.Job, error) {
	sql, args, dueNow := s.record(outcomes)
	b := &pgx.Batch{}
	b.Queue(claimPlan)
	b.Queue(sql, args...)
	b.Queue(claimJoin)
	b.Queue(s.claimSQL(), now, leaseUntil, limit, name)
	if dueNow {
		// Queued in the transaction, delivered when it commits.
		b.Queue(`SELECT pg_notify($1, '')`, s.channel)
	}
	br := s.pool.SendBatch(ctx, b)
	jobs, err := func() ([]queue.Job, error) {
		if _, err := br.Exec(); err != nil {
			return nil, err
		}
		rows, err := br.Query()
		if err != nil {
			return nil, err
		}
		if err := scanRecorded(rows, outcomes); err != nil {
			return nil, err
		}
		if _, err := br.Exec(); err != nil {
			return nil, err
		}
		if rows, err = br.Query(); err != nil {
			return nil, err
		}
		jobs, err := s.scanClaimed(rows, name, now, leaseUntil, limit)
		if err != nil {
			return nil, err
		}
		if dueNow {
			if _, err := br.Exec(); err != nil {
				return nil, err
			}
		}
		return jobs, nil
	}()
	// The transaction commits at the pipeline's Sync: only a clean Close
	// says it did.
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		for i := range outcomes {
			outcomes[i].Applied = false
		}
		return nil, err
	}
	s.claimed(len(jobs), limit)
	return jobs, nil
}

// Record implements queue.Store.
func (s *Store) Record(ctx context.Context, outcomes []queue.Outcome) error {
	sql, args, dueNow := s.record(outcomes)
	b := &pgx.Batch{}
	b.Queue(claimPlan)
	b.Queue(sql, args...)
	br := s.pool.SendBatch(ctx, b)
	_, err := br.Exec()
	if err == nil {
		var rows pgx.Rows
		if rows, err = br.Query(); err == nil {
			err = scanRecorded(rows, outcomes)
		}
	}
	// The outcomes commit at the pipeline's Sync: only a clean Close says
	// they did.
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		for i := range outcomes {
			outcomes[i].Applied = false
		}
		return err
	}
	if dueNow {
		s.notify(ctx)
	}
	return nil
}

// notify wakes the listeners: a released or retried job is due now.
// Best effort: polling covers a lost notification.
func (s *Store) notify(ctx context.Context) {
	s.pool.Exec(ctx, `SELECT pg_notify($1, '')`, s.channel)
}

// leaseHeld is the condition "j is still leased with attempt a", written
// inside a CASE so that no index but the primary key (j.id = ...) can serve
// the statement: a bare j.state = 'leased' lets the planner scan the state
// or due index instead of looking each job up by ID when stale statistics
// say few jobs are leased, which costs time proportional to the number of
// leased jobs.
func leaseHeld(a string) string {
	return `CASE WHEN j.state = 'leased' THEN j.attempts = ` + a + ` ELSE false END`
}

// record returns the statement and arguments that apply outcomes:
// doneSQL when every outcome is a plain Done (a drain's every turn),
// recordSQL otherwise. dueNow says whether an outcome makes a job due at
// once (a release, a retry without a wait), which the listeners are told
// of. A retry due later is not: a loop woken now would find nothing and
// sleep a poll, and the recording process's own loops sleep until it is
// due.
func (s *Store) record(outcomes []queue.Outcome) (sql string, args []any, dueNow bool) {
	for _, o := range outcomes {
		if o.State != queue.Done || o.DeadReason != "" {
			args, dueNow = recordArgs(outcomes)
			return s.recordSQL(), args, dueNow
		}
	}
	return s.doneSQL(), doneArgs(outcomes), false
}

// recordSQL applies the outcomes given as arrays (recordArgs) to the jobs
// still leased with their attempt and returns the ordinal (from 1) of each
// outcome applied.
func (s *Store) recordSQL() string {
	return `UPDATE ` + s.jobs + ` j SET
			state = o.state,
			available_at = CASE WHEN o.state = 'pending' THEN o.available_at ELSE j.available_at END,
			dead_reason = o.dead_reason,
			last_error = CASE WHEN o.state = 'done' THEN j.last_error ELSE o.last_error END,
			lease_until = CASE WHEN o.state = 'leased' THEN j.lease_until ELSE 0 END,
			finished_at = CASE WHEN o.state IN ('done', 'dead') THEN o.now ELSE j.finished_at END,
			updated_at = o.now
		FROM unnest($1::text[], $2::int[], $3::text[], $4::bigint[], $5::text[], $6::text[], $7::bigint[]) WITH ORDINALITY
			AS o(id, attempt, state, available_at, dead_reason, last_error, now, i)
		WHERE j.id = o.id AND ` + leaseHeld("o.attempt") + `
		RETURNING o.i`
}

// doneSQL is recordSQL for outcomes that are all Done with no DeadReason
// (doneArgs): three arrays to send and read instead of seven, and no
// per-row choice of what to write.
func (s *Store) doneSQL() string {
	return `UPDATE ` + s.jobs + ` j SET state = 'done', dead_reason = '', lease_until = 0, finished_at = o.now, updated_at = o.now
		FROM unnest($1::text[], $2::int[], $3::bigint[]) WITH ORDINALITY AS o(id, attempt, now, i)
		WHERE j.id = o.id AND ` + leaseHeld("o.attempt") + `
		RETURNING o.i`
}

// recordArgs are recordSQL's arguments; dueNow as for record.
func recordArgs(outcomes []queue.Outcome) (args []any, dueNow bool) {
	n := len(outcomes)
	ids, attempts := make([]string, n), make([]int32, n)
	states, reasons, errs := make([]string, n), make([]string, n), make([]string, n)
	avail, nows := make([]int64, n), make([]int64, n)
	for i, o := range outcomes {
		ids[i], attempts[i], states[i], reasons[i], errs[i] = o.ID, int32(o.Attempt), string(o.State), string(o.DeadReason), o.LastError
		avail[i], nows[i] = o.AvailableAt, o.Now
		dueNow = dueNow || o.State == queue.Pending && o.AvailableAt <= o.Now
	}
	return []any{textArray(ids), attempts, textArray(states), int8Array(avail), textArray(reasons), textArray(errs), int8Array(nows)}, dueNow
}

// doneArgs are doneSQL's arguments.
func doneArgs(outcomes []queue.Outcome) []any {
	n := len(outcomes)
	ids, attempts, nows := make([]string, n), make([]int32, n), make([]int64, n)
	for i, o := range outcomes {
		ids[i], attempts[i], nows[i] = o.ID, int32(o.Attempt), o.Now
	}
	return []any{textArray(ids), attempts, int8Array(nows)}
}

// scanRecorded reads the ordinals that recordSQL or doneSQL returns into
// outcomes[i].Applied.
func scanRecorded(rows pgx.Rows, outcomes []queue.Outcome) error {
	return scanFenced(rows, len(outcomes),
		func(i int) lease { return lease{outcomes[i].ID, outcomes[i].Attempt} },
		func(i int) *bool { return &outcomes[i].Applied })
}

// lease is a job's ID and the attempt that holds it (the fencing token).
type lease struct {
	id      string
	attempt int
}

// scanFenced reads the ordinals (from 1) of the n inputs that recordSQL,
// doneSQL or extendSQL applied — one row per lease still held — and sets
// *flag(i) of each input i to whether it was applied. An input given
// twice (the same key: ID and attempt) joins the job twice but updates it
// once, so only one ordinal comes back: its copies are flagged as it is.
func scanFenced(rows pgx.Rows, n int, key func(i int) lease, flag func(i int) *bool) error {
	defer rows.Close()
	for i := range n {
		*flag(i) = false
	}
	applied := 0
	var i int64
	dst := []any{&i} // made once: Scan's variadic slice escapes
	for rows.Next() {
		if err := rows.Scan(dst...); err != nil {
			return err
		}
		if i < 1 || i > int64(n) {
			return fmt.Errorf("postgres: input %d of %d reported applied", i, n)
		}
		*flag(int(i - 1)) = true
		applied++
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if applied < n {
		held := make(map[lease]bool, applied)
		for i := range n {
			if *flag(i) {
				held[key(i)] = true
			}
		}
		for i := range n {
			*flag(i) = held[key(i)]
		}
	}
	return nil
}

// Extend implements queue.Store.
func (s *Store) Extend(ctx context.Context, leases []queue.Lease, now, leaseUntil int64) error {
	ids, attempts := make([]string, len(leases)), make([]int32, len(leases))
	for i, l := range leases {
		ids[i], attempts[i] = l.ID, int32(l.Attempt)
		leases[i].Held = false
	}
	b := &pgx.Batch{}
	b.Queue(claimPlan)
	b.Queue(s.extendSQL(), textArray(ids), attempts, leaseUntil, now)
	br := s.pool.SendBatch(ctx, b)
	_, err := br.Exec()
	if err == nil {
		var rows pgx.Rows
		if rows, err = br.Query(); err == nil {
			err = scanFenced(rows, len(leases),
				func(i int) lease { return lease{leases[i].ID, leases[i].Attempt} },
				func(i int) *bool { return &leases[i].Held })
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		for i := range leases {
			leases[i].Held = false // the statement failed: nothing was extended
		}
	}
	return err
}

// extendSQL sets lease_until = available_at = $3, updated_at = $4 on the
// jobs still leased with their attempt ($1 ids, $2 attempts) whose lease
// has not run out at $4, and returns the ordinal (from 1) of each lease
// extended. Run it after claimPlan.
func (s *Store) extendSQL() string {
	return `UPDATE ` + s.jobs + ` j SET lease_until = $3, available_at = $3, updated_at = $4
		FROM unnest($1::text[], $2::int[]) WITH ORDINALITY AS l(id, attempt, i)
		WHERE j.id = l.id AND ` + leaseHeld("l.attempt") + ` AND j.lease_until > $4
		RETURNING l.i`
}

// Bury implements queue.Store.
func (s *Store) Bury(ctx context.Context, now int64, limit int) (int, error) {
	// The batch is selected in a materialized CTE, run once (see Purge).
	tag, err := s.pool.Exec(ctx, `WITH c AS MATERIALIZED (SELECT id FROM `+s.jobs+`
			WHERE (state = 'pending' OR (state = 'leased' AND available_at <= $1))
			AND (attempts >= max_attempts OR deadline <= $1)
			LIMIT $2 FOR UPDATE SKIP LOCKED)
		UPDATE `+s.jobs+` j SET state = 'dead',
			dead_reason = CASE WHEN j.attempts >= j.max_attempts THEN 'exhausted' ELSE 'deadline' END,
			last_error = CASE WHEN j.attempts >= j.max_attempts AND j.last_error = '' THEN $3 ELSE j.last_error END,
			lease_until = 0, finished_at = $1, updated_at = $1
		FROM c WHERE j.id = c.id`, now, limit, queue.UnknownOutcome)
	if err != nil {
		return 0, err
	}
	return int(tag.RowsAffected()), nil
}

// Purge implements queue.Purger: the jobs and their history. Rows locked
// by another transaction (a Requeue in flight) are skipped.
func (s *Store) Purge(ctx context.Context, state queue.State, before int64, limit int) (int, error) {
	if limit < 1 {
		return 0, nil
	}
	// A materialized CTE runs the limited select once: as a subquery of
	// IN (...), PostgreSQL may run it again for a rescan and delete more
	// than limit rows.
	var n int
	err := s.pool.QueryRow(ctx, `WITH c AS MATERIALIZED (
			SELECT id FROM `+s.jobs+` WHERE state = $1 AND state IN ('done', 'dead') AND finished_at < $2
			ORDER BY state, finished_at LIMIT $3 FOR UPDATE SKIP LOCKED),
		d AS (DELETE FROM `+s.jobs+` j USING c WHERE j.id = c.id AND j.state = $1 AND j.finished_at < $2 RETURNING j.id),
		h AS (DELETE FROM `+s.eventsT+` e USING d WHERE e.job_id = d.id)
		SELECT count(*) FROM d`, string(state), before, limit).Scan(&n)
	if err != nil {
		return 0, err
	}
	return n, nil
}

// CountFinished implements queue.Purger.
func (s *Store) CountFinished(ctx context.Context, state queue.State, before int64) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM `+s.jobs+`
		WHERE state = $1 AND state IN ('done', 'dead') AND finished_at < $2`, string(state), before).Scan(&n)
	return n, err
}

// Get implements queue.Store.
func (s *Store) Get(ctx context.Context, id string) (queue.Job, error) {
	j, err := scanJob(s.pool.QueryRow(ctx, `SELECT `+s.readCols+` FROM `+s.jobs+` WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return queue.Job{}, queue.ErrNotFound
	}
	return j, err
}

// List implements queue.Store: Search of one state, one walk of the
// listing index in ID order (leased jobs, which it leaves out: the queue's
// leases on stagger_jobs_leased).
func (s *Store) List(ctx context.Context, name string, state queue.State, after string, limit int) ([]queue.Job, error) {
	if !slices.Contains(queue.AllStates, state) {
		return nil, nil // no job is in it
	}
	return s.Search(ctx, queue.Search{Queue: name, States: []queue.State{state}, After: after, Limit: limit})
}

// query reads the jobs a query returns.
func (s *Store) query(ctx context.Context, text string, args ...any) ([]queue.Job, error) {
	rows, err := s.pool.Query(ctx, text, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []queue.Job
	for rows.Next() {
		j, err := scanJob(rows)
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
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		j, err = s.requeueTx(ctx, tx, id, grant, deadline, now)
		return err
	})
	return j, err
}

func (s *Store) requeueTx(ctx context.Context, tx pgx.Tx, id string, grant int, deadline, now int64) (queue.Job, error) {
	var state string
	err := tx.QueryRow(ctx, `SELECT state FROM `+s.jobs+` WHERE id = $1 FOR UPDATE`, id).Scan(&state)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return queue.Job{}, queue.ErrNotFound
	case err != nil:
		return queue.Job{}, err
	case state != string(queue.Dead):
		return queue.Job{}, queue.ErrNotDead
	}
	j, err := scanJob(tx.QueryRow(ctx, `UPDATE `+s.jobs+` SET state = 'pending', max_attempts = attempts + $2,
		deadline = $3, available_at = $4, updated_at = $4, dead_reason = '', finished_at = 0, lease_until = 0
		WHERE id = $1 RETURNING `+cols, id, grant, deadline, now))
	if err != nil {
		return queue.Job{}, err
	}
	_, err = tx.Exec(ctx, `SELECT pg_notify($1, '')`, s.channel)
	return j, err
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

// statsSQL is the stats query: of the queue named by $2 when one is true.
// Its jobs are read in two ranges, leased and not (stagger_jobs_leased,
// stagger_jobs_list_unleased): no index holds every state.
func (s *Store) statsSQL(one bool) string {
	if !one {
		return queuesql.StatsSQL(s.jobs, "$", false)
	}
	const c = `queue, state, dead_reason, available_at, attempts, max_attempts, deadline`
	return queuesql.StatsSQL(`(SELECT `+c+` FROM `+s.jobs+` WHERE queue = $2 AND state <> 'leased'
		UNION ALL SELECT `+c+` FROM `+s.jobs+` WHERE queue = $2 AND state = 'leased') j`, "$", false)
}

// countStats counts the jobs of the named queue ("": of every queue).
func (s *Store) countStats(ctx context.Context, now int64, name string) (map[string]queue.Stats, error) {
	args := []any{now}
	if name != "" {
		args = append(args, name)
	}
	rows, err := s.pool.Query(ctx, s.statsSQL(name != ""), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return queuesql.ScanStats(rows, now)
}

// Subscribe implements queue.Notifier: wake-ups from LISTEN on the store's
// channel, sent by every insert, requeue and retry. One connection listens
// for all subscribers of the store; it reconnects after errors.
func (s *Store) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	s.lmu.Lock()
	s.subs[ch] = struct{}{}
	if s.lcancel == nil {
		ctx, cancel := context.WithCancel(context.Background())
		s.lcancel, s.ldone = cancel, make(chan struct{})
		go s.listen(ctx, s.ldone)
	}
	s.lmu.Unlock()
	return ch, func() {
		s.lmu.Lock()
		delete(s.subs, ch)
		if len(s.subs) == 0 && s.lcancel != nil {
			s.lcancel()
			s.lcancel = nil
		}
		s.lmu.Unlock()
	}
}

func (s *Store) listen(ctx context.Context, done chan struct{}) {
	defer close(done)
	for ctx.Err() == nil {
		err := s.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		_ = err // the workers' jittered polling covers the gap
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		s.broadcast() // something may have been missed while disconnected
	}
}

func (s *Store) listenOnce(ctx context.Context) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `LISTEN "`+s.channel+`"`); err != nil {
		return err
	}
	defer func() {
		// Leave the pooled connection clean.
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, `UNLISTEN *`); err != nil {
			conn.Conn().Close(uctx)
		}
	}()
	for {
		if _, err := conn.Conn().WaitForNotification(ctx); err != nil {
			return err
		}
		s.broadcast()
	}
}

func (s *Store) broadcast() {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	for ch := range s.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// prefix is the schema qualifier of the store's objects ("" for the
// search_path).
func (s *Store) prefix() string {
	if s.opts.Schema == "" {
		return ""
	}
	return `"` + s.opts.Schema + `".`
}

// Schema returns the quoted schema of the store's tables ("" for the
// search_path), for an application's own tables next to the queue's.
func (s *Store) Schema() string {
	if s.opts.Schema == "" {
		return ""
	}
	return `"` + s.opts.Schema + `"`
}
