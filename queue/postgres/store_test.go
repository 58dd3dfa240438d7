package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/queue/postgres"
	"github.com/staggerhq/stagger/queue/queuetest"
)

const defaultURL = "postgres://postgres@127.0.0.1:5432/test"

var (
	poolOnce sync.Once
	pool     *pgxpool.Pool
	poolErr  error
)

// sharedPool connects once to STAGGER_POSTGRES_URL. When the server is
// unreachable the tests skip, except under CI=true where they fail.
func sharedPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	poolOnce.Do(func() {
		url := os.Getenv("STAGGER_POSTGRES_URL")
		if url == "" {
			url = defaultURL
		}
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			poolErr = errors.New("STAGGER_POSTGRES_URL does not parse")
			return
		}
		cfg.MaxConns = 24
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		pool, poolErr = pgxpool.NewWithConfig(ctx, cfg)
		if poolErr == nil {
			poolErr = pool.Ping(ctx)
		}
	})
	if poolErr != nil {
		msg := "PostgreSQL unreachable at STAGGER_POSTGRES_URL (default " + defaultURL + "): " + poolErr.Error()
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return pool
}

// newStore returns a store in a fresh schema, dropped after the test.
func newStore(t testing.TB) *postgres.Store {
	t.Helper()
	return newStoreOpts(t, postgres.Options{})
}

