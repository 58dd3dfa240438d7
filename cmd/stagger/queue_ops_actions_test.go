package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// mustCLI runs a queue subcommand that must exit 0.
func mustCLI(t *testing.T, args ...string) string {
	t.Helper()
	code, out, e := cli(t, "", args...)
	if code != exitOK {
		t.Fatalf("%v: exit %d: %s%s", args, code, out, e)
	}
	return out
}

// wantExit runs a queue subcommand that must exit with code and name
// what in its message.
func wantExit(t *testing.T, code int, what string, args ...string) {
	t.Helper()
	got, out, e := cli(t, "", args...)
	if got != code || !strings.Contains(e, what) {
		t.Errorf("%v: exit %d stdout %q stderr %q; want exit %d naming %q", args, got, out, e, code, what)
	}
}

// TestQueueCancelDeleteCLI: cancel and delete by ID, their refusals
// (exit 1 naming the job and why), bad usage (exit 2), and the history
// show prints.
func TestQueueCancelDeleteCLI(t *testing.T) {
	db := tempDB(t)
	for _, id := range []string{"a", "b1", "b2", "c", "busy"} {
		mustCLI(t, "enqueue", "--db", db, "--id", id)
	}
	if out := mustCLI(t, "cancel", "--db", db, "--id", "a", "--actor", "alice"); !strings.Contains(out, "cancelled a (by alice)") {
		t.Errorf("cancel printed %q", out)
	}
	var shown struct {
		State   string `json:"state"`
		History []struct {
			Actor, Action string
			AtMs          int64 `json:"at_ms"`
		} `json:"history"`
	}
	out := mustCLI(t, "show", "--db", db, "--id", "a", "--json")
	if err := json.Unmarshal([]byte(out), &shown); err != nil || shown.State != "dead" || len(shown.History) != 1 ||
		shown.History[0].Actor != "alice" || shown.History[0].Action != "cancel" || shown.History[0].AtMs == 0 {
		t.Errorf("show --json after cancel: %s (%v)", out, err)
	}
	if out := mustCLI(t, "show", "--db", db, "--id", "a"); !strings.Contains(out, "cancel by alice") || !strings.Contains(out, "dead canceled") {
		t.Errorf("show after cancel:\n%s", out)
	}
	wantExit(t, exitFail, `cannot cancel "a" (state dead canceled)`, "cancel", "--db", db, "--id", "a")
	wantExit(t, exitFail, `job not found: cancel "ghost"`, "cancel", "--db", db, "--id", "ghost")
	// A job whose attempt's outcome is unknown stays leased.
	if code, _, _ := cli(t, "", "run-once", "--db", db, "--exec", "exit 3"); code != exitFail {
		t.Fatalf("run-once with an unknown outcome: exit %d", code)
	}
	leased := ""
	for _, id := range []string{"b1", "b2", "busy", "c"} {
		if strings.Contains(mustCLI(t, "show", "--db", db, "--id", id), "leased") {
			leased = id
		}
	}
	if leased == "" {
		t.Fatal("no job is leased after run-once")
	}
	wantExit(t, exitFail, "a worker holds it", "cancel", "--db", db, "--id", leased)
	wantExit(t, exitFail, "a worker holds it", "delete", "--db", db, "--id", leased)
	if out := mustCLI(t, "delete", "--db", db, "--id", "a"); !strings.Contains(out, "deleted a (was dead canceled)") {
		t.Errorf("delete printed %q", out)
	}
	wantExit(t, exitFail, `job not found: delete "a"`, "delete", "--db", db, "--id", "a")
	for _, args := range [][]string{
		{"cancel", "--db", db},
		{"cancel", "--db", db, "--id", "c", "--all"},
		{"cancel", "--db", db, "--id", "c", "--id-prefix", "b"},
		{"cancel", "--db", db, "--all", "--rate", "0"},
		{"cancel", "--db", db, "--all", "--older-than", "soon"},
		{"cancel", "--db", db, "--id", "c", "--actor", "a\tb"},
		{"cancel", "--db", db, "--all", "--older-than", "1h", "--newer-than", "1m"},
		{"delete", "--db", db},
		{"delete", "--db", db, "--id", "c", "extra"},
	} {
		if code, _, e := cli(t, "", args...); code != exitUsage {
			t.Errorf("%v: exit %d (%s); want 2", args, code, e)
		}
	}
}

