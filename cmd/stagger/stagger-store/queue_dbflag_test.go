package main

import (
	"errors"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/staggerhq/stagger/queue"
)

func TestClassifyDB(t *testing.T) {
	for db, pg := range map[string]bool{
		"./q.db": false, "q.db": false, "/var/lib/stagger/q.db": false, "data/password.db": false,
		"pg.db": false, "postgres.db": false, "pg-jobs.db": false, "postgres/q.db": false, `C:\q.db`: false,
		"postgres://u:p@h/db": true, "POSTGRESQL://h/db": true, "postgres://u@h1,h2/db?sslmode=disable": true,
		"host=h dbname=d": true, "user=u password='a b'": true, "dbname=d": true,
	} {
		got, err := classifyDB(db)
		if err != nil || got != pg {
			t.Errorf("classifyDB(%q) = %v, %v; want %v", db, got, err, pg)
		}
	}
	for db, why := range map[string]string{
		"":                            "empty",
		" q.db":                       "space",
		"q.db\n":                      "control",
		"postgres:u:p@h":              "the // is missing",
		"postgres:/h/db":              "the // is missing",
		"postgress://u:p@h":           `"postgress"`,
		"pg://h/db":                   `"pg"`,
		"Zz9://h":                     "unknown scheme",
		"file:q.db":                   "plain file path",
		"sqlite:///q.db":              "plain file path",
		"postgres://u:p@h:99999/db":   "invalid port",
		"postgres://u:p@[bad/db":      "not a valid PostgreSQL URL",
		"host=h password='unfinished": "key=value",
		"a=b.db":                      "names none",
		"q.db host=h":                 "key=value pairs",
		"u:p@h:5432":                  "'@'",
		"u@h":                         "'@'",
		"postgres//h/db":              "starts like a PostgreSQL URL",
		"pg;//h/db":                   "starts like a PostgreSQL URL",
		"q.db?mode=ro":                "'?'",
		"SUAMLK2ZNL35WSMW37E7UD4VZ7ELPKW7DHC3BWBSD2GCZ7IUQQXZIORRBU": "secret",
	} {
		_, err := classifyDB(db)
		if err == nil || !errors.Is(err, queue.ErrInvalid) || !strings.Contains(err.Error(), why) {
			t.Errorf("classifyDB(%q) = %v; want an ErrInvalid saying %q", db, err, why)
		}
	}
}

// FuzzClassifyDB: any value is classified without a panic; a value taken
// for an SQLite path is a plain path; an error never repeats a password
// (marked by a 'J', a letter no message holds) built into a connection string of any form.
func FuzzClassifyDB(f *testing.F) {
	for _, s := range []string{"./q.db", "postgres://u:p@h/db", "host=h password=p", "postgres:u:p@h", " pg://x", "Jx", "a:b@c", "h:1", "h:99999", "[x"} {
		f.Add(s, "Js3cr3t")
	}
	f.Fuzz(func(t *testing.T, db, p string) {
		if pg, err := classifyDB(db); err == nil && !pg {
			if strings.ContainsAny(db, "@?#") || strings.TrimSpace(db) != db || dbScheme.MatchString(db) && !driveLetter.MatchString(db) || dbKeyword.MatchString(db) {
				t.Fatalf("classifyDB(%q) took a URL-like value for an SQLite path", db)
			}
		}
		if !strings.Contains(p, "J") {
			p += "J"
		}
		ui := url.UserPassword("u", p).String()
		for _, v := range []string{
			"postgres://" + ui + "@127.0.0.1:1/" + db,
			"postgres:" + ui + "@" + db,
			"postgress://" + ui + "@" + db,
			"pg://" + ui + "@h",
			" postgres://" + ui + "@h" + db,
			db + " password='" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(p) + "'",
			"host=h password=" + strings.NewReplacer(" ", "", "'", "", `\`, "").Replace(p) + " " + db,
			"postgres://u@h/db?sslpassword=" + url.QueryEscape(p) + "&" + db,
			ui + "@" + db,
		} {
			if _, err := classifyDB(v); err != nil && strings.Contains(err.Error(), "J") {
				t.Fatalf("classifyDB(%q): %q repeats the password", v, err)
			}
		}
	})
}

// A command that ends with exit 2 ("nothing was done") creates no SQLite
// file: every flag and input is checked before the store is opened.
func TestUsageErrorCreatesNoFile(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	for _, c := range []struct {
		stdin string
		args  []string
	}{
		{"", []string{"enqueue", "--db", "w.db", "--id", "a", "--max-payload", "3", "--payload", "toolong"}},
		{`{"id":"a","payload":"toolong"}`, []string{"enqueue", "--db", "w.db", "--max-payload", "3"}},
		{`{"id":"a"`, []string{"enqueue", "--db", "w.db"}},
		{`{"id":""}`, []string{"enqueue", "--db", "w.db"}},
		{"", []string{"enqueue", "--db", "w.db", "--id", "a", "--deadline", "yesterday"}},
		{"", []string{"enqueue", "--db", "w.db", "--id", "a", "--max-attempts", "0"}},
		{"", []string{"enqueue", "--db", "w.db", "--id", "a", "--queue", "bad name"}},
		{"", []string{"run-once", "--db", "w.db", "--exec", "true", "--rate", "NaN"}},
		{"", []string{"run-once", "--db", "w.db", "--exec", "true", "--rate", "-1"}},
		{"", []string{"run-once", "--db", "w.db", "--exec", "true", "--burst", "5"}},
		{"", []string{"run-once", "--db", "w.db", "--exec", "true", "--max-in-flight", "-1"}},
		{"", []string{"run-once", "--db", "w.db", "--http", "ftp://x"}},
		{"", []string{"run-once", "--db", "w.db"}},
		{"", []string{"work", "--db", "w.db", "--exec", "true", "--rate", "NaN"}},
		{"", []string{"work", "--db", "w.db", "--exec", "true", "--rate", "+Inf"}},
		{"", []string{"work", "--db", "w.db", "--exec", "true", "--retain-done", "soon"}},
		{"", []string{"work", "--db", "w.db", "--exec", "true", "--concurrency", "0"}},
		{"", []string{"work", "--db", "w.db", "--exec", "true", "--queue", "a,a"}},
		{"", []string{"work", "--db", "w.db", "--exec", "true", "--log-format", "xml"}},
		{"", []string{"stats", "--db", "w.db", "--queue", "bad name"}},
		{"", []string{"dead", "--db", "w.db", "--limit", "0"}},
		{"", []string{"show", "--db", "w.db"}},
		{"", []string{"requeue", "--db", "w.db", "--id", "a", "--attempts", "0", "--deadline", "1h"}},
		{"", []string{"requeue", "--db", "w.db", "--all", "--attempts", "1", "--deadline", "1h", "--rate", "NaN"}},
		{"", []string{"purge", "--db", "w.db", "--state", "pending", "--older-than", "1d"}},
	} {
		code, _, e := cli(t, c.stdin, c.args...)
		if code != exitUsage {
			t.Errorf("%q: exit %d, want 2: %s", c.args, code, e)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Errorf("%q: exit %d created %s", c.args, code, ents[0].Name())
			os.RemoveAll(dir)
			os.Mkdir(dir, 0o755)
		}
	}
}
