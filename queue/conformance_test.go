package queue_test

import (
	"testing"

	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/queue/queuetest"
	"github.com/staggerhq/stagger/retry/drivertest"
)

// TestDriverConformance: the queue on a MemoryStore runs the retry
// drivers' conformance suite (see queuetest.Driver).
func TestDriverConformance(t *testing.T) {
	drivertest.Run(t, queuetest.Driver("queue.RunOnce (MemoryStore)", func() (queue.Store, func(), error) {
		return queue.NewMemoryStore(), func() {}, nil
	}))
}
