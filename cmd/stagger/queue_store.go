package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
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

// openMode says what opening a store may do to it.
type openMode int

const (
	// openCreate creates the database and migrates its schema (commands
	// that add or run jobs).
	openCreate openMode = iota
	// openExisting needs an existing SQLite file and migrates its schema
	// (commands that change jobs that must already be there).
	openExisting
	// openReadOnly neither creates nor migrates anything (stats, dead,
	// show).
	openReadOnly
)

// storeOptions are the store settings given on the command line.
type storeOptions struct {
	sqliteSync string
	mode       openMode
}

// openStore opens the store named by --db: a postgres:// URL or an SQLite
// file path. An error wrapping queue.ErrInvalid is a bad --db value; any
// other is a store that cannot be opened.
func openStore(ctx context.Context, db string, o storeOptions) (queue.Store, func() error, error) {
	if db == "" {
		return nil, nil, fmt.Errorf("%w: --db must not be empty", queue.ErrInvalid)
	}
	if isPostgres(db) {
		s, err := openPostgres(ctx, db, o.mode == openReadOnly)
		if err != nil {
			return nil, nil, fmt.Errorf("--db %s: %w", redactDSN(db), redactErr(db, err))
		}
		return s, func() error { s.Close(); return nil }, nil
	}
	if o.mode == openExisting {
		if _, err := os.Stat(db); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, nil, fmt.Errorf("--db %s: the file does not exist (nothing was created)", db)
			}
			return nil, nil, fmt.Errorf("--db %s: %w", db, err)
		}
	}
	s, err := sqlite.Open(ctx, db, sqlite.Options{Synchronous: o.sqliteSync, ReadOnly: o.mode == openReadOnly})
	if err != nil {
		return nil, nil, fmt.Errorf("--db %s: %w", db, err)
	}
	return s, s.Close, nil
}
