package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestQueueReadOnlyCommandsCreateNothing: stats, dead and show on a path
// that does not exist fail with exit 1 naming it, and leave no file.
func TestQueueReadOnlyCommandsCreateNothing(t *testing.T) {
	db := filepath.Join(t.TempDir(), "typo.db")
	for _, args := range [][]string{
		{"stats", "--db", db}, {"dead", "--db", db}, {"show", "--db", db, "--id", "x"},
		{"requeue", "--db", db, "--id", "x", "--attempts", "1", "--deadline", "1h"},
	} {
		code, out, e := cli(t, "", args...)
		if code != exitFail || !strings.Contains(e, db) || !strings.Contains(e, "does not exist") || out != "" {
			t.Errorf("%v: exit %d stdout %q stderr %q; want exit 1 naming %s", args, code, out, e, db)
		}
		if _, err := os.Stat(db); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%v created %s", args, db)
		}
	}
}

// TestQueueMissingJobExitsOne: show and requeue of a missing ID exit 1
// naming it (not a usage error).
func TestQueueMissingJobExitsOne(t *testing.T) {
	db := tempDB(t)
	cli(t, "", "enqueue", "--db", db, "--id", "other")
	for _, args := range [][]string{
		{"show", "--db", db, "--id", "ghost-42"},
		{"requeue", "--db", db, "--id", "ghost-42", "--attempts", "1", "--deadline", "1h"},
	} {
		if code, _, e := cli(t, "", args...); code != exitFail || !strings.Contains(e, `no job "ghost-42"`) {
			t.Errorf("%v: exit %d stderr %q", args, code, e)
		}
	}
}

// TestQueueStatsDueToDie: a job whose deadline passed is reported as
// dying, not as pending, and does not age "oldest due waiting"; run-once
// buries it while running another job.
func TestQueueStatsDueToDie(t *testing.T) {
	db := tempDB(t)
	// Far enough ahead that a loaded machine starts the CLI before it.
	deadline := time.Now().Add(time.Second).UTC().Format(time.RFC3339Nano)
	if code, _, e := cli(t, "", "enqueue", "--db", db, "--id", "short", "--deadline", deadline); code != exitOK {
		t.Fatal(e)
	}
	for !deadlinePassed(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cli(t, "", "enqueue", "--db", db, "--id", "fresh")
	st := statsJSONOf(t, db)
	if st.DueToDie != 1 || st.PendingDue != 1 || st.Pending != 1 {
		t.Fatalf("stats %+v: want the expired job as due to die", st)
	}
	if code, out, e := cli(t, "", "run-once", "--db", db, "--exec", "true"); code != exitOK || !strings.HasPrefix(out, "fresh: attempt 1/10 → done") {
		t.Fatalf("run-once: %d %q %q", code, out, e)
	}
	if m := showJSON(t, db, "short"); m["state"] != "dead" || m["dead_reason"] != "deadline" {
		t.Fatalf("expired job after run-once: %v", m)
	}
	if st := statsJSONOf(t, db); st.DueToDie != 0 || st.Dead.Deadline != 1 {
		t.Fatalf("stats after run-once %+v", st)
	}
}

func deadlinePassed(rfc string) bool {
	t, _ := time.Parse(time.RFC3339Nano, rfc)
	return time.Now().After(t)
}

// TestQueueWorkLogs: queue work logs its start, every outcome, progress
// lines and a summary, in JSON with --log-format json.
func TestQueueWorkLogs(t *testing.T) {
	db := tempDB(t)
	in := `{"id":"ok"}` + "\n" + `{"id":"bad"}` + "\n" + `{"id":"again","max_attempts":1}` + "\n"
	if code, _, e := cli(t, in, "enqueue", "--db", db); code != exitOK {
		t.Fatal(e)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var stderr syncBuffer
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"queue", "work", "--db", db, "--log-format", "json", "--progress", "20ms", "--poll", "10ms",
			"--exec", `case "$STAGGER_JOB_ID" in ok) exit 0;; bad) exit 65;; *) exit 75;; esac`}, &syncBuffer{}, &stderr)
	}()
	for deadline := time.Now().Add(20 * time.Second); ; {
		if strings.Count(stderr.String(), `"msg":"progress"`) >= 1 && strings.Contains(stderr.String(), `"done":1,`) &&
			strings.Count(stderr.String(), `"msg":"dead"`) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no outcome/progress lines:\n%s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("work exit %d:\n%s", code, stderr.String())
	}
	byMsg := map[string][]map[string]any{}
	sc := bufio.NewScanner(strings.NewReader(stderr.String()))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("not a JSON line: %q", sc.Text())
		}
		byMsg[m["msg"].(string)] = append(byMsg[m["msg"].(string)], m)
	}
	if len(byMsg["working on"]) != 1 || len(byMsg["done"]) != 1 || byMsg["done"][0]["id"] != "ok" {
		t.Fatalf("start/done lines: %v", byMsg)
	}
	reasons := map[any]any{}
	for _, m := range byMsg["dead"] {
		reasons[m["id"]] = m["reason"]
	}
	if reasons["bad"] != "permanent" || reasons["again"] != "exhausted" {
		t.Fatalf("dead lines: %v", byMsg["dead"])
	}
	stop := byMsg["stopped"]
	if len(stop) != 1 || stop[0]["done"].(float64) != 1 || stop[0]["dead"].(float64) != 2 {
		t.Fatalf("summary: %v", stop)
	}
}

