package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/staggerhq/stagger/internal/redact"
)

// nkeySeed is a NATS user nkey seed, the secret of an nkey login.
const nkeySeed = "SUAMLK2ZNL35WSMW37E7UD4VZ7ELPKW7DHC3BWBSD2GCZ7IUQQXZIORRBU"

// secret is in every secret of the tables below: no output, log or file
// name may hold it (nor nkeySeed).
const secret = "s3cr3t"

// dbSecrets are --db values that hold a secret, each naming a closed port
// on 127.0.0.1, and the exit code every queue command must end with: 1 for
// a valid connection string (the store cannot be opened), 2 for one that
// does not parse or is not a PostgreSQL one (nothing was done).
var dbSecrets = []struct {
	db   string
	exit int
}{
	{"postgres://u:Pw-s3cr3t@127.0.0.1:1/db?connect_timeout=2", exitFail},
	{"postgresql://u:Pw-s3cr3t@127.0.0.1:1/db?connect_timeout=2", exitFail},
	{"POSTGRES://u:Pw-s3cr3t@127.0.0.1:1/db?connect_timeout=2", exitFail},
	{"PostgreSQL://u:Pw-s3cr3t@127.0.0.1:1/db?connect_timeout=2", exitFail},
	{"postgres://u@127.0.0.1:1/db?password=Pw-s3cr3t&connect_timeout=2", exitFail},
	{"postgres://u@127.0.0.1:1/db?sslpassword=Pw-s3cr3t&connect_timeout=2", exitFail},
	{"postgres://u@127.0.0.1:1/db?sslmode=disable&sslpassword=Pw-s3cr3t", exitFail},
	{"postgres://u:Pw%40s3cr3t@127.0.0.1:1/db", exitFail},
	{"host=127.0.0.1 port=1 user=u password=Pw-s3cr3t dbname=db connect_timeout=2", exitFail},
	{"host=127.0.0.1 port=1 user=u password='Pw-s3cr3t' dbname=db connect_timeout=2", exitFail},
	{"host=127.0.0.1 port=1 user=u sslpassword=Pw-s3cr3t sslmode=disable", exitFail},
	{"HOST=127.0.0.1 port=1 PASSWORD = Pw-s3cr3t connect_timeout=2", exitFail},
	// Mistyped: never an SQLite path, never the password in the error.
	{"postgres:postgres:Pw-s3cr3t@127.0.0.1:1", exitUsage},
	{"postgres:/u:Pw-s3cr3t@127.0.0.1:1/db", exitUsage},
	{"postgres//u:Pw-s3cr3t@127.0.0.1:1/db", exitUsage},
	{"postgress://u:Pw-s3cr3t@127.0.0.1:1/db", exitUsage},
	{"pg://u:Pw-s3cr3t@127.0.0.1:1/db", exitUsage},
	{" postgres://u:Pw-s3cr3t@127.0.0.1:1/db", exitUsage},
	{"postgres://u:Pw-s3cr3t@127.0.0.1:1/db ", exitUsage},
	{"postgres://u:Pw-s3cr3t@[bad/db", exitUsage},
	{"postgres://u:Pw-s3cr3t@127.0.0.1:99999/db", exitUsage},
	{"host=127.0.0.1 password='Pw-s3cr3t", exitUsage},
	{" host=127.0.0.1 password=Pw-s3cr3t", exitUsage},
	{"port=1 password='Pw-s3cr3t", exitUsage},
	{"q.db password=Pw-s3cr3t", exitUsage},
	{"u:Pw-s3cr3t@127.0.0.1:1", exitUsage},
	{"Pw-s3cr3t@127.0.0.1", exitUsage},
	// Other services' connection strings given to --db.
	{"amqp://guest:Pw-s3cr3t@127.0.0.1:1/", exitUsage},
	{"nats://Tk-s3cr3t@127.0.0.1:1", exitUsage},
	{"redis://:Pw-s3cr3t@127.0.0.1:1/0", exitUsage},
	{"rediss://u:Pw-s3cr3t@127.0.0.1:1", exitUsage},
	{nkeySeed, exitUsage},
	{"file:Pw-s3cr3t.db", exitUsage},
	{"sqlite://Pw-s3cr3t.db", exitUsage},
}

// queueCommands are every queue subcommand with the flags it needs, for a
// given --db.
func queueCommands(db string) [][]string {
	return [][]string{
		{"enqueue", "--db", db, "--id", "a"},
		{"run-once", "--db", db, "--exec", "true"},
		{"work", "--db", db, "--exec", "true", "--db-wait", "0"}, // fail at once (TestQueueWorkWaitsForDB waits)
		{"stats", "--db", db},
		{"stats", "--db", db, "--json"},
		{"dead", "--db", db},
		{"show", "--db", db, "--id", "a"},
		{"requeue", "--db", db, "--id", "a", "--attempts", "1", "--deadline", "1h"},
		{"requeue", "--db", db, "--all", "--reason", "permanent", "--attempts", "1", "--deadline", "1h", "--rate", "100"},
		{"purge", "--db", db, "--state", "done", "--older-than", "1d"},
		{"purge", "--db", db, "--state", "dead", "--older-than", "1h", "--dry-run"},
	}
}

