// Package queuesql is what the SQL stores of package queue (queue/sqlite,
// queue/postgres) share and adopters of the queue do not need: the stats
// query and the reading of its rows, kept in one place so that every store
// counts the same way.
package queuesql

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/staggerhq/stagger/queue"
)

// Rows is what the result rows of database/sql and pgx share.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// StatsSQL is the stats query of the SQL stores on table (a table, or a
// subquery with an alias that reads the same columns): the groups
// ScanStats reads, with mark ("$" for PostgreSQL, "?" for SQLite) before
// the numbered parameters: 1 is now, 2 the queue's name when one is true
// (otherwise every queue is counted). Kept in one place so that every store
// counts a job due to die as Bury would move it.
func StatsSQL(table, mark string, one bool) string {
	where := ""
	if one { // a plan that uses the queue's indexes
		where = " WHERE queue = $2"
	}
	return strings.ReplaceAll(`SELECT queue, state, dead_reason, available_at <= $1,
		(state = 'pending' OR (state = 'leased' AND available_at <= $1)) AND (attempts >= max_attempts OR deadline <= $1),
		count(*), min(available_at)
		FROM `+table+where+` GROUP BY 1, 2, 3, 4, 5`, "$", mark)
}

// QueueStats is the Stats of the named queue in all (the counts of
// ScanStats) at now: zero counts when the queue holds no job.
func QueueStats(all map[string]queue.Stats, name string, now int64) queue.Stats {
	st := all[name]
	st.Now = now
	return st
}

// ScanStats reads the rows of a stats query into Stats by queue, for SQL
// stores: each row is (queue, state, dead_reason, due, dying, count,
// smallest available_at) of one group, as Stats.Add takes them.
func ScanStats(rows Rows, now int64) (map[string]queue.Stats, error) {
	out := map[string]queue.Stats{}
	for rows.Next() {
		var q, state, reason string
		var due, dying bool
		var n, oldest int64
		if err := rows.Scan(&q, &state, &reason, &due, &dying, &n, &oldest); err != nil {
			return out, err
		}
		st := out[q]
		st.Now = now
		st.Add(queue.State(state), queue.DeadReason(reason), due, dying, n, oldest)
		out[q] = st
	}
	return out, rows.Err()
}

