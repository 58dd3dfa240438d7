package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strings"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/staggerhq/stagger/internal/redact"
	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/queue/sqlite"
)

// libpqKeywords are the keywords of a PostgreSQL key=value connection
// string that say where and as whom to connect; a key=value --db names at
// least one.
var libpqKeywords = map[string]bool{
	"host": true, "hostaddr": true, "port": true, "dbname": true, "user": true, "password": true,
	"passfile": true, "service": true, "sslmode": true, "sslpassword": true,
}

var (
	// dbScheme matches a leading scheme and colon ("postgres:", "file:").
	dbScheme = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]*):`)
	// dbKeyword matches a key=value pair's key.
	dbKeyword = regexp.MustCompile(`(?:^|\s)([A-Za-z_][A-Za-z0-9_.-]*)\s*=`)
	// pgPrefix matches a value that starts like a PostgreSQL URL whose
	// "://" is mistyped ("postgres//h", "pg;//h"), not a file named
	// postgres.db or pg-jobs.db.
	pgPrefix = regexp.MustCompile(`(?i)^(postgres(ql)?|pgsql|pg)(//|[^A-Za-z0-9._/-])`)
	// driveLetter matches a Windows path's drive ("C:\", "C:/").
	driveLetter = regexp.MustCompile(`^[A-Za-z]:[\\/]`)
)

// shownSchemes are schemes an error may name: they say what was mistyped
// and cannot be a password.
var shownSchemes = map[string]bool{
	"pg": true, "pgsql": true, "postgre": true, "postgress": true, "postgresq": true, "psql": true, "postgis": true,
	"amqp": true, "amqps": true, "nats": true, "tls": true, "redis": true, "rediss": true, "kafka": true,
	"http": true, "https": true, "mysql": true, "file": true, "sqlite": true, "sqlite3": true, "jdbc": true,
}

// errDB is a --db value that is neither a PostgreSQL connection string nor
// a plain SQLite path; its messages never repeat the value (it may hold a
// password).
func errDB(format string, a ...any) error {
	return &dbError{"--db " + fmt.Sprintf(format, a...) + " (the value is not repeated: it may hold a password)"}
}

// dbError is a bad --db value: errors.Is(err, queue.ErrInvalid) holds.
type dbError struct{ msg string }

func (e *dbError) Error() string        { return e.msg }
func (e *dbError) Is(target error) bool { return target == queue.ErrInvalid }