func TestQueuePurge(t *testing.T) {
	db := tempDB(t)
	in := `{"id":"a"}` + "\n" + `{"id":"b"}` + "\n" + `{"id":"c"}` + "\n" + `{"id":"x"}` + "\n"
	if code, _, e := cli(t, in, "enqueue", "--db", db); code != exitOK {
		t.Fatal(e)
	}
	for range 4 {
		cli(t, "", "run-once", "--db", db, "--exec", `[ "$STAGGER_JOB_ID" != x ] || exit 65`)
	}
	time.Sleep(5 * time.Millisecond) // every job finished more than 1ms ago
	if code, out, e := cli(t, "", "purge", "--db", db, "--state", "done", "--older-than", "1ms", "--dry-run"); code != exitOK || out != "would purge 3 done jobs that finished more than 1ms ago\n" {
		t.Fatalf("dry run: %d %q %q", code, out, e)
	}
	if st := statsJSONOf(t, db); st.Done != 3 {
		t.Fatalf("the dry run deleted: %+v", st)
	}
	if code, out, e := cli(t, "", "purge", "--db", db, "--state", "done", "--older-than", "7d"); code != exitOK || !strings.HasPrefix(out, "purged 0 done") {
		t.Fatalf("purge 7d: %d %q %q", code, out, e)
	}
	if code, out, e := cli(t, "", "purge", "--db", db, "--state", "done", "--older-than", "1ms", "--batch", "2", "--json"); code != exitOK || out != `{"state":"done","older_than_ms":1,"dry_run":false,"jobs":3}`+"\n" {
		t.Fatalf("purge: %d %q %q", code, out, e)
	}
	if st := statsJSONOf(t, db); st.Done != 0 || st.Dead.Permanent != 1 {
		t.Fatalf("after purge: %+v", st)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--state", "pending", "--older-than", "1h"}, "--state must be done or dead"},
		{[]string{"--state", "dead"}, "--older-than is required"},
		{[]string{"--state", "dead", "--older-than", "0s"}, "--older-than must be in"},
		{[]string{"--state", "dead", "--older-than", "-3d"}, "not a whole number of days"},
		{[]string{"--state", "dead", "--older-than", "1h", "--batch", "0"}, "--batch must be in"},
	} {
		if code, _, e := cli(t, "", append([]string{"purge", "--db", db}, tc.args...)...); code != exitUsage || !strings.Contains(e, tc.want) {
			t.Errorf("purge %v: exit %d %q, want 2 and %q", tc.args, code, e, tc.want)
		}
	}
	missing := filepath.Join(t.TempDir(), "none.db")
	if code, _, e := cli(t, "", "purge", "--db", missing, "--state", "dead", "--older-than", "1h"); code != exitFail || !strings.Contains(e, "does not exist") {
		t.Fatalf("purge on a missing file: %d %q", code, e)
	}
}

