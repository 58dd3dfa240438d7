package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/queue/sqlite"
)

// libpqKeywords are the keywords of a PostgreSQL key=value connection
// string that may start one ("host=db password=... dbname=app").
var libpqKeywords = map[string]bool{
	"host": true, "hostaddr": true, "port": true, "dbname": true, "user": true, "password": true,
	"passfile": true, "sslmode": true, "sslcert": true, "sslkey": true, "sslrootcert": true, "sslpassword": true,
	"connect_timeout": true, "application_name": true, "options": true, "service": true,
	"target_session_attrs": true, "channel_binding": true,
}

// urlScheme returns the lower-cased scheme of a postgres:// or
// postgresql:// URL (any case), or "".
func urlScheme(db string) string {
	i := strings.Index(db, "://")
	if i < 0 {
		return ""
	}
	if sc := strings.ToLower(db[:i]); sc == "postgres" || sc == "postgresql" {
		return sc
	}
	return ""
}

// isKeywordDSN reports whether db is a key=value connection string: its
// first word is a libpq keyword followed by '='.
func isKeywordDSN(db string) bool {
	k, _, ok := strings.Cut(strings.TrimSpace(db), "=")
	return ok && libpqKeywords[strings.ToLower(strings.TrimSpace(k))]
}

// isPostgres reports whether a --db value names a PostgreSQL server: a
// postgres:// or postgresql:// URL (the scheme in any case) or a key=value
// connection string. Anything else is an SQLite file path.
func isPostgres(db string) bool { return urlScheme(db) != "" || isKeywordDSN(db) }

// pgDSN is db as the PostgreSQL driver reads it: the URL scheme lower-cased.
func pgDSN(db string) string {
	if sc := urlScheme(db); sc != "" {
		return sc + db[len(sc):]
	}
	return db
}

const hidden = "xxxxx"

// keywordPassword matches the password of a key=value connection string,
// quoted ('a b\'c') or not.
var keywordPassword = regexp.MustCompile(`(?i)(\b(?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s]*)`)

// redactDSN returns db with every password hidden: in a URL's user info
// and its password= parameter, and in a key=value string.
func redactDSN(db string) string {
	switch {
	case urlScheme(db) != "":
		u, err := url.Parse(pgDSN(db))
		if err != nil {
			return urlScheme(db) + "://(a DSN that does not parse; not shown: it may hold a password)"
		}
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), hidden)
		}
		if q := u.Query(); q.Has("password") {
			q.Set("password", hidden)
			u.RawQuery = q.Encode()
		}
		return u.String()
	case isKeywordDSN(db):
		return keywordPassword.ReplaceAllString(db, "${1}"+hidden)
	}
	return db
}

// dsnSecrets are the passwords a DSN holds, as written and as decoded.
func dsnSecrets(db string) []string {
	var out []string
	add := func(p string) {
		if p != "" {
			out = append(out, p, url.QueryEscape(p), url.PathEscape(p))
		}
	}
	if cfg, err := pgconn.ParseConfig(pgDSN(db)); err == nil {
		add(cfg.Password)
	}
	if urlScheme(db) != "" {
		if u, err := url.Parse(pgDSN(db)); err == nil {
			if p, ok := u.User.Password(); ok {
				add(p)
			}
			add(u.Query().Get("password"))
		}
		// The raw text between "user:" and "@", should the URL not parse.
		rest := db[strings.Index(db, "://")+3:]
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			if _, p, ok := strings.Cut(rest[:at], ":"); ok {
				add(p)
			}
		}
	}
	for _, m := range keywordPassword.FindAllStringSubmatch(db, -1) {
		p := m[2]
		add(p)
		if len(p) >= 2 && p[0] == '\'' {
			add(strings.ReplaceAll(strings.ReplaceAll(p[1:len(p)-1], `\'`, `'`), `\\`, `\`))
		}
	}
	// Longest first, so that no part of a longer form is left behind.
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// redactErr returns err with the DSN and every form of its password
// hidden from the message.
func redactErr(db string, err error) error {
	if err == nil || !isPostgres(db) {
		return err
	}
	msg := strings.ReplaceAll(err.Error(), db, redactDSN(db))
	for _, p := range dsnSecrets(db) {
		msg = strings.ReplaceAll(msg, p, hidden)
	}
	return &redactedError{msg: msg, err: err}
}

// redactedError is an error whose message has its secrets hidden; it
// unwraps to the original for errors.Is (never print the original).
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

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
	if db == "" {
		return nil, nil, fmt.Errorf("%w: --db must not be empty", queue.ErrInvalid)
	}
	if isPostgres(db) {
		s, err := openPostgres(ctx, pgDSN(db), o.mode == openReadOnly, o)
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
