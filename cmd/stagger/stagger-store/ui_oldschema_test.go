package main

import (
	"bytes"
	"database/sql"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A read-only dashboard serves a queue file written by an older release
// as it is: version 5 has no operator tables (history, pauses), version 4
// no trace column either. Every page answers, the jobs are listed, and the
// file is not changed by a byte (a read-only open migrates nothing).
func TestUIReadOnlyOldSchema(t *testing.T) {
	bin := buildStagger(t)
	for _, c := range []struct {
		name    string
		version int
		drop    string
	}{
		{"version-6", 6, ``},
		{"version-5", 5, `DROP TABLE stagger_job_events; DROP TABLE stagger_paused;`},
		{"version-4", 4, `DROP TABLE stagger_job_events; DROP TABLE stagger_paused; ALTER TABLE stagger_jobs DROP COLUMN trace;`},
	} {
		t.Run(c.name, func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "q.db")
			for _, id := range []string{"old-ok", "old-bad"} {
				if code, _, e := cli(t, "", "enqueue", "--db", db, "--id", id, "--payload", `{"n": 1}`); code != exitOK {
					t.Fatal(e)
				}
			}
			for range 2 { // one job a run
				if code, _, e := cli(t, "", "run-once", "--db", db, "--exec", `[ "$STAGGER_JOB_ID" != old-bad ] || exit 65`); code != exitOK {
					t.Fatal(e)
				}
			}
			downgrade(t, db, c.drop, c.version)
			before, err := os.ReadFile(db)
			if err != nil {
				t.Fatal(err)
			}

			base, output := startUI(t, bin, nil, "--db", db, "--read-only")
			for _, p := range []struct{ path, want string }{
				{"", "<html"},
				{"queues", "default"},
				{"api/queues", `"default"`},
				{"jobs?state=done", "old-ok"},
				{"jobs?state=dead", "old-bad"},
				{"job?id=old-ok", "old-ok"},
				{"job?id=old-bad", "old-bad"},
				{"dead", "old-bad"},
			} {
				status, body := get(t, base+p.path)
				if status != http.StatusOK || !strings.Contains(body, p.want) {
					t.Errorf("GET /%s: %d, want 200 with %q:\n%s\n%s", p.path, status, p.want, body, output())
				}
				if strings.Contains(body, `method="post"`) || strings.Contains(body, "method=post") {
					t.Errorf("GET /%s offers an action on a read-only dashboard", p.path)
				}
			}
			after, err := os.ReadFile(db)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(before, after) {
				t.Fatalf("the read-only dashboard changed the file (%d bytes before, %d after)", len(before), len(after))
			}
			if v := userVersion(t, db); v != c.version {
				t.Fatalf("user_version %d after the dashboard, want %d", v, c.version)
			}
		})
	}
}

// downgrade turns a current queue file into one of an older release.
func downgrade(t *testing.T, path, drop string, version int) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(drop + ` PRAGMA user_version = ` + strconv.Itoa(version) + `; PRAGMA wal_checkpoint(TRUNCATE);`); err != nil {
		t.Fatal(err)
	}
}

func userVersion(t *testing.T, path string) int {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v int
	if err := db.QueryRow(`PRAGMA user_version`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}