func TestQueueRequeueAll(t *testing.T) {
	db := tempDB(t)
	in := `{"id":"p1","max_attempts":1}` + "\n" + `{"id":"p2","max_attempts":1}` + "\n" + `{"id":"x1","max_attempts":1}` + "\n" + `{"id":"p3","max_attempts":1}` + "\n"
	if code, _, e := cli(t, in, "enqueue", "--db", db); code != exitOK {
		t.Fatal(e)
	}
	for range 4 {
		cli(t, "", "run-once", "--db", db, "--exec", `case "$STAGGER_JOB_ID" in x*) exit 75;; *) exit 65;; esac`)
	}
	code, out, e := cli(t, "", "requeue", "--db", db, "--all", "--reason", "permanent", "--attempts", "2", "--deadline", "1h", "--dry-run")
	if code != exitOK || strings.Count(out, "would requeue p") != 3 || !strings.HasSuffix(out, "would requeue 3 dead jobs (0 skipped: no longer dead)\n") {
		t.Fatalf("dry run: %d %q %q", code, out, e)
	}
	if st := statsJSONOf(t, db); st.Dead.Permanent != 3 {
		t.Fatalf("the dry run changed jobs: %+v", st)
	}
	code, out, e = cli(t, "", "requeue", "--db", db, "--all", "--reason", "permanent", "--limit", "2", "--rate", "1000", "--attempts", "2", "--deadline", "1h")
	if code != exitOK || !strings.Contains(out, "requeued p1: attempts 1/3") || !strings.Contains(out, "requeued p2: attempts 1/3") || !strings.HasSuffix(out, "requeued 2 dead jobs (0 skipped: no longer dead)\n") {
		t.Fatalf("requeue --all: %d %q %q", code, out, e)
	}
	if st := statsJSONOf(t, db); st.Dead.Permanent != 1 || st.Dead.Exhausted != 1 || st.PendingDue != 2 {
		t.Fatalf("after requeue --all: %+v", st)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--attempts", "1", "--deadline", "1h"}, "--id is required (or --all"},
		{[]string{"--all", "--id", "p1", "--attempts", "1", "--deadline", "1h"}, "not both"},
		{[]string{"--id", "p1", "--reason", "permanent", "--attempts", "1", "--deadline", "1h"}, "select jobs for --all"},
		{[]string{"--all", "--rate", "0", "--attempts", "1", "--deadline", "1h"}, "--rate must be in"},
		{[]string{"--all", "--rate", "NaN", "--attempts", "1", "--deadline", "1h"}, "--rate must be in"},
		{[]string{"--all", "--attempts", "1", "--deadline", "2030-01-01T00:00:00Z"}, "a duration from each job's requeue"},
		{[]string{"--all", "--reason", "bored", "--attempts", "1", "--deadline", "1h"}, "reason must be"},
		{[]string{"--all", "--older-than", "x", "--attempts", "1", "--deadline", "1h"}, "--older-than"},
	} {
		if code, _, e := cli(t, "", append([]string{"requeue", "--db", db}, tc.args...)...); code != exitUsage || !strings.Contains(e, tc.want) {
			t.Errorf("requeue %v: exit %d %q, want 2 and %q", tc.args, code, e, tc.want)
		}
	}
}

func TestQueueNamedQueues(t *testing.T) {
	db := tempDB(t)
	in := `{"id":"m1","queue":"mail"}` + "\n" + `{"id":"d1"}` + "\n"
	if code, _, e := cli(t, in, "enqueue", "--db", db); code != exitOK {
		t.Fatal(e)
	}
	if code, _, e := cli(t, "", "enqueue", "--db", db, "--queue", "mail", "--id", "m2"); code != exitOK {
		t.Fatal(e)
	}
	if st := statsJSONOf(t, db); st.Queue != "default" || st.PendingDue != 1 {
		t.Fatalf("default stats %+v", st)
	}
	code, out, _ := cli(t, "", "stats", "--db", db, "--queue", "mail", "--json")
	if code != exitOK || !strings.Contains(out, `"queue":"mail","pending":2,`) {
		t.Fatalf("mail stats: %d %q", code, out)
	}
	// The overview: every queue of the store, one row or JSON line each;
	// --queue narrows it, and names a queue without jobs too.
	code, out, _ = cli(t, "", "stats", "--db", db)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != exitOK || len(lines) != 3 || !strings.HasPrefix(strings.Join(strings.Fields(lines[0]), " "), "queue pending due scheduled leased expired dying done dead oldest due waiting") ||
		strings.Fields(lines[1])[0] != "default" || strings.Fields(lines[2])[0] != "mail" || strings.Fields(lines[2])[2] != "2" {
		t.Fatalf("stats overview: %d\n%s", code, out)
	}
	code, out, _ = cli(t, "", "stats", "--db", db, "--json")
	if code != exitOK || strings.Count(out, "\n") != 2 || !strings.Contains(out, `"queue":"default","pending":1,`) || !strings.Contains(out, `"queue":"mail","pending":2,`) {
		t.Fatalf("stats --json overview: %d %q", code, out)
	}
	code, out, _ = cli(t, "", "stats", "--db", db, "--json", "--queue", "mail", "--queue", "idle")
	if code != exitOK || strings.Count(out, "\n") != 2 || !strings.Contains(out, `"queue":"idle","pending":0,`) || strings.Contains(out, `"default"`) {
		t.Fatalf("stats --queue mail --queue idle: %d %q", code, out)
	}
	if code, out, e := cli(t, "", "run-once", "--db", db, "--exec", "exit 65"); code != exitOK || !strings.HasPrefix(out, "d1:") {
		t.Fatalf("run-once on the default queue: %d %q %q", code, out, e)
	}
	if code, out, _ := cli(t, "", "dead", "--db", db, "--queue", "mail"); code != exitOK || out != "" {
		t.Fatalf("mail has no dead job: %d %q", code, out)
	}
	if m := showJSON(t, db, "m1"); m["queue"] != "mail" {
		t.Fatalf("show m1: %v", m)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var stderr syncBuffer
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"queue", "work", "--db", db, "--queue", "mail", "--queue", "default", "--poll", "10ms", "--exec", "true"}, &syncBuffer{}, &stderr)
	}()
	for deadline := time.Now().Add(20 * time.Second); strings.Count(stderr.String(), "msg=done") < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("work on two queues:\n%s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if code := <-done; code != exitOK || !strings.Contains(stderr.String(), "queue=mail id=m1") || !strings.Contains(stderr.String(), "queue=mail id=m2") {
		t.Fatalf("work: exit %d\n%s", code, stderr.String())
	}
	for _, args := range [][]string{
		{"dead", "--db", db, "--queue", "a,b"},
		{"show", "--db", db, "--id", "m1", "--queue", "a", "--queue", "b"},
		{"stats", "--db", db, "--queue", "mail,mail"},
		{"stats", "--db", db, "--queue", "has space"},
		{"enqueue", "--db", db, "--id", "x", "--queue", ""},
	} {
		if code, _, e := cli(t, "", args...); code != exitUsage || !strings.Contains(e, "--queue") {
			t.Errorf("%v: exit %d %q", args, code, e)
		}
	}
	if code, _, e := cli(t, `{"id":"y","queue":"bad name"}`+"\n", "enqueue", "--db", db); code != exitUsage || !strings.Contains(e, "line 1: queue: invalid: queue name") {
		t.Errorf("stdin queue: %d %q", code, e)
	}
}