// otherSecrets are command lines other than --db that carry a connection
// string with a secret, and the exit code they must end with.
var otherSecrets = []struct {
	args []string
	exit int
}{
	{[]string{"broker", "redrive", "--broker", "rabbitmq", "--dlq", "d", "--url", "amqp://guest:Pw-s3cr3t@127.0.0.1:1/"}, exitFail},
	{[]string{"broker", "redrive", "--broker", "rabbitmq", "--dlq", "d", "--url", "amqps://u:Pw-s3cr3t@127.0.0.1:1/v"}, exitFail},
	{[]string{"broker", "redrive", "--broker", "rabbitmq", "--dlq", "d", "--url", "amqp://guest:Pw-s3cr3t@[bad/"}, exitUsage},
	{[]string{"broker", "redrive", "--broker", "jetstream", "--dlq", "d", "--url", "nats://Tk-s3cr3t@127.0.0.1:1"}, exitFail},
	{[]string{"broker", "redrive", "--broker", "jetstream", "--dlq", "d", "--url", "nats://u:Pw-s3cr3t@127.0.0.1:1"}, exitFail},
	{[]string{"broker", "redrive", "--broker", "jetstream", "--dlq", "d", "--url", "nats://Tk-s3cr3t@127.0.0.1:1,nats://u:Pw-s3cr3t@127.0.0.1:2"}, exitFail},
	{[]string{"broker", "redrive", "--broker", "jetstream", "--dlq", "d", "--url", "tls://Tk-s3cr3t@127.0.0.1:1"}, exitFail},
	{[]string{"broker", "redrive", "--broker", "kafka", "--dlq", "d", "--brokers", "u:Pw-s3cr3t@127.0.0.1:1", "--timeout", "5s"}, exitUsage},
	{[]string{"broker", "redrive", "--broker", "kafka", "--dlq", "d", "--brokers", "u:Pw-s3cr3t@127.0.0.1:x"}, exitUsage},
	{[]string{"broker", "redrive", "--broker", "kafka", "--dlq", "d", "--brokers", "127.0.0.1:1", "--url", "nats://Tk-s3cr3t@127.0.0.1:1"}, exitUsage},
	{[]string{"proxy", "--upstream", "http://Tk-s3cr3t@127.0.0.1:1", "--report", ""}, exitUsage},
	{[]string{"proxy", "--upstream", "http://u:Pw-s3cr3t@127.0.0.1:1", "--report", ""}, exitUsage},
	{[]string{"queue", "stats", "postgres://u:Pw-s3cr3t@127.0.0.1:1/db"}, exitUsage},
	{[]string{"queue", "stats", "--db"}, exitUsage},
	{[]string{"queue", "postgres://u:Pw-s3cr3t@127.0.0.1:1/db"}, exitUsage},
	{[]string{"postgres://u:Pw-s3cr3t@127.0.0.1:1/db"}, exitUsage},
	{[]string{"broker", "nats://Tk-s3cr3t@127.0.0.1:1"}, exitUsage},
}

// checkNoSecret fails the test when out, or the name of a file under dir,
// holds a secret; it lists every file found.
func checkNoSecret(t *testing.T, dir, what, out string) {
	t.Helper()
	if strings.Contains(out, secret) || strings.Contains(out, nkeySeed) {
		t.Errorf("%s: the secret shows: %q", what, out)
	}
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if path != dir {
			t.Errorf("%s: created %q", what, path)
			os.RemoveAll(path)
		}
		return nil
	})
}

// TestSecretsNeverShown feeds every connection string with a secret
// through every command that takes one, against closed ports, and greps
// stdout, stderr (the worker's log included) and the names of the files
// created in the working directory.
func TestSecretsNeverShown(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	for _, c := range dbSecrets {
		for _, args := range queueCommands(c.db) {
			// Bounded: a --db taken for an SQLite path would have work
			// run until stopped.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			var o, eb bytes.Buffer
			code := run(ctx, append([]string{"queue"}, args...), &o, &eb)
			cancel()
			out, e := o.String(), eb.String()
			what := fmt.Sprintf("queue %s %q", strings.Join(args[:1], " "), c.db)
			if code != c.exit || !strings.Contains(e, "stagger queue "+args[0]) {
				t.Errorf("%s: exit %d (want %d), stderr %q", what, code, c.exit, e)
			}
			checkNoSecret(t, dir, what, out+e)
		}
	}
	for _, c := range otherSecrets {
		var o, e bytes.Buffer
		code := run(context.Background(), c.args, &o, &e)
		what := strings.Join(c.args, " ")
		if code != c.exit {
			t.Errorf("%s: exit %d (want %d), stderr %q", what, code, c.exit, e.String())
		}
		checkNoSecret(t, dir, what, o.String()+e.String())
	}
}

