package main

import (
	"context"

	"github.com/staggerhq/stagger/queue/postgres"
)

// openPostgres opens the PostgreSQL store named by dsn; readOnly creates
// and migrates nothing.
func openPostgres(ctx context.Context, dsn string, readOnly bool) (*postgres.Store, error) {
	return postgres.Open(ctx, dsn, postgres.Options{ReadOnly: readOnly})
}