// classifyDB says what a --db value names: a PostgreSQL server (a
// postgres:// or postgresql:// URL, the scheme in any case, or a key=value
// connection string) or an SQLite file (a plain path). A value that looks
// like a URL or a connection string (a scheme, an '@', key=value pairs,
// spaces around it, a postgres or pg prefix, an nkey seed) but is not a
// valid PostgreSQL one is an error wrapping queue.ErrInvalid that names the
// problem without the value: it is never taken for a file name.
func classifyDB(db string) (postgres bool, err error) {
	switch {
	case db == "":
		return false, &dbError{"--db must not be empty"}
	case strings.IndexFunc(db, unicode.IsControl) >= 0:
		return false, errDB("holds a control character (a line break or a tab)")
	case strings.TrimSpace(db) != db:
		return false, errDB("starts or ends with a space: remove it")
	}
	scheme := ""
	if m := dbScheme.FindStringSubmatch(db); m != nil && !driveLetter.MatchString(db) {
		scheme = strings.ToLower(m[1])
	}
	keyword := dbKeyword.FindStringSubmatch(db) != nil
	switch {
	case (scheme == "postgres" || scheme == "postgresql") && strings.HasPrefix(db[len(scheme)+1:], "//"):
		if _, err := pgconn.ParseConfig(pgDSN(db)); err != nil {
			return false, errDB("is not a valid PostgreSQL URL: %s", pgReason(db, err))
		}
		return true, nil
	case scheme == "postgres" || scheme == "postgresql":
		return false, errDB("is not a PostgreSQL URL: it must start with %s:// (the // is missing)", scheme)
	case scheme == "file" || scheme == "sqlite" || scheme == "sqlite3":
		return false, errDB("is a %s: URI: give an SQLite database as a plain file path, such as ./stagger.db", scheme)
	case shownSchemes[scheme]:
		return false, errDB("has the scheme %q: want a postgres:// or postgresql:// URL, or a plain SQLite file path", scheme)
	case scheme != "" && strings.HasPrefix(db[len(scheme)+1:], "//"):
		return false, errDB("has an unknown scheme: want a postgres:// or postgresql:// URL, or a plain SQLite file path")
	case keyword && dbKeyword.FindStringIndex(db)[0] == 0:
		if !namesServer(db) {
			return false, errDB("looks like a key=value connection string but names none of host, port, dbname, user, password, service")
		}
		if _, err := pgconn.ParseConfig(db); err != nil {
			return false, errDB("is not a valid PostgreSQL key=value connection string: %s", pgReason(db, err))
		}
		return true, nil
	case keyword:
		return false, errDB("holds key=value pairs, as a connection string does: a PostgreSQL key=value string starts with one (host=...); an SQLite path holds none")
	case strings.Contains(db, "@"):
		return false, errDB("holds an '@', as a connection string does: a PostgreSQL URL starts with postgres://; an SQLite path holds no '@'")
	case scheme != "":
		return false, errDB("starts with a scheme (a word and a colon): want a postgres:// or postgresql:// URL, or a plain SQLite file path")
	case pgPrefix.MatchString(db):
		return false, errDB("starts like a PostgreSQL URL but is not one: want postgres://user:password@host/db")
	case strings.ContainsAny(db, "?#"):
		return false, errDB("holds a '?' or '#': an SQLite path is a plain file path")
	case redact.String(db) != db:
		return false, errDB("holds what looks like a secret (a password, a token or a key): an SQLite path is a plain file path")
	}
	return false, nil
}

// namesServer reports whether a key=value string holds one of the keys
// that say where or as whom to connect.
func namesServer(db string) bool {
	for _, m := range dbKeyword.FindAllStringSubmatch(db, -1) {
		if libpqKeywords[strings.ToLower(m[1])] {
			return true
		}
	}
	return false
}

// pgReason is why the PostgreSQL driver rejects db, in its own words up
// to the first quote, colon or parenthesis (after which it may repeat a
// part of db), with any secret of db hidden all the same.
func pgReason(db string, err error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, "`: "); i >= 0 {
		msg = msg[i+3:]
	}
	if i := strings.IndexAny(msg, "\"'`:(["); i >= 0 {
		msg = msg[:i]
	}
	msg = strings.TrimSpace(redact.Text(msg, db))
	if strings.Contains(msg, "parse as URL") {
		msg += " (in a user name or password, percent-encode @ : / ? # [ ] % and spaces)"
	}
	return msg
}

// pgDSN is db as the PostgreSQL driver reads it: the URL scheme lower-cased.
func pgDSN(db string) string {
	if m := dbScheme.FindStringSubmatch(db); m != nil {
		if sc := strings.ToLower(m[1]); sc == "postgres" || sc == "postgresql" {
			return sc + db[len(sc):]
		}
	}
	return db
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
	// startWait is how long to wait for a PostgreSQL server down at
	// start; onWait is told of each wait.
	startWait time.Duration
	onWait    func(err error, wait time.Duration)
}

// openStore opens the store named by --db: a postgres:// URL or an SQLite
// file path. An error wrapping queue.ErrInvalid is a bad --db value; any
// other is a store that cannot be opened.
func openStore(ctx context.Context, db string, o storeOptions) (queue.Store, func() error, error) {
	pg, err := classifyDB(db)
	if err != nil {
		return nil, nil, err
	}
	if pg {
		s, err := openPostgres(ctx, pgDSN(db), o.mode == openReadOnly, o)
		if err != nil {
			return nil, nil, fmt.Errorf("--db %s: %w", redact.String(db), redact.Error(err, db))
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