// TestSecretsOnServers: a wrong password or a token against the real
// RabbitMQ and NATS servers, whose errors are the servers' own.
func TestSecretsOnServers(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	for _, c := range []struct{ env, def, kind, url string }{
		{"STAGGER_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/", "rabbitmq", "amqp://guest:Pw-s3cr3t@%s/"},
		{"STAGGER_NATS_URL", "nats://127.0.0.1:4222", "jetstream", "nats://Tk-s3cr3t@%s"},
		{"STAGGER_NATS_URL", "nats://127.0.0.1:4222", "jetstream", "nats://u:Pw-s3cr3t@%s"},
	} {
		addr := envOr(c.env, c.def)
		if u, err := url.Parse(addr); err == nil && u.Host != "" {
			addr = u.Host
		}
		if conn, err := net.DialTimeout("tcp", addr, 2*time.Second); err != nil {
			msg := fmt.Sprintf("%s unreachable at %s (%s): %v", c.kind, addr, c.env, err)
			if os.Getenv("CI") == "true" {
				t.Fatal(msg)
			}
			t.Log(msg)
			continue
		} else {
			conn.Close()
		}
		args := []string{"broker", "redrive", "--broker", c.kind, "--dlq", "stagger-secrets-none", "--dry-run", "--timeout", "20s", "--url", fmt.Sprintf(c.url, addr)}
		var o, e bytes.Buffer
		code := run(context.Background(), args, &o, &e)
		if code == exitOK {
			t.Errorf("%s: exit 0 for a DLQ that does not exist", args)
		}
		checkNoSecret(t, dir, strings.Join(args, " "), o.String()+e.String())
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
	sslDSN := "postgres://" + cfg.User + "@" + cfg.Host + ":" + strconv.Itoa(int(cfg.Port)) + "/" + cfg.Database + "?sslmode=disable&sslpassword=Pw-s3cr3t&search_path=" + schema
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
	for i, db := range []string{urlDSN, kwDSN, sslDSN} {
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
	for format, db := range map[string]string{"text": kwDSN, "json": sslDSN} {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		var o, e2 syncBuffer
		code := run(cctx, []string{"queue", "work", "--db", db, "--exec", "true", "--progress", "10ms", "--log-format", format}, &o, &e2)
		cancel()
		if code != exitOK {
			t.Fatalf("work: exit %d: %s", code, e2.String())
		}
		if s := o.String() + e2.String(); strings.Contains(s, secret) || !strings.Contains(s, "password=xxxxx") {
			t.Fatalf("work output: %s", s)
		}
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
		msg := "PostgreSQL unreachable at STAGGER_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test): " + redact.Error(err, url).Error()
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return pool, url
}

// TestHTTPHandlerSecretNeverShown: a --http URL with a token or a password
// in it reaches no output, log line or stored error.
func TestHTTPHandlerSecretNeverShown(t *testing.T) {
	for _, hook := range []string{"http://Tk-s3cr3t@127.0.0.1:1/hook", "http://u:Pw-s3cr3t@127.0.0.1:1/hook"} {
		db := tempDB(t)
		var all strings.Builder
		for _, args := range [][]string{
			{"enqueue", "--db", db, "--id", "a", "--max-attempts", "1"},
			{"run-once", "--db", db, "--http", hook},
			{"show", "--db", db, "--id", "a", "--json"},
			{"dead", "--db", db},
			{"run-once", "--db", db, "--http", strings.Replace(hook, "http:", "ftp:", 1)},
		} {
			_, out, e := cli(t, "", args...)
			all.WriteString(out + e)
		}
		if s := all.String(); strings.Contains(s, secret) || !strings.Contains(s, "127.0.0.1:1/hook") {
			t.Errorf("%s: %s", hook, s)
		}
	}
}

// TestHandlerErrorSecretHidden: a handler whose error repeats a
// connection string (here a command's stderr) has it shown redacted by
// run-once, show and dead.
func TestHandlerErrorSecretHidden(t *testing.T) {
	db := tempDB(t)
	var all strings.Builder
	for _, args := range [][]string{
		{"enqueue", "--db", db, "--id", "a", "--max-attempts", "1"},
		{"run-once", "--db", db, "--exec", `echo "dial postgres://u:Pw-s3cr3t@h/db; nats://Tk-s3cr3t@h" >&2; exit 65`},
		{"show", "--db", db, "--id", "a"},
		{"show", "--db", db, "--id", "a", "--json"},
		{"dead", "--db", db},
		{"dead", "--db", db, "--json"},
		{"requeue", "--db", db, "--all", "--attempts", "1", "--deadline", "1h", "--dry-run"},
	} {
		_, out, e := cli(t, "", args...)
		all.WriteString(out + e)
	}
	if s := all.String(); strings.Contains(s, secret) || !strings.Contains(s, "postgres://u:xxxxx@h/db") {
		t.Errorf("%s", s)
	}
}
