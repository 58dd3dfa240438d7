package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/staggerhq/stagger/queue/queuetest"
	"github.com/staggerhq/stagger/queue/sqlite"
)

// BenchmarkRecordAndClaim is a busy Worker's turn on SQLite
// (synchronous=NORMAL): record the outcomes of the 4 jobs claimed last
// turn (done) and claim 4 more, in one transaction, with a backlog of due
// jobs. One op is one turn.
func BenchmarkRecordAndClaim(b *testing.B) {
	s, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "q.db"), sqlite.Options{Synchronous: "NORMAL"})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	queuetest.BenchRecordAndClaim(b, s)
}
