// Package queuesql is what the SQL stores of package queue (queue/sqlite,
// queue/postgres) share and adopters of the queue do not need: the stats
// query and the reading of its rows, kept in one place so that every store
// counts the same way, and the predicate of the listing index.
package queuesql

import (
	"strings"

	"github.com/staggerhq/stagger/queue"
)

// Rows is what the result rows of database/sql and pgx share.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// StatsSQL is the stats query of the SQL stores on table: the groups
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

// NotDone is the predicate of the SQL stores' listing index,
// stagger_jobs_not_done (queue, state, id): every state but done. Done
// jobs, the bulk of a table that keeps them for retention, are left out so
// that a job's completion inserts into no index but the primary key and
// the finished-jobs index retention reads (stagger_jobs_finished); a claim
// still finds its leased row here (fleet limits count them). A query that
// is to use the index states the predicate as written here: SQLite uses a
// partial index only for a WHERE clause that holds its terms, PostgreSQL
// only when it can prove it (a generic plan cannot from state = $1).
const NotDone = `state IN ('pending', 'leased', 'dead')`

// ListState is the condition a store's List adds for state: NotDone, so
// that the listing index serves it, for every state but done (listed in
// primary-key order).
func ListState(state queue.State) string {
	if state == queue.Done {
		return ""
	}
	return " AND " + NotDone
}
