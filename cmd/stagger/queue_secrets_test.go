package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// passwordDSNs name a closed port on 127.0.0.1 with the password
// "Pw-s3cr3t" in every form the CLI accepts.
var passwordDSNs = []string{
	"postgres://u:Pw-s3cr3t@127.0.0.1:1/db?connect_timeout=2",
	"postgresql://u:Pw-s3cr3t@127.0.0.1:1/db?connect_timeout=2",
	"POSTGRES://u:Pw-s3cr3t@127.0.0.1:1/db?connect_timeout=2",
	"PostgreSQL://u:Pw-s3cr3t@127.0.0.1:1/db?connect_timeout=2",
	"postgres://u@127.0.0.1:1/db?password=Pw-s3cr3t&connect_timeout=2",
	"postgres://u:Pw-s3cr3t@[bad/db",
	"host=127.0.0.1 port=1 user=u password=Pw-s3cr3t dbname=db connect_timeout=2",
	"host=127.0.0.1 port=1 user=u password='Pw-s3cr3t' dbname=db connect_timeout=2",
	"  HOST=127.0.0.1 port=1 PASSWORD = Pw-s3cr3t connect_timeout=2",
}

const secret = "s3cr3t"

// queueCommands are every queue subcommand with the flags it needs, for a
// given --db.
func queueCommands(db string) [][]string {
	return [][]string{
		{"enqueue", "--db", db, "--id", "a"},
		{"run-once", "--db", db, "--exec", "true"},
		{"work", "--db", db, "--exec", "true", "--db-wait", "0"}, // fail at once (TestQueueWorkWaitsForDB waits)
		{"stats", "--db", db},
		{"dead", "--db", db},
		{"show", "--db", db, "--id", "a"},
		{"requeue", "--db", db, "--id", "a", "--attempts", "1", "--deadline", "1h"},
		{"requeue", "--db", db, "--all", "--reason", "permanent", "--attempts", "1", "--deadline", "1h", "--rate", "100"},
		{"purge", "--db", db, "--state", "done", "--older-than", "1d"},
		{"purge", "--db", db, "--state", "dead", "--older-than", "1h", "--dry-run"},
	}
}

// TestQueueDSNPasswordNeverShown: every subcommand, with every DSN form,
// against an unreachable server: exit 1 (2 for a DSN that does not
// parse), the password nowhere, and no SQLite file created.
func TestQueueDSNPasswordNeverShown(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	for _, db := range passwordDSNs {
		for _, args := range queueCommands(db) {
			code, out, e := cli(t, "", args...)
			want := exitFail
			if strings.Contains(db, "[bad") {
				want = exitUsage
			}
			if code != want || strings.Contains(out+e, secret) || !strings.Contains(e, "stagger queue "+args[0]) {
				t.Errorf("%s %q: exit %d (want %d), stdout %q, stderr %q", args[0], db, code, want, out, e)
			}
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("a DSN was taken for an SQLite path: %v created", ents[0].Name())
	}
}

func TestRedactDSN(t *testing.T) {
	for db, want := range map[string]string{
		"postgres://u:Pw-s3cr3t@h/db":                  "postgres://u:xxxxx@h/db",
		"POSTGRES://u:Pw-s3cr3t@h/db":                  "postgres://u:xxxxx@h/db",
		"postgres://u@h/db?password=Pw-s3cr3t&x=1":     "postgres://u@h/db?password=xxxxx&x=1",
		"host=h password=Pw-s3cr3t dbname=d":           "host=h password=xxxxx dbname=d",
		`host=h password='a b\' Pw-s3cr3t' dbname=d`:   "host=h password=xxxxx dbname=d",
		"host=h sslpassword=Pw-s3cr3t":                 "host=h sslpassword=xxxxx",
		"./stagger.db":                                 "./stagger.db",
		"postgres://u:Pw-s3cr3t@h/db?sslmode=disable#": "postgres://u:xxxxx@h/db?sslmode=disable",
	} {
		if got := redactDSN(db); got != want {
			t.Errorf("redactDSN(%q) = %q, want %q", db, got, want)
		}
	}
	for _, db := range []string{"POSTGRES://x", "postgresql://x", "host=x", "dbname=y", "user=z password=p"} {
		if !isPostgres(db) {
			t.Errorf("isPostgres(%q) = false", db)
		}
	}
	for _, db := range []string{"./q.db", "q.db", "/tmp/host=x", "data/password.db", "sqlite://x"} {
		if isPostgres(db) {
			t.Errorf("isPostgres(%q) = true", db)
		}
	}
}

// TestQueuePasswordDSNOnPostgres drives every subcommand against the real
// server with a password in the DSN (the test server trusts, so any
// password connects), in a fresh schema picked with search_path: stats on
// the empty schema fails and creates no table; the output never shows
// the password.
func TestQueuePasswordDSNOnPostgres(t *testing.T) {
	ctx := context.Background()
	pool, _ := testPool(t)
	defer pool.Close()
	b := make([]byte, 6)
	rand.Read(b)
	schema := "stagger_cli_" + hex.EncodeToString(b)
	if _, err := pool.Exec(ctx, `CREATE SCHEMA `+schema); err != nil {
		t.Fatal(err)
	}
	defer pool.Exec(context.Background(), `DROP SCHEMA `+schema+` CASCADE`)
	cfg := pool.Config().ConnConfig
	urlDSN := "POSTGRES://" + cfg.User + ":Pw-s3cr3t@" + cfg.Host + ":" + strconv.Itoa(int(cfg.Port)) + "/" + cfg.Database + "?search_path=" + schema
	kwDSN := "host=" + cfg.Host + " port=" + strconv.Itoa(int(cfg.Port)) + " user=" + cfg.User + " password=Pw-s3cr3t dbname=" + cfg.Database + " search_path=" + schema

	tables := func() int {
		var n int
		pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = $1`, schema).Scan(&n)
		return n
	}
	code, out, e := cli(t, "", "stats", "--db", urlDSN)
	if code != exitFail || !strings.Contains(e, "no queue table") || strings.Contains(out+e, secret) || tables() != 0 {
		t.Fatalf("stats on an empty schema: exit %d %q %q, %d tables", code, out, e, tables())
	}
	for i, db := range []string{urlDSN, kwDSN} {
		for _, args := range queueCommands(db) {
			if args[0] == "work" {
				continue // below
			}
			code, out, e := cli(t, "", args...)
			if strings.Contains(out+e, secret) {
				t.Errorf("%s (DSN %d): the password shows: %q %q", args[0], i, out, e)
			}
			if code == exitUsage {
				t.Errorf("%s (DSN %d): exit 2: %q", args[0], i, e)
			}
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	var o, e2 syncBuffer
	if code := run(cctx, []string{"queue", "work", "--db", kwDSN, "--exec", "true", "--progress", "10ms"}, &o, &e2); code != exitOK {
		t.Fatalf("work: exit %d: %s", code, e2.String())
	}
	if s := o.String() + e2.String(); strings.Contains(s, secret) || !strings.Contains(s, "password=xxxxx") {
		t.Fatalf("work output: %s", s)
	}
}

// testPool connects to STAGGER_POSTGRES_URL (default the loopback test
// server) and returns the pool and the URL; unreachable, the test skips,
// or fails under CI=true.
func testPool(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	url := os.Getenv("STAGGER_POSTGRES_URL")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/test"
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		msg := "PostgreSQL unreachable at STAGGER_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test): " + redactErr(url, err).Error()
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return pool, url
}
