package postgres_test

import (
	"testing"

	"github.com/staggerhq/stagger/queue/queuetest"
)

// BenchmarkInsert enqueues in transactions of 100 jobs on PostgreSQL. One
// op is one job.
func BenchmarkInsert(b *testing.B) { queuetest.BenchInsert(b, newStore(b)) }