// SearchSQL is the query of queue.AdminStore.Search on table (columns
// cols) and its arguments, for PostgreSQL (pg: parameters $n, IDs
// compared in byte order with COLLATE "C", which the listing index
// stagger_jobs_list_unleased also uses) or SQLite (parameters ?n; BINARY
// text order is byte order). One state is one ordered scan of the queue's
// (queue, state, id) index (on PostgreSQL leased jobs are not in it: the
// queue's leases, as many as its jobs in flight, are read and sorted);
// several are one such scan each, limited,
// merged by a UNION ALL and cut to the limit again, so that the first
// page of a big queue never sorts the queue. cols must name payload
// second (after id), as the stores' column lists do: s.NoPayload reads
// NULL in its place.
func SearchSQL(table, cols string, pg bool, s queue.Search) (string, []any) {
	idc := "id"
	if pg {
		idc = `id COLLATE "C"`
	}
	if s.NoPayload {
		null := "NULL"
		if pg {
			null = "NULL::bytea"
		}
		if !strings.HasPrefix(cols, "id, payload, ") {
			panic("queuesql: the columns do not start with id, payload: " + cols)
		}
		cols = "id, " + null + ", " + strings.TrimPrefix(cols, "id, payload, ")
	}
	args := []any{s.Queue, s.Limit}
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	var where strings.Builder
	if s.Reason != "" {
		fmt.Fprintf(&where, " AND dead_reason = %s", arg(string(s.Reason)))
	}
	if s.After != "" {
		fmt.Fprintf(&where, " AND %s > %s", idc, arg(s.After))
	}
	if s.IDPrefix != "" {
		fmt.Fprintf(&where, " AND %s >= %s", idc, arg(s.IDPrefix))
		if end, ok := PrefixEnd(s.IDPrefix); ok {
			fmt.Fprintf(&where, " AND %s < %s", idc, arg(end))
		}
	}
	var before, after string
	if s.SinceBefore != 0 {
		before = arg(s.SinceBefore)
	}
	if s.SinceAfter != 0 {
		after = arg(s.SinceAfter)
	}
	parts := make([]string, 0, len(s.States))
	var with []string
	for i, st := range s.States {
		since := "created_at"
		finished := st == queue.Done || st == queue.Dead
		if finished {
			since = "finished_at"
		}
		var span string
		if before != "" {
			span += " AND " + since + " < " + before
		}
		if after != "" {
			span += " AND " + since + " > " + after
		}
		w := where.String() + span
		walk := fmt.Sprintf(`SELECT %s FROM %s WHERE queue = $1 AND state = '%s'%s ORDER BY %s LIMIT $2`,
			cols, table, stateLiteral(st), w, idc)
		if pg && st == queue.Leased && span != "" {
			// PostgreSQL keeps leased jobs out of the listing index: an
			// age of leased jobs reads the queue's leases (as many as its
			// jobs in flight, a range of stagger_jobs_leased) and sorts
			// them, rather than walk every job's ID, filtering (OFFSET 0
			// keeps the planner from walking the ID order instead).
			parts = append(parts, fmt.Sprintf(`SELECT * FROM (SELECT * FROM (SELECT %s FROM %s WHERE queue = $1 AND state = 'leased'%s OFFSET 0) m ORDER BY %s LIMIT $2) s%d`,
				cols, table, w, idc, i))
			continue
		}
		if !pg || !finished || span == "" {
			parts = append(parts, fmt.Sprintf(`SELECT * FROM (%s) s%d`, walk, i))
			continue
		}
		// A done or dead job's age is a range of stagger_jobs_finished
		// (state, finished_at). When that range holds fewer than
		// SpanRows jobs (of every queue), its jobs are read there and
		// sorted by ID (OFFSET 0 keeps the planner from walking the ID
		// order instead); otherwise the ID order is walked, filtering.
		// The count, an index-only scan stopped at SpanRows, runs once
		// (a materialized CTE) and each branch's one-time filter skips
		// the branch not taken.
		with = append(with, fmt.Sprintf(`span%d AS MATERIALIZED (SELECT count(*) < %d AS few FROM (SELECT 1 FROM %s WHERE state = '%s'%s LIMIT %d) c)`,
			i, SpanRows, table, stateLiteral(st), span, SpanRows))
		few := fmt.Sprintf(`(SELECT few FROM span%d)`, i)
		parts = append(parts, fmt.Sprintf(`SELECT * FROM ((SELECT * FROM (SELECT %s FROM %s WHERE queue = $1 AND state = '%s'%s OFFSET 0) m WHERE %s ORDER BY %s LIMIT $2)
			UNION ALL (%s)) s%d`,
			cols, table, stateLiteral(st), w, few, idc, strings.Replace(walk, " ORDER BY ", " AND NOT "+few+" ORDER BY ", 1), i))
	}
	q := parts[0]
	if len(parts) > 1 {
		q = `SELECT * FROM (` + strings.Join(parts, " UNION ALL ") + `) u ORDER BY ` + idc + ` LIMIT $2`
	}
	if len(with) > 0 {
		q = "WITH " + strings.Join(with, ", ") + " " + q
	}
	if !pg {
		q = strings.ReplaceAll(q, "$", "?")
	}
	return q, args
}

// SpanRows is how many done or dead jobs an age filter's range of
// finished times may hold for PostgreSQL's search to read them all by
// that range and sort them by ID, rather than walk the ID order.
const SpanRows = 20000

// stateLiteral is st as an SQL literal: only the four states are ever
// written into a query (queue.Search's states are validated).
func stateLiteral(st queue.State) string {
	switch st {
	case queue.Pending, queue.Leased, queue.Done, queue.Dead:
		return string(st)
	}
	panic("queuesql: not a state: " + string(st))
}

// PrefixEnd is the smallest string greater, in byte order, than every
// string that starts with prefix (a valid UTF-8 string): the exclusive
// upper bound of an index range scan for the prefix. It is itself valid
// UTF-8 (PostgreSQL's text takes nothing else); ok is false when there
// is no such string (the prefix is all U+10FFFF).
func PrefixEnd(prefix string) (string, bool) {
	rs := []rune(prefix)
	for i := len(rs) - 1; i >= 0; i-- {
		switch r := rs[i]; {
		case r == utf8.MaxRune:
			continue
		case r == 0xD7FF: // the surrogates are not runes of UTF-8
			rs[i] = 0xE000
		default:
			rs[i] = r + 1
		}
		return string(rs[:i+1]), true
	}
	return "", false
}
