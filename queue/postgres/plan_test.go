package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/queue/postgres"
)

// TestHotPathPlans checks the plans of the claim and of the outcome update
// on a new table with a backlog, the case where the planner has no useful
// statistics (the table was analyzed empty at migration; autovacuum has
// not run): the claim must walk the due index in order (no sort of every
// due row), and the outcome update must look jobs up by primary key (no
// scan of the state or due index).
func TestHotPathPlans(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	pool := s.Pool()
	const now, n = int64(1_000_000), 3000
	jobs := make([]queue.Job, n)
	for i := range jobs {
		jobs[i] = queue.Job{ID: fmt.Sprintf("job-%05d", i), Payload: []byte("{}"), MaxAttempts: 5,
			AvailableAt: now - n + int64(i), Deadline: now + 1_000_000, State: queue.Pending, CreatedAt: now, UpdatedAt: now}
	}
	if _, err := s.Insert(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	claimed, err := s.Claim(ctx, queue.DefaultQueue, now, now+1000, 4)
	if err != nil || len(claimed) != 4 {
		t.Fatal(claimed, err)
	}
	outs := make([]queue.Outcome, len(claimed))
	for i, j := range claimed {
		outs[i] = queue.Outcome{ID: j.ID, Attempt: j.Attempts, State: queue.Done, Now: now}
	}
	args := postgres.RecordArgs(outs)

	explain := func(prologue, sql string, args ...any) string {
		t.Helper()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if prologue != "" {
			if _, err := tx.Exec(ctx, prologue); err != nil {
				t.Fatal(err)
			}
		}
		rows, err := tx.Query(ctx, `EXPLAIN `+sql, args...)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(lines, "\n")
	}
	plan := explain(postgres.ClaimAlone, s.ClaimSQL(), now, now+1000, 4, queue.DefaultQueue)
	if !dueInOrder(plan) {
		t.Errorf("the claim does not walk the due index in order:\n%s", plan)
	}
	if !strings.Contains(plan, "Tid Scan") || strings.Contains(plan, "stagger_jobs_pkey") {
		t.Errorf("the claim does not update the locked rows by tuple ID:\n%s", plan)
	}
	// One scan of all the tuple IDs, not one a job (a nested loop): each
	// TID scan asks the kernel for the table's size.
	if strings.Contains(plan, "Nested Loop") || !strings.Contains(plan, "Hash Join") {
		t.Errorf("the claim does not scan its tuple IDs at once:\n%s", plan)
	}
	// The same as a generic plan (a statement pgx prepared and ran more
	// than five times), for a claim of 1,000.
	lines := explainPrepared(t, pool, "force_generic_plan", postgres.ClaimAlone, s.ClaimSQL(),
		"bigint, bigint, int, text", fmt.Sprintf("%d, %d, 1000, 'default'", now, now+1000))
	if plan := strings.Join(lines, "\n"); strings.Contains(plan, "Nested Loop") || !strings.Contains(plan, "Tid Scan") ||
		!dueInOrder(plan) {
		t.Errorf("the claim's generic plan does not scan its tuple IDs at once:\n%s", plan)
	}
	// The listing index serves List's dead listing, also as a generic plan
	// (a prepared statement run more than five times); stagger_jobs_leased
	// serves the leased listing and the fleet limits' count of live
	// leases, a range of it.
	listing := func(st queue.State) string {
		sql, _ := s.SearchSQL(queue.Search{Queue: queue.DefaultQueue, States: []queue.State{st}, After: "a", Limit: 10})
		return sql
	}
	for _, c := range []struct{ name, sql, types, args, index string }{
		{"dead listing", listing(queue.Dead), "text, int, text", "'default', 10, 'a'", "stagger_jobs_list_unleased"},
		{"leased listing", listing(queue.Leased), "text, int, text", "'default', 10, 'a'", "stagger_jobs_leased"},
		{"in-flight count", s.InFlightSQL(), "text, bigint", fmt.Sprintf("'default', %d", now), "stagger_jobs_leased"},
	} {
		for _, mode := range []string{"auto", "force_generic_plan"} {
			lines := explainPrepared(t, pool, mode, "", c.sql, c.types, c.args)
			plan := strings.Join(lines, "\n")
			if !strings.Contains(plan, "Index Scan using "+c.index) || strings.Contains(plan, "Seq Scan") {
				t.Errorf("the %s (plan_cache_mode %s) does not use %s:\n%s", c.name, mode, c.index, plan)
			}
			if c.name == "in-flight count" && !strings.Contains(plan, "(available_at >") {
				t.Errorf("the in-flight count (plan_cache_mode %s) is not a range of live leases:\n%s", mode, plan)
			}
		}
	}
	// A turn of many outcomes (a drain's, 1,000 at 512 workers): in a
	// custom plan the planner knows the arrays' length and, left to
	// itself, hashes the whole table; after ClaimPlan it must still look
	// each job up by primary key.
	big := make([]queue.Outcome, 1000)
	for i := range big {
		big[i] = queue.Outcome{ID: fmt.Sprintf("job-%05d", i), Attempt: 1, State: queue.Done, Now: now}
	}
	for name, c := range map[string]struct {
		sql  string
		args []any
	}{
		"outcome":   {s.RecordSQL(), postgres.RecordArgs(big)},
		"done":      {s.DoneSQL(), postgres.DoneArgs(big)},
		"heartbeat": {s.ExtendSQL(), []any{postgres.DoneArgs(big)[0], postgres.DoneArgs(big)[1], now + 2000, now}},
	} {
		plan = explain(postgres.ClaimPlan, c.sql, c.args...)
		if strings.Contains(plan, "Seq Scan") || strings.Contains(plan, "Hash Join") || strings.Contains(plan, "Merge Join") ||
			!strings.Contains(plan, "stagger_jobs_pkey") {
			t.Errorf("the %s update of a big turn does not look jobs up by primary key:\n%s", name, plan)
		}
	}
	for name, sql := range map[string]string{"outcome": s.RecordSQL(), "heartbeat": s.ExtendSQL()} {
		a := args
		if name == "heartbeat" {
			a = []any{args[0], args[1], now + 2000, now}
		}
		plan = explain("", sql, a...)
		if strings.Contains(plan, "stagger_jobs_list") || strings.Contains(plan, "stagger_jobs_pending") || strings.Contains(plan, "stagger_jobs_leased") ||
			!strings.Contains(plan, "stagger_jobs_pkey") {
			t.Errorf("the %s update does not look jobs up by primary key:\n%s", name, plan)
		}
	}
}

// dueInOrder reports whether a claim's plan walks its two due ranges of
// stagger_jobs_leased and stagger_jobs_pending in index order:
// the only sort is of the rows they locked, never of every due row.
func dueInOrder(plan string) bool {
	if strings.Count(plan, "Index Scan using stagger_jobs_leased") != 1 || strings.Count(plan, "Index Scan using stagger_jobs_pending") != 1 {
		return false
	}
	for _, l := range strings.Split(plan, "\n") {
		if strings.Contains(l, "Sort Key") && strings.Contains(l, "available_at") {
			return false
		}
	}
	return true
}

// explainPrepared prepares sql with parameter types in a transaction (after
// prologue, unless empty) with plan_cache_mode mode, and returns the plan
// of its execution with args.
func explainPrepared(t *testing.T, pool *pgxpool.Pool, mode, prologue, sql, types, args string) []string {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var lines []string
	stmts := []string{`SET LOCAL plan_cache_mode = ` + mode, `PREPARE explained(` + types + `) AS ` + sql}
	if prologue != "" {
		stmts = append([]string{prologue}, stmts...)
	}
	for _, q := range stmts {
		if _, err = tx.Exec(ctx, q, pgx.QueryExecModeSimpleProtocol); err != nil {
			break
		}
	}
	if err == nil {
		rows, qerr := tx.Query(ctx, `EXPLAIN EXECUTE explained(`+args+`)`, pgx.QueryExecModeSimpleProtocol)
		if lines, err = pgx.CollectRows(rows, pgx.RowTo[string]); qerr != nil {
			err = qerr
		}
		tx.Exec(ctx, `DEALLOCATE explained`, pgx.QueryExecModeSimpleProtocol) // PREPARE outlives the transaction
	}
	if err != nil {
		t.Fatal(err)
	}
	return lines
}
