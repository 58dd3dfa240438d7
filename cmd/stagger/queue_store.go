package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/queue/sqlite"
)

// isPostgres reports whether a --db value names a PostgreSQL server.
func isPostgres(db string) bool {
	return strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://")
}

// redactDSN hides the password of a URL-style DSN.
func redactDSN(db string) string {
	if !isPostgres(db) {
		return db
	}
	u, err := url.Parse(db)
	if err != nil {
		return "postgres://(unparsable DSN)"
	}
	return u.Redacted()
}

// redactErr replaces any occurrence of the DSN's password in err's message.
func redactErr(db string, err error) error {
	if err == nil || !isPostgres(db) {
		return err
	}
	msg := err.Error()
	if u, perr := url.Parse(db); perr == nil {
		if p, ok := u.User.Password(); ok && p != "" {
			msg = strings.ReplaceAll(msg, p, "xxxxx")
		}
	}
	msg = strings.ReplaceAll(msg, db, redactDSN(db))
	return fmt.Errorf("%s", msg)
}

// storeOptions are the store settings given on the command line.
type storeOptions struct {
	sqliteSync string
}

// openStore opens the store named by --db: a postgres:// URL or an SQLite
// file path.
func openStore(ctx context.Context, db string, o storeOptions) (queue.Store, func() error, error) {
	if db == "" {
		return nil, nil, fmt.Errorf("--db must not be empty")
	}
	if isPostgres(db) {
		s, err := openPostgres(ctx, db)
		if err != nil {
			return nil, nil, fmt.Errorf("--db %s: %w", redactDSN(db), redactErr(db, err))
		}
		return s, func() error { s.Close(); return nil }, nil
	}
	s, err := sqlite.Open(ctx, db, sqlite.Options{Synchronous: o.sqliteSync})
	if err != nil {
		return nil, nil, fmt.Errorf("--db %s: %w", db, err)
	}
	return s, s.Close, nil
}
