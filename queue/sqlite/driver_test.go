package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/queue/queuetest"
	"github.com/staggerhq/stagger/queue/sqlite"
	"github.com/staggerhq/stagger/retry/drivertest"
)

// TestDriverConformance: the queue on SQLite runs the retry drivers'
// conformance suite, one database file per case.
func TestDriverConformance(t *testing.T) {
	dir := t.TempDir()
	var n atomic.Int64
	drivertest.Run(t, queuetest.Driver("queue.RunOnce (SQLite)", func() (queue.Store, func(), error) {
		path := filepath.Join(dir, fmt.Sprintf("case%d.db", n.Add(1)))
		s, err := sqlite.Open(context.Background(), path, sqlite.Options{Synchronous: "NORMAL"})
		if err != nil {
			return nil, nil, err
		}
		return s, func() { s.Close() }, nil
	}))
}
