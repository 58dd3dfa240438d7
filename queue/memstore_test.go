package queue_test

import (
	"testing"

	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/queue/queuetest"
)

func TestMemoryStoreConformance(t *testing.T) {
	queuetest.Run(t, func(t *testing.T) queue.Store { return queue.NewMemoryStore() })
}

func TestMemoryInboxConformance(t *testing.T) {
	queuetest.RunInbox(t, func(t *testing.T) queue.Inbox { return queue.NewMemoryInbox() })
}
