package main

import (
	"context"

	"github.com/staggerhq/stagger/queue/postgres"
)

// openPostgres opens the PostgreSQL store named by a postgres:// URL.
func openPostgres(ctx context.Context, dsn string) (*postgres.Store, error) {
	return postgres.Open(ctx, dsn, postgres.Options{})
}
