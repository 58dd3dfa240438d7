package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/staggerhq/stagger/queue/queuetest"
	"github.com/staggerhq/stagger/queue/sqlite"
)

// BenchmarkInsert enqueues in transactions of 100 jobs on SQLite
// (synchronous=NORMAL). One op is one job.
func BenchmarkInsert(b *testing.B) {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "q.db"), sqlite.Options{Synchronous: "NORMAL"})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	queuetest.BenchInsert(b, s)
}
