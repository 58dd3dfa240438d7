package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/staggerhq/stagger/internal/simkit"
)

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestSimList(t *testing.T) {
	code, out, _ := runCLI(t, "sim", "list")
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	all := simkit.Scenarios()
	for _, s := range all {
		if !strings.Contains(out, "  "+s.Name+" ") {
			t.Errorf("list lacks %s:\n%s", s.Name, out)
		}
	}
	if n := strings.Count(strings.TrimSpace(out), "\n") + 1; n != len(all) || n < 8 {
		t.Errorf("%d lines, want %d (one per scenario)", n, len(all))
	}
}

func TestSimBadInput(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"sim"}, "Usage"},
		{[]string{"sim", "nope"}, `unknown scenario "nope"`},
		{[]string{"sim", "list", "x"}, "unexpected argument"},
		{[]string{"sim", "herd", "--workers", "0"}, "-workers"},
		{[]string{"sim", "herd", "--workers", "true"}, "-workers"},
		{[]string{"sim", "herd", "--db-rate", "NaN"}, "-db-rate"},
		{[]string{"sim", "herd", "--db-rate", "-Inf"}, "-db-rate"},
		{[]string{"sim", "herd", "--outage", "-5s"}, "-outage"},
		{[]string{"sim", "herd", "--cap", "10ms"}, "cap"},
		{[]string{"sim", "herd", "--base", "2s", "--cap", "1s"}, "Run 'stagger sim herd --help'"}, // flags fine alone, not together
		{[]string{"sim", "herd", "--strategy", "yolo"}, "-strategy"},
		{[]string{"sim", "brooker2015", "--n-from", "50", "--n-to", "20"}, "n-to"},
		{[]string{"sim", "budgets", "--rate", "1e400"}, "-rate"},
		{[]string{"sim", "layers", "--shapes", "3by3"}, "-shapes"},
		{[]string{"sim", "littles-law", "--warmup", "2h", "--duration", "1h"}, "warmup"},
		{[]string{"sim", "outage", "--json", "--csv"}, "choose one"},
		{[]string{"sim", "outage", "--parallel", "-1"}, "--parallel"},
		{[]string{"sim", "outage", "extra"}, `unexpected argument "extra"`},
		{[]string{"sim", "outage", "--seed", "-1"}, "-seed"},
		{[]string{"sim", "outage", "--report", filepath.Join(t.TempDir(), "missing", "r.html")}, "--report"},
	}
	for _, c := range cases {
		code, out, errs := runCLI(t, c.args...)
		if code != exitUsage || out != "" || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2, no stdout, stderr naming %q", c.args, code, out, errs, c.want)
		}
	}
}

func TestSimHelp(t *testing.T) {
	code, out, _ := runCLI(t, "sim", "herd", "--help")
	if code != exitOK || !strings.Contains(out, "-workers") || !strings.Contains(out, "-db-rate") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

func TestSimOutputs(t *testing.T) {
	args := []string{"sim", "budgets", "--duration", "2s", "--steps", "2", "--quiet"}
	code, text1, _ := runCLI(t, args...)
	_, text2, _ := runCLI(t, append(args, "--parallel", "1")...)
	if code != exitOK || text1 != text2 || !strings.Contains(text1, "3-retries") {
		t.Fatalf("text not reproducible (exit %d):\n%s\n---\n%s", code, text1, text2)
	}

	code, js, _ := runCLI(t, append(args, "--json")...)
	var doc struct {
		Scenario string
		Settings map[string]string
		Rows     []map[string]any
	}
	if code != exitOK {
		t.Fatalf("--json exit %d", code)
	}
	if err := json.Unmarshal([]byte(js), &doc); err != nil {
		t.Fatalf("--json: %v\n%s", err, js)
	}
	rows := 3 * len(strings.Split(doc.Settings["strategy"], ","))
	if doc.Scenario != "budgets" || rows < 18 || len(doc.Rows) != rows || doc.Settings["seed"] != "1" {
		t.Fatalf("--json: %+v", doc)
	}
	if l, ok := doc.Rows[5]["load"].(float64); !ok || l < 1 {
		t.Fatalf("row 5 load %v", doc.Rows[5]["load"])
	}

	code, cs, _ := runCLI(t, append(args, "--csv")...)
	recs, err := csv.NewReader(strings.NewReader(cs)).ReadAll()
	if code != exitOK || err != nil || len(recs) != len(doc.Rows)+1 || recs[0][0] != "strategy" {
		t.Fatalf("--csv (exit %d, %v): %q", code, err, cs)
	}
}

func TestSimSeedChangesOutput(t *testing.T) {
	_, a, _ := runCLI(t, "sim", "outage", "--seed", "1", "--quiet")
	_, b, _ := runCLI(t, "sim", "outage", "--seed", "2", "--quiet")
	if a == b {
		t.Fatal("seeds 1 and 2 printed the same")
	}
}

func TestSimReportPathIsDirectory(t *testing.T) {
	dir := t.TempDir()
	code, out, errs := runCLI(t, "sim", "outage", "--report", dir)
	if code != exitUsage || out != "" || !strings.Contains(errs, "directory") {
		t.Fatalf("exit %d stdout %q stderr %q", code, out, errs)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("left files behind: %v", entries)
	}
}

// TestSimProgress: progress stays silent for the first two seconds of a
// sweep, then rewrites one line, and clears it at the end.
func TestSimProgress(t *testing.T) {
	var b bytes.Buffer
	p := &progress{w: &b, name: "brooker2015", start: time.Now()}
	p.update(1, 100)
	if b.Len() != 0 {
		t.Fatalf("printed before 2 s: %q", b.String())
	}
	p.start = time.Now().Add(-3 * time.Second)
	p.update(50, 100)
	if !strings.Contains(b.String(), "\rbrooker2015: 50/100 runs (50%)") {
		t.Fatalf("got %q", b.String())
	}
	p.finish()
	if !strings.HasSuffix(b.String(), "\r\033[K") {
		t.Fatalf("line not cleared: %q", b.String())
	}
	if isTerminal(&b) {
		t.Fatal("a buffer is not a terminal")
	}
	var nilp *progress
	nilp.finish() // no progress: nothing to clear
}

func TestVersion(t *testing.T) {
	code, out, errOut := runCLI(t, "version")
	if code != exitOK || !strings.HasPrefix(out, "stagger ") || errOut != "" {
		t.Errorf("version: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	for _, args := range [][]string{{"version", "extra"}, {"version", "--bogus"}} {
		code, out, errOut := runCLI(t, args...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, "stagger version:") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2", args, code, out, errOut)
		}
	}
	if code, out, _ := runCLI(t, "version", "--help"); code != exitOK || !strings.Contains(out, "Usage: stagger version") {
		t.Errorf("version --help: exit %d, %q", code, out)
	}
}