// TestQueueCancelAllCLI: --all cancels the pending jobs the filters
// select, paced, and a dry run changes nothing.
func TestQueueCancelAllCLI(t *testing.T) {
	db := tempDB(t)
	for _, id := range []string{"x1", "x2", "x3", "y1"} {
		mustCLI(t, "enqueue", "--db", db, "--id", id)
	}
	out := mustCLI(t, "cancel", "--db", db, "--all", "--id-prefix", "x", "--dry-run")
	if !strings.Contains(out, "would cancel x1") || !strings.Contains(out, "would cancel 3 pending jobs") {
		t.Errorf("dry run printed %q", out)
	}
	out = mustCLI(t, "cancel", "--db", db, "--all", "--id-prefix", "x", "--limit", "2", "--rate", "1000", "--actor", "bulk")
	if !strings.Contains(out, "cancelled 2 pending jobs") {
		t.Errorf("cancel --all printed %q", out)
	}
	out = mustCLI(t, "jobs", "--db", db, "--state", "dead", "--reason", "canceled")
	if !strings.Contains(out, "x1\tdead canceled") || !strings.Contains(out, "x2\tdead canceled") || strings.Contains(out, "x3") {
		t.Errorf("jobs after cancel --all:\n%s", out)
	}
	out = mustCLI(t, "requeue", "--db", db, "--all", "--reason", "canceled", "--id-prefix", "x2", "--attempts", "1", "--deadline", "1h",
		"--rate", "1000", "--actor", "fixer")
	if !strings.Contains(out, "requeued 1 dead jobs") {
		t.Errorf("requeue --all printed %q", out)
	}
	if out := mustCLI(t, "show", "--db", db, "--id", "x2"); !strings.Contains(out, "requeue by fixer") || !strings.Contains(out, "cancel by bulk") {
		t.Errorf("show after cancel and requeue:\n%s", out)
	}
}

// TestQueuePauseCLI: a paused queue's jobs are not run, through another
// process's command; resume lets them run.
func TestQueuePauseCLI(t *testing.T) {
	db := tempDB(t)
	mustCLI(t, "enqueue", "--db", db, "--queue", "mail", "--id", "m1")
	if out := mustCLI(t, "pause", "--db", db, "--queue", "mail", "--actor", "ops"); !strings.Contains(out, "paused mail") {
		t.Errorf("pause printed %q", out)
	}
	if out := mustCLI(t, "pause", "--db", db, "--queue", "mail"); !strings.Contains(out, "mail was paused already") {
		t.Errorf("second pause printed %q", out)
	}
	if out := mustCLI(t, "pause", "--db", db, "--list"); !strings.Contains(out, "mail\tpaused") || !strings.Contains(out, "by ops") {
		t.Errorf("pause --list printed %q", out)
	}
	if out := mustCLI(t, "run-once", "--db", db, "--queue", "mail", "--exec", "true"); !strings.Contains(out, "nothing due") {
		t.Errorf("run-once on a paused queue printed %q", out)
	}
	if out := mustCLI(t, "resume", "--db", db, "--queue", "mail"); !strings.Contains(out, "resumed mail") {
		t.Errorf("resume printed %q", out)
	}
	if out := mustCLI(t, "run-once", "--db", db, "--queue", "mail", "--exec", "true"); !strings.Contains(out, "m1: attempt 1/") {
		t.Errorf("run-once after resume printed %q", out)
	}
	if code, _, e := cli(t, "", "pause", "--db", db, "--queue", "bad name"); code != exitUsage {
		t.Errorf("pause of a bad queue name: exit %d %s", code, e)
	}
}

// TestQueueJobsCLI: filters and pages of `jobs`, and its bad usage.
func TestQueueJobsCLI(t *testing.T) {
	db := tempDB(t)
	for _, id := range []string{"k1", "k2", "k3", "z"} {
		mustCLI(t, "enqueue", "--db", db, "--id", id)
	}
	out := mustCLI(t, "jobs", "--db", db, "--id-prefix", "k", "--limit", "2")
	if !strings.Contains(out, "k1\tpending") || !strings.Contains(out, "k2\tpending") || !strings.Contains(out, "more: --after k2") {
		t.Errorf("first page:\n%s", out)
	}
	out = mustCLI(t, "jobs", "--db", db, "--id-prefix", "k", "--limit", "2", "--after", "k2")
	if !strings.Contains(out, "k3\tpending") || strings.Contains(out, "k1") || strings.Contains(out, "more:") {
		t.Errorf("second page:\n%s", out)
	}
	out = mustCLI(t, "jobs", "--db", db, "--json", "--state", "pending", "--newer-than", "1h")
	if n := strings.Count(out, "\n"); n != 4 || !strings.Contains(out, `"id":"z"`) {
		t.Errorf("jobs --json printed %d lines:\n%s", n, out)
	}
	if out := mustCLI(t, "jobs", "--db", db, "--older-than", "1h"); out != "" {
		t.Errorf("jobs older than an hour:\n%s", out)
	}
	for _, args := range [][]string{
		{"jobs", "--db", db, "--state", "running"},
		{"jobs", "--db", db, "--reason", "tired"},
		{"jobs", "--db", db, "--state", "pending", "--reason", "exhausted"},
		{"jobs", "--db", db, "--limit", "0"},
		{"jobs", "--db", db, "--limit", "10001"},
		{"jobs", "--db", db, "--older-than", "-1h"},
		{"jobs", "--db", db, "--id-prefix", "a\x01"},
	} {
		if code, _, e := cli(t, "", args...); code != exitUsage {
			t.Errorf("%v: exit %d (%s); want 2", args, code, e)
		}
	}
	wantExit(t, exitFail, "does not exist", "jobs", "--db", db+".missing")
}
