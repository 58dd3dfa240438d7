package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/queue/postgres"
	"github.com/staggerhq/stagger/queue/queuetest"
	"github.com/staggerhq/stagger/retry/drivertest"
)

// TestDriverConformance: the queue on PostgreSQL runs the retry drivers'
// conformance suite, one schema per case. Each case runs in a
// testing/synctest bubble, so it opens a pool of its own inside it: a pool
// shared with code outside the bubble would make its connections (and
// their WaitGroup) from two bubbles, which the runtime refuses.
func TestDriverConformance(t *testing.T) {
	cfg := sharedPool(t).Config() // skips (fails under CI=true) without a server
	cfg.MaxConns, cfg.MinConns = 4, 0
	drivertest.Run(t, queuetest.Driver("queue.RunOnce (PostgreSQL)", func() (queue.Store, func(), error) {
		ctx := context.Background()
		p, err := pgxpool.NewWithConfig(ctx, cfg.Copy())
		if err != nil {
			return nil, nil, err
		}
		b := make([]byte, 6)
		rand.Read(b)
		schema := "stagger_d_" + hex.EncodeToString(b)
		s, err := postgres.New(ctx, p, postgres.Options{Schema: schema})
		if err != nil {
			p.Close()
			return nil, nil, err
		}
		return s, func() {
			s.Close()
			p.Exec(ctx, `DROP SCHEMA "`+schema+`" CASCADE`)
			p.Close()
		}, nil
	}))
}
