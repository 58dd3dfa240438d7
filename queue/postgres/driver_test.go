package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/queue/postgres"
	"github.com/staggerhq/stagger/queue/queuetest"
	"github.com/staggerhq/stagger/retry/drivertest"
)

// TestDriverConformance: the queue on PostgreSQL runs the retry drivers'
// conformance suite, one schema per case.
func TestDriverConformance(t *testing.T) {
	p := sharedPool(t)
	drivertest.Run(t, queuetest.Driver("queue.RunOnce (PostgreSQL)", func() (queue.Store, func(), error) {
		b := make([]byte, 6)
		rand.Read(b)
		schema := "stagger_d_" + hex.EncodeToString(b)
		s, err := postgres.New(context.Background(), p, postgres.Options{Schema: schema})
		if err != nil {
			return nil, nil, err
		}
		return s, func() {
			s.Close()
			p.Exec(context.Background(), `DROP SCHEMA "`+schema+`" CASCADE`)
		}, nil
	}))
}
