// Package queuesql is what the SQL stores of package queue (queue/sqlite,
// queue/postgres) share and adopters of the queue do not need: the stats
// query and the reading of its rows, kept in one place so that every store
// counts the same way.
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