// newStoreOpts is newStore with options (Schema is set here).
func newStoreOpts(t testing.TB, opts postgres.Options) *postgres.Store {
	t.Helper()
	opts.Schema = tempSchema(t)
	s, err := postgres.New(context.Background(), sharedPool(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close) // before the schema's drop: cleanups run last first
	return s
}

// tempSchema returns the name of a fresh schema, dropped when t ends.
func tempSchema(t testing.TB) string {
	t.Helper()
	p := sharedPool(t)
	b := make([]byte, 6)
	rand.Read(b)
	schema := "stagger_t_" + hex.EncodeToString(b)
	t.Cleanup(func() {
		if _, err := p.Exec(context.Background(), `DROP SCHEMA IF EXISTS "`+schema+`" CASCADE`); err != nil {
			t.Errorf("dropping %s: %v", schema, err)
		}
	})
	return schema
}

func TestConformance(t *testing.T) {
	queuetest.Run(t, func(t *testing.T) queue.Store { return newStore(t) })
}

func TestInboxConformance(t *testing.T) {
	queuetest.RunInbox(t, func(t *testing.T) queue.Inbox { return newStore(t).Inbox() })
}

func TestNotifyWakesSubscribers(t *testing.T) {
	s := newStore(t)
	wake, cancel := s.Subscribe()
	defer cancel()
	ctx := context.Background()
	// LISTEN is asynchronous: insert until a wake-up arrives (bounded).
	clock := queuetest.NewClock(queuetest.Start)
	q, _ := queue.New(s, queue.Config{Now: clock.Now})
	deadline := time.After(10 * time.Second)
	for i := 0; ; i++ {
		if _, _, err := q.Enqueue(ctx, queue.NewJob{ID: "n" + string(rune('a'+i%26)) + string(rune('a'+i/26%26))}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-wake:
			return
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatal("no notification after inserts")
		}
	}
}

// Recording a retry due later, or enqueueing only delayed or existing
// jobs, notifies no one (a loop woken now would find nothing and sleep a
// poll); a release, a retry due at once or a new job due now does.
// The listener reads notifications in commit order: after each Record a
// marker is sent, and what arrives first tells whether Record notified.
func TestNotifyOnlyWhatIsDue(t *testing.T) {
	s := newStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := sharedPool(t).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.Channel()}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	// next sends a marker and returns the payloads that arrived before it.
	marker := 0
	next := func() []string {
		t.Helper()
		marker++
		m := fmt.Sprint("marker-", marker)
		if _, err := s.Pool().Exec(ctx, `SELECT pg_notify($1, $2)`, s.Channel(), m); err != nil {
			t.Fatal(err)
		}
		var before []string
		for {
			n, err := conn.Conn().WaitForNotification(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if n.Payload == m {
				return before
			}
			before = append(before, n.Payload)
		}
	}
	clock := queuetest.NewClock(queuetest.Start)
	q, err := queue.New(s, queue.Config{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{"later", "release", "later-claim", "now-claim"}
	for _, id := range ids {
		if _, _, err := q.Enqueue(ctx, queue.NewJob{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	next() // the enqueues' notifications
	now := clock.Now()
	if js, err := s.Claim(ctx, queue.DefaultQueue, now, now+60_000, len(ids)); err != nil || len(js) != len(ids) {
		t.Fatalf("claimed %d, %v", len(js), err)
	}
	retry := func(id string, after int64) []queue.Outcome {
		return []queue.Outcome{{ID: id, Attempt: 1, State: queue.Pending, AvailableAt: now + after, Now: now}}
	}
	for _, c := range []struct {
		name   string
		record func() error
		notify bool
	}{
		{"Record, due in 1 min", func() error { return s.Record(ctx, retry("later", 60_000)) }, false},
		{"Record, released", func() error { return s.Record(ctx, retry("release", 0)) }, true},
		{"RecordAndClaim, due in 1 min", func() error {
			_, err := s.RecordAndClaim(ctx, retry("later-claim", 60_000), queue.DefaultQueue, now, now+60_000, 1)
			return err
		}, false},
		{"RecordAndClaim, due now", func() error {
			_, err := s.RecordAndClaim(ctx, retry("now-claim", 0), queue.DefaultQueue, now, now+60_000, 0)
			return err
		}, true},
		{"Enqueue, delayed", func() error {
			_, _, err := q.Enqueue(ctx, queue.NewJob{ID: "delayed", AvailableAt: now + 60_000})
			return err
		}, false},
		{"Enqueue, an existing ID", func() error {
			_, _, err := q.Enqueue(ctx, queue.NewJob{ID: "later"})
			return err
		}, false},
		{"EnqueueMany, one due of two", func() error {
			_, err := q.EnqueueMany(ctx, []queue.NewJob{{ID: "d2", AvailableAt: now + 60_000}, {ID: "due"}})
			return err
		}, true},
	} {
		if err := c.record(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := len(next()) > 0; got != c.notify {
			t.Errorf("%s: notified %v, want %v", c.name, got, c.notify)
		}
	}
}

func TestProcessTxExactlyOnce(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	schema := s.Schema()
	if _, err := s.Pool().Exec(ctx, `CREATE TABLE `+schema+`.effects (id text, n int)`); err != nil {
		t.Fatal(err)
	}
	in := s.Inbox().(*postgres.Inbox)
	var wg sync.WaitGroup
	for range 4 {
		for i := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := "m" + string(rune('a'+i))
				_, err := in.ProcessTx(ctx, id, func(ctx context.Context, tx pgx.Tx) error {
					_, err := tx.Exec(ctx, `INSERT INTO `+schema+`.effects VALUES ($1, 1)`, id)
					return err
				})
				if err != nil {
					t.Error(err)
				}
			}()
		}
	}
	wg.Wait()
	boom := errors.New("boom")
	if _, err := in.ProcessTx(ctx, "fail", func(ctx context.Context, tx pgx.Tx) error {
		tx.Exec(ctx, `INSERT INTO `+schema+`.effects VALUES ('fail', 1)`)
		return boom
	}); !errors.Is(err, boom) {
		t.Fatal(err)
	}
	var rows, distinct int
	s.Pool().QueryRow(ctx, `SELECT count(*), count(DISTINCT id) FROM `+schema+`.effects`).Scan(&rows, &distinct)
	if rows != 20 || distinct != 20 {
		t.Fatalf("effects: %d rows over %d ids, want 20 each", rows, distinct)
	}
	if ok, _ := in.Processed(ctx, "fail"); ok {
		t.Fatal("failed effect marked processed")
	}
}

func TestOptionsValidation(t *testing.T) {
	p := sharedPool(t)
	for field, o := range map[string]postgres.Options{
		"Schema":     {Schema: `x"; DROP TABLE y; --`},
		"InboxLease": {InboxLease: -time.Second},
	} {
		if _, err := postgres.New(context.Background(), p, o); !errors.Is(err, queue.ErrInvalid) || !strings.Contains(err.Error(), field) {
			t.Errorf("New(%+v) = %v, want an error naming %s", o, err, field)
		}
	}
}

func TestOpenRedactsPassword(t *testing.T) {
	_, err := postgres.Open(context.Background(), "postgres://u:s3cr3tpw@127.0.0.1:1/db?connect_timeout=1", postgres.Options{})
	if err == nil {
		t.Fatal("connected to port 1")
	}
	if strings.Contains(err.Error(), "s3cr3tpw") {
		t.Fatalf("error shows the password: %v", err)
	}
	_, err = postgres.Open(context.Background(), "postgres://u:s3cr3tpw@[bad", postgres.Options{})
	if err == nil || strings.Contains(err.Error(), "s3cr3tpw") {
		t.Fatalf("parse error shows the password: %v", err)
	}
}

// TestRecordAndClaimIsOneTransaction: the outcomes and the claim are sent
// as one pipeline; when the claim fails, the outcomes must not have been
// committed either.
func TestRecordAndClaimIsOneTransaction(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	const now = queuetest.Start
	if _, err := s.Insert(ctx, []queue.Job{
		{ID: "a", Payload: []byte{}, MaxAttempts: 3, AvailableAt: now, Deadline: now + 10000, State: queue.Pending, CreatedAt: now, UpdatedAt: now},
	}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Claim(ctx, queue.DefaultQueue, now, now+100, 1)
	if err != nil || len(got) != 1 {
		t.Fatal(got, err)
	}
	outs := []queue.Outcome{{ID: "a", Attempt: 1, State: queue.Done, Now: now + 5}}
	// A negative LIMIT fails the claim statement after the outcome's update
	// has run in the same transaction.
	if _, err := s.RecordAndClaim(ctx, outs, queue.DefaultQueue, now+10, now+110, -1); err == nil {
		t.Fatal("RecordAndClaim with limit -1 succeeded")
	}
	if outs[0].Applied {
		t.Fatal("a failed RecordAndClaim reports its outcome applied")
	}
	if a, _ := s.Get(ctx, "a"); a.State != queue.Leased || a.FinishedAt != 0 {
		t.Fatalf("the outcome of a failed RecordAndClaim was committed: %+v", a)
	}
	// The connection is usable again and the outcome can be recorded.
	if _, err := s.RecordAndClaim(ctx, outs, queue.DefaultQueue, now+10, now+110, 1); err != nil || !outs[0].Applied {
		t.Fatal(err, outs[0].Applied)
	}
	if a, _ := s.Get(ctx, "a"); a.State != queue.Done {
		t.Fatalf("a = %+v", a)
	}
}

// BenchmarkRecordAndClaim is a busy Worker's turn on PostgreSQL: record
// the outcomes of the 4 jobs claimed last turn and claim 4 more, in one
// transaction (one commit: the server's durability settings apply), with a
// backlog of due jobs.
func BenchmarkRecordAndClaim(b *testing.B) {
	queuetest.BenchRecordAndClaim(b, newStore(b))
}

func TestReadOnlyCreatesNothing(t *testing.T) {
	p := sharedPool(t)
	ctx := context.Background()
	b := make([]byte, 6)
	rand.Read(b)
	schema := "stagger_t_" + hex.EncodeToString(b)
	if _, err := postgres.New(ctx, p, postgres.Options{Schema: schema, ReadOnly: true}); err == nil || !strings.Contains(err.Error(), "no queue table") {
		t.Fatalf("ReadOnly New on a missing schema = %v", err)
	}
	var n int
	if err := p.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, schema).Scan(&n); err != nil || n != 0 {
		t.Fatalf("ReadOnly New created schema %s (%d, %v)", schema, n, err)
	}
	w := newStore(t)
	if _, err := w.Insert(ctx, []queue.Job{{ID: "a", Payload: []byte{}, MaxAttempts: 1, AvailableAt: 1, Deadline: queue.MaxTime, State: queue.Pending}}); err != nil {
		t.Fatal(err)
	}
	r, err := postgres.New(ctx, p, postgres.Options{Schema: strings.Trim(w.Schema(), `"`), ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := r.Stats(ctx, queue.DefaultQueue, 2); err != nil || st.PendingDue != 1 {
		t.Fatalf("read-only Stats = %+v, %v", st, err)
	}
}

// pgEnqueueTx is queuetest's EnqueueTx on a transaction of s.Pool().
func pgEnqueueTx(s *postgres.Store) queuetest.EnqueueTx {
	return func(ctx context.Context, q *queue.Queue, commit bool, jobs ...queue.NewJob) ([]queue.Inserted, error) {
		tx, err := s.Pool().Begin(ctx)
		if err != nil {
			return nil, err
		}
		res, err := s.EnqueueTx(ctx, tx, q, jobs...)
		if err != nil || !commit {
			return res, errors.Join(err, tx.Rollback(ctx))
		}
		return res, tx.Commit(ctx)
	}
}

func TestEnqueueTxConformance(t *testing.T) {
	queuetest.RunEnqueueTx(t, func(t *testing.T) (queue.Store, queuetest.EnqueueTx) {
		s := newStore(t)
		return s, pgEnqueueTx(s)
	})
}

// TestEnqueueTxWithBusinessRow: the application's row and its job commit
// or roll back together, and a committed job wakes the subscribers.
func TestEnqueueTxWithBusinessRow(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	q, _ := queue.New(s, queue.Config{})
	if _, err := s.Pool().Exec(ctx, `CREATE TABLE `+s.Schema()+`.orders (id text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	place := func(id string, commit bool) {
		err := pgx.BeginFunc(ctx, s.Pool(), func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO `+s.Schema()+`.orders VALUES ($1)`, id); err != nil {
				return err
			}
			if _, err := s.EnqueueTx(ctx, tx, q, queue.NewJob{ID: "ship-" + id}); err != nil {
				return err
			}
			if !commit {
				return errRollback
			}
			return nil
		})
		if err != nil && !errors.Is(err, errRollback) {
			t.Fatal(err)
		}
	}
	place("1", false)
	place("2", true)
	for id, want := range map[string]bool{"1": false, "2": true} {
		var n int
		s.Pool().QueryRow(ctx, `SELECT count(*) FROM `+s.Schema()+`.orders WHERE id = $1`, id).Scan(&n)
		_, err := s.Get(ctx, "ship-"+id)
		if (n == 1) != want || (err == nil) != want {
			t.Fatalf("order %s: row %d, job err %v; want both present = %v", id, n, err, want)
		}
	}
}

var errRollback = errors.New("roll back")

// TestMigratesTableBeforeTrace: a table made before the trace column is
// read by a read-only store as it is (its jobs without a trace) and
// migrated by New; its jobs stay claimable.
func TestMigratesTableBeforeTrace(t *testing.T) {
	p, schema := sharedPool(t), tempSchema(t)
	ctx := context.Background()
	s, err := postgres.New(ctx, p, postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	q, _ := queue.New(s, queue.Config{})
	if _, _, err := q.Enqueue(ctx, queue.NewJob{ID: "old"}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := p.Exec(ctx, `ALTER TABLE "`+schema+`".stagger_jobs DROP COLUMN trace`); err != nil {
		t.Fatal(err)
	}
	r, err := postgres.New(ctx, p, postgres.Options{Schema: schema, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if j, err := r.Get(ctx, "old"); err != nil || j.Trace != "" {
		t.Fatalf("read-only Get on the old table: %+v %v", j, err)
	}
	if js, err := r.List(ctx, queue.DefaultQueue, queue.Pending, "", 10); err != nil || len(js) != 1 {
		t.Fatalf("read-only List on the old table: %v %v", js, err)
	}
	if s, err = postgres.New(ctx, p, postgres.Options{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now().UnixMilli()
	if got, err := s.Claim(ctx, queue.DefaultQueue, now+1000, now+60000, 5); err != nil || len(got) != 1 || got[0].ID != "old" || got[0].Trace != "" {
		t.Fatalf("claim after migration: %+v %v", got, err)
	}
}

// TestMigratesTableBeforeNamedQueues: a table made before named queues
// (no queue column, the old due and state indexes) is migrated by New:
// its jobs are in the default queue and claimable, the old indexes gone.
func TestMigratesTableBeforeNamedQueues(t *testing.T) {
	p, schema := sharedPool(t), tempSchema(t)
	ctx := context.Background()
	for _, q := range []string{
		`CREATE SCHEMA "` + schema + `"`,
		`CREATE TABLE "` + schema + `".stagger_jobs (id text PRIMARY KEY, payload bytea NOT NULL, attempts integer NOT NULL,
			max_attempts integer NOT NULL, available_at bigint NOT NULL, deadline bigint NOT NULL,
			state text NOT NULL CHECK (state IN ('pending', 'leased', 'done', 'dead')), dead_reason text NOT NULL DEFAULT '',
			last_error text NOT NULL DEFAULT '', lease_until bigint NOT NULL DEFAULT 0, created_at bigint NOT NULL,
			updated_at bigint NOT NULL, finished_at bigint NOT NULL DEFAULT 0)`,
		`CREATE INDEX stagger_jobs_due ON "` + schema + `".stagger_jobs (available_at, id) WHERE state IN ('pending', 'leased')`,
		`CREATE INDEX stagger_jobs_state ON "` + schema + `".stagger_jobs (state, dead_reason, id)`,
		`INSERT INTO "` + schema + `".stagger_jobs (id, payload, attempts, max_attempts, available_at, deadline, state, created_at, updated_at)
			VALUES ('old', '', 0, 3, 1, 253402300799999, 'pending', 1, 1)`,
	} {
		if _, err := p.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := postgres.New(ctx, p, postgres.Options{Schema: schema, ReadOnly: true}); err == nil || !strings.Contains(err.Error(), "predates") {
		t.Fatalf("read-only New on the old table = %v, want a message to migrate it", err)
	}
	for range 2 { // the second New finds nothing to do
		s, err := postgres.New(ctx, p, postgres.Options{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	s, err := postgres.New(ctx, p, postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if idx := jobIndexes(ctx, p, schema); idx != wantIndexes {
		t.Fatalf("indexes after migration: %v", idx)
	}
	if got, err := s.Claim(ctx, queue.DefaultQueue, 2, 1000, 5); err != nil || len(got) != 1 || got[0].ID != "old" || got[0].Queue != queue.DefaultQueue {
		t.Fatalf("claim after migration: %+v %v", got, err)
	}
}

// TestMigratesListingIndex: the tables of before the listing index (its
// stagger_jobs_by_state ordered IDs by the database's collation) and of
// before stagger_jobs_pending and stagger_jobs_leased (stagger_jobs_ready,
// both states, and stagger_jobs_list, every state) get the indexes of
// now, and listing and limited claims work.
func TestMigratesListingIndex(t *testing.T) {
	for _, old := range [][]string{
		{`stagger_jobs_list_unleased`, `CREATE INDEX stagger_jobs_by_state ON %s (queue, state, id)`},
		{`stagger_jobs_pending stagger_jobs_leased`, `CREATE INDEX stagger_jobs_ready ON %s (queue, available_at, id) WHERE state IN ('pending', 'leased')`},
		{`stagger_jobs_list_unleased`, `CREATE INDEX stagger_jobs_list ON %s (queue, state, id COLLATE "C")`},
	} {
		t.Run(strings.Fields(old[1])[2], func(t *testing.T) { testMigratesIndex(t, old[0], old[1]) })
	}
}

// testMigratesIndex replaces the indexes named in indexes (separated by
// spaces) by the older one def creates (with %s the table), migrates, and
// lists and claims.
func testMigratesIndex(t *testing.T, indexes, def string) {
	p, schema := migratedSchema(t)
	ctx := context.Background()
	table := `"` + schema + `".stagger_jobs`
	var stmts []string
	for _, name := range strings.Fields(indexes) {
		stmts = append(stmts, `DROP INDEX "`+schema+`".`+name)
	}
	for _, q := range append(stmts, fmt.Sprintf(def, table)) {
		if _, err := p.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	s, err := postgres.New(ctx, p, postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if idx := jobIndexes(ctx, p, schema); idx != wantIndexes {
		t.Fatalf("indexes after migration: %v", idx)
	}
	q, _ := queue.New(s, queue.Config{})
	for _, id := range []string{"a", "b"} {
		if _, _, err := q.Enqueue(ctx, queue.NewJob{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().UnixMilli() + 1000
	got, err := s.ClaimLimited(ctx, queue.DefaultQueue, queue.Limits{MaxInFlight: 1}, now, now+60000, 5)
	if err != nil || len(got) != 1 {
		t.Fatalf("limited claim: %v %v", got, err)
	}
	if got, err := s.ClaimLimited(ctx, queue.DefaultQueue, queue.Limits{MaxInFlight: 1}, now, now+60000, 5); err != nil || len(got) != 0 {
		t.Fatalf("limited claim with the one slot taken: %v %v", got, err)
	}
	out := []queue.Outcome{{ID: got[0].ID, Attempt: got[0].Attempts, State: queue.Done, Now: now}}
	if err := s.Record(ctx, out); err != nil || !out[0].Applied {
		t.Fatalf("record: %+v %v", out, err)
	}
	for state, want := range map[queue.State]int{queue.Done: 1, queue.Pending: 1, queue.Leased: 0} {
		if js, err := s.List(ctx, queue.DefaultQueue, state, "", 10); err != nil || len(js) != want {
			t.Errorf("List(%s) = %v, %v; want %d jobs", state, js, err, want)
		}
	}
}

// wantIndexes are the jobs table's indexes after a migration.
const wantIndexes = "stagger_jobs_finished stagger_jobs_leased stagger_jobs_list_unleased stagger_jobs_pending stagger_jobs_pkey"

// jobIndexes are the names of the jobs table's indexes in schema, in
// order, separated by spaces.
func jobIndexes(ctx context.Context, p *pgxpool.Pool, schema string) string {
	rows, _ := p.Query(ctx, `SELECT indexname FROM pg_indexes WHERE schemaname = $1 AND tablename = 'stagger_jobs' ORDER BY 1`, schema)
	idx, _ := pgx.CollectRows(rows, pgx.RowTo[string])
	return strings.Join(idx, " ")
}

// TestKeysInByteOrder: a new jobs table keeps its text keys in byte order
// (COLLATE "C", whatever the database's collation), so index inserts
// compare bytes rather than call strcoll; the other text columns keep the
// database's collation.
func TestKeysInByteOrder(t *testing.T) {
	p, schema := sharedPool(t), tempSchema(t)
	ctx := context.Background()
	s, err := postgres.New(ctx, p, postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rows, err := p.Query(ctx, `SELECT a.attname, coalesce(c.collname, '') FROM pg_attribute a
		LEFT JOIN pg_collation c ON c.oid = a.attcollation
		WHERE a.attrelid = $1::regclass AND a.atttypid = 'text'::regtype ORDER BY a.attname`, schema+".stagger_jobs")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for rows.Next() {
		var col, coll string
		if err := rows.Scan(&col, &coll); err != nil {
			t.Fatal(err)
		}
		got[col] = coll
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, col := range []string{"id", "queue", "state"} {
		if got[col] != "C" {
			t.Errorf("column %s: collation %q, want C", col, got[col])
		}
	}
	if got["last_error"] != "default" {
		t.Errorf("column last_error: collation %q, want the database's (default)", got["last_error"])
	}
}

// TestDocConvertsTable runs the statement docs/queue.md gives for
// converting a table made before byte-order keys, on such a table with
// jobs in it: the keys are then in "C", the jobs kept, and the store
// claims and completes them.
func TestDocConvertsTable(t *testing.T) {
	raw, err := os.ReadFile("../../docs/queue.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	start := strings.Index(doc, "```sql\nALTER TABLE stagger_jobs")
	if start < 0 {
		t.Fatal("docs/queue.md has no ```sql block with ALTER TABLE stagger_jobs")
	}
	body := doc[start+len("```sql\n"):]
	stmt := body[:strings.Index(body, "```")]
	p, schema := migratedSchema(t)
	ctx := context.Background()
	keysInDatabaseCollation(t, p, schema)
	s, err := postgres.New(ctx, p, postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	q, _ := queue.New(s, queue.Config{})
	for _, id := range []string{"b", "a"} {
		if _, _, err := q.Enqueue(ctx, queue.NewJob{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := p.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, `SET search_path TO "`+schema+`"`)
	if err == nil {
		_, err = conn.Exec(ctx, stmt)
	}
	conn.Exec(ctx, `RESET search_path`)
	conn.Release()
	if err != nil {
		t.Fatalf("the documented statement: %v\n%s", err, stmt)
	}
	var colls string
	if err := p.QueryRow(ctx, `SELECT string_agg(a.attname || '=' || c.collname, ' ' ORDER BY a.attname) FROM pg_attribute a
		JOIN pg_collation c ON c.oid = a.attcollation
		WHERE a.attrelid = $1::regclass AND a.attname IN ('id', 'queue', 'state')`, schema+".stagger_jobs").Scan(&colls); err != nil {
		t.Fatal(err)
	}
	if colls != "id=C queue=C state=C" {
		t.Fatalf("collations after the statement: %s", colls)
	}
	now := time.Now().UnixMilli() + 1000
	got, err := s.Claim(ctx, queue.DefaultQueue, now, now+60000, 5)
	if err != nil || len(got) != 2 {
		t.Fatalf("claim after converting: %v %v", got, err)
	}
	out := []queue.Outcome{{ID: got[0].ID, Attempt: got[0].Attempts, State: queue.Done, Now: now}, {ID: got[1].ID, Attempt: got[1].Attempts, State: queue.Done, Now: now}}
	if err := s.Record(ctx, out); err != nil || !out[0].Applied || !out[1].Applied {
		t.Fatalf("record after converting: %+v %v", out, err)
	}
}

// migratedSchema is a new schema holding the store's tables as New makes
// them, with no store open on it, for a test that changes them into those
// of an older version.
func migratedSchema(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	p, schema := sharedPool(t), tempSchema(t)
	s, err := postgres.New(context.Background(), p, postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	return p, schema
}

// keysInDatabaseCollation makes the jobs table in schema one of before
// byte-order keys: id, queue and state in the database's collation.
func keysInDatabaseCollation(t testing.TB, p *pgxpool.Pool, schema string) {
	t.Helper()
	if _, err := p.Exec(context.Background(), `ALTER TABLE "`+schema+`".stagger_jobs
		ALTER COLUMN id TYPE text COLLATE "default",
		ALTER COLUMN queue TYPE text COLLATE "default",
		ALTER COLUMN state TYPE text COLLATE "default"`); err != nil {
		t.Fatal(err)
	}
}

// TestLastClaimsBounded: a Store keeps the last claim's size of at most
// lastClaimsMax queue names (3 here); claims from the names past them
// still claim every job, sized as they come.
func TestLastClaimsBounded(t *testing.T) {
	defer postgres.SetLastClaimsMax(postgres.SetLastClaimsMax(3))
	s := newStore(t)
	ctx := context.Background()
	for i := range 5 {
		name := fmt.Sprintf("tenant-%d", i)
		var jobs []queue.Job
		for k := range 3 {
			jobs = append(jobs, queue.Job{ID: fmt.Sprintf("%s-%d", name, k), Queue: name, Payload: []byte{}, MaxAttempts: 1,
				AvailableAt: 1, Deadline: queue.MaxTime, State: queue.Pending})
		}
		if _, err := s.Insert(ctx, jobs); err != nil {
			t.Fatal(err)
		}
		got, err := s.Claim(ctx, name, 10, 1000, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(jobs) {
			t.Fatalf("%s: claimed %d jobs, want %d", name, len(got), len(jobs))
		}
	}
	if n := s.LastClaimsKept(); n != 3 {
		t.Fatalf("kept the last claim of %d queue names, want 3", n)
	}
}
