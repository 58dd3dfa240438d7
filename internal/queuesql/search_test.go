package queuesql

import (
	"strings"
	"testing"

	"github.com/staggerhq/stagger/queue"
)

// TestSearchSQLLeasedAge: on PostgreSQL, whose listing index leaves leased
// jobs out, an age of leased jobs reads the queue's leases behind an
// OFFSET 0 fence and sorts them: on a table of 1,000,000 jobs, 2 % leased,
// the planner otherwise walks the primary key's ID order through every job
// for the newest hour's leases (154 ms a page against 31–35 ms,
// BenchmarkSearchFirstPage in queue/postgres). Without an age, and on
// SQLite, whose listing index holds every state, the leased jobs are a
// walk in ID order like any state's.
func TestSearchSQLLeasedAge(t *testing.T) {
	const cols = "id, payload, state"
	for _, c := range []struct {
		pg     bool
		s      queue.Search
		fenced bool
	}{
		{true, queue.Search{Queue: "q", States: []queue.State{queue.Leased}, SinceAfter: 5, Limit: 10}, true},
		{true, queue.Search{Queue: "q", States: queue.AllStates, SinceBefore: 5, Limit: 10}, true},
		{true, queue.Search{Queue: "q", States: []queue.State{queue.Leased}, Limit: 10}, false},
		{false, queue.Search{Queue: "q", States: []queue.State{queue.Leased}, SinceAfter: 5, Limit: 10}, false},
	} {
		text, _ := SearchSQL("jobs", cols, c.pg, c.s)
		fence := `state = 'leased'`
		i := strings.Index(text, fence)
		if i < 0 {
			t.Fatalf("%+v: no leased part in %s", c, text)
		}
		rest := text[i:]
		if end := strings.Index(rest, ")"); end >= 0 {
			rest = rest[:end]
		}
		if got := strings.HasSuffix(rest, "OFFSET 0"); got != c.fenced {
			t.Errorf("pg=%v %+v: leased part fenced = %v, want %v:\n%s", c.pg, c.s, got, c.fenced, text)
		}
	}
}
