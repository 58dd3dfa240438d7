package main

import (
	"context"

	"github.com/staggerhq/stagger/queue/postgres"
)

// maxDBWait bounds queue work's --db-wait.
const maxDBWait = postgres.MaxStartWait

// openPostgres opens the PostgreSQL store named by dsn; readOnly creates
// and migrates nothing. A server down or not ready at start is waited for
// as o says (queue work).
func openPostgres(ctx context.Context, dsn string, readOnly bool, o storeOptions) (*postgres.Store, error) {
	return postgres.Open(ctx, dsn, postgres.Options{ReadOnly: readOnly, StartWait: o.startWait, OnStartRetry: o.onWait})
}
