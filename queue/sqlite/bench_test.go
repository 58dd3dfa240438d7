package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/staggerhq/stagger/queue/queuetest"
	"github.com/staggerhq/stagger/queue/sqlite"
)

// BenchmarkRecordAndClaim is a busy Worker's turn on SQLite
// (synchronous=NORMAL): record the outcomes of the 4 jobs claimed last
// turn (done) and claim 4 more, in one transaction, with a backlog of due
// jobs. One op is one turn. index=finished is the store as it is;
// index=none is the same store without the finished-jobs index that
// retention reads (stagger_jobs_finished, dropped after the open), to
// measure what maintaining it costs the turn; run the two in alternating
// rounds (-count 1, several times) to compare them under the same load.
func BenchmarkRecordAndClaim(b *testing.B) {
	for _, drop := range []bool{false, true} {
		name := "index=finished"
		if drop {
			name = "index=none"
		}
		b.Run(name, func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "q.db")
			s, err := sqlite.Open(context.Background(), path, sqlite.Options{Synchronous: "NORMAL"})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if drop {
				db, err := sql.Open("sqlite", "file:"+path)
				if err != nil {
					b.Fatal(err)
				}
				_, err = db.Exec(`DROP INDEX stagger_jobs_finished`)
				db.Close()
				if err != nil {
					b.Fatal(err)
				}
			}
			queuetest.BenchRecordAndClaim(b, s)
		})
	}
}
