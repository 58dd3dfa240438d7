package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// runCLI (in sim_test.go) runs `stagger args...` in-process.

var (
	summaryRE = regexp.MustCompile(`^([A-Z +]+): (\d+) callers, (\d+) attempts total, (\d+) accepted, peak (\d+)$`)
	attemptRE = regexp.MustCompile(`^  caller (\d+) attempt (\d+): (straight away|after (\d+ms) *) -> (DOWN|ACCEPTED|BUSY|FAILED) at (\d+)ms$`)
)

// TestLabDefault runs `stagger lab` with its defaults (plus a report path in
// a temporary directory) and checks the log's format line by line, and
// that every count in it adds up. It runs on real time, so it asserts counts
// and format, not timings.
func TestLabDefault(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the default lab on real time (~3 s); skipped with -short")
	}
	t.Chdir(t.TempDir())
	code, out, errOut := runCLI(t, "lab")
	if code != exitOK {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	type block struct {
		title                        string
		callers, total, accepted, pk int
		lines, acceptedLines         int
		waitWidths                   map[int]bool
		lastAttempt                  map[string]int
	}
	var blocks []*block
	var cur *block
	var tableSeen, reportSeen bool
	for _, line := range strings.Split(out, "\n") {
		if m := summaryRE.FindStringSubmatch(line); m != nil {
			n := func(i int) int { v, _ := strconv.Atoi(m[i]); return v }
			cur = &block{title: m[1], callers: n(2), total: n(3), accepted: n(4), pk: n(5),
				waitWidths: map[int]bool{}, lastAttempt: map[string]int{}}
			blocks = append(blocks, cur)
			continue
		}
		if strings.HasPrefix(line, "  caller ") {
			m := attemptRE.FindStringSubmatch(line)
			if m == nil || cur == nil {
				t.Fatalf("attempt line not in the log's format: %q", line)
			}
			cur.lines++
			if m[5] == "ACCEPTED" {
				cur.acceptedLines++
			}
			a, _ := strconv.Atoi(m[2])
			if a != cur.lastAttempt[m[1]]+1 {
				t.Errorf("caller %s: attempt %d follows %d", m[1], a, cur.lastAttempt[m[1]])
			}
			cur.lastAttempt[m[1]] = a
			if (a == 1) != (m[3] == "straight away") {
				t.Errorf("attempt %d: %q", a, m[3])
			}
			if a > 1 {
				cur.waitWidths[len(strings.TrimPrefix(m[3], "after "))] = true
			}
			continue
		}
		if strings.Contains(line, "attempts received") {
			tableSeen = true
		}
		if line == "report: "+defaultReport {
			reportSeen = true
		}
	}
	if len(blocks) != 2 || blocks[0].title != "RETRY IMMEDIATELY" || blocks[1].title != "EXPONENTIAL + JITTER" {
		t.Fatalf("want the two default strategies, got %d blocks:\n%s", len(blocks), out)
	}
	for _, b := range blocks {
		if b.callers != 4 || b.accepted != 4 || b.acceptedLines != 4 || len(b.lastAttempt) != 4 {
			t.Errorf("%s: %+v", b.title, b)
		}
		if b.lines != b.total {
			t.Errorf("%s: %d attempt lines, summary says %d attempts", b.title, b.lines, b.total)
		}
		if b.pk < 1 || b.pk > b.total {
			t.Errorf("%s: peak %d of %d attempts", b.title, b.pk, b.total)
		}
		if len(b.waitWidths) != 1 {
			t.Errorf("%s: waits padded to %d different widths, want one", b.title, len(b.waitWidths))
		}
	}
	if blocks[0].total <= blocks[1].total {
		t.Errorf("immediate (%d attempts) did not cost more than expo-full (%d)", blocks[0].total, blocks[1].total)
	}
	if !tableSeen || !reportSeen {
		t.Errorf("table shown %v, report line %v:\n%s", tableSeen, reportSeen, out)
	}
	if fi, err := os.Stat(defaultReport); err != nil || fi.Size() == 0 {
		t.Errorf("default report: %v", err)
	}
	if errOut != "" {
		t.Errorf("stderr: %s", errOut)
	}
}

// TestLabJSON checks the JSON shape and that its numbers agree with each
// other; --json writes no report unless asked.
func TestLabJSON(t *testing.T) {
	t.Chdir(t.TempDir())
	code, out, errOut := runCLI(t, "lab", "--json", "--callers", "3", "--outage", "150ms", "--latency", "2ms",
		"--strategy", "immediate", "--strategy", "expo-full,constant+budget")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, out)
	}
	if raw["window_ms"] != 200.0 || raw["callers"] != 3.0 || raw["outage_ms"] != 150.0 || raw["latency_ms"] != 2.0 {
		t.Errorf("top level: %v", raw)
	}
	strategies, ok := raw["strategies"].([]any)
	if !ok || len(strategies) != 3 {
		t.Fatalf("strategies: %v", raw["strategies"])
	}
	wantNames := []string{"immediate", "expo-full", "constant+budget"}
	for i, s := range strategies {
		m := s.(map[string]any)
		for _, key := range []string{"name", "callers", "attempts", "accepted", "peak", "distinct_waits", "last_accept_ms",
			"rejected", "agree", "timeline", "attempt_log", "gave_up", "attempts_per_request"} {
			if _, ok := m[key]; !ok {
				t.Errorf("strategy %d lacks %q", i, key)
			}
		}
		if m["name"] != wantNames[i] || m["callers"] != 3.0 {
			t.Errorf("strategy %d: name %v callers %v", i, m["name"], m["callers"])
		}
		for _, key := range []string{"attempts", "accepted", "peak", "distinct_waits", "last_accept_ms"} {
			if _, isNum := m[key].(float64); !isNum {
				t.Errorf("%s.%s = %#v, want a number", m["name"], key, m[key])
			}
		}
		attempts := int(m["attempts"].(float64))
		log := m["attempt_log"].([]any)
		if len(log) != attempts || int(m["caller_attempts"].(float64)) != attempts || m["agree"] != true {
			t.Errorf("%s: attempts %d, log %d, caller_attempts %v, agree %v", m["name"], attempts, len(log), m["caller_attempts"], m["agree"])
		}
		sum, acc := 0, 0
		for _, b := range m["timeline"].([]any) {
			w := b.(map[string]any)
			sum += int(w["accepted"].(float64) + w["rejected"].(float64))
			acc += int(w["accepted"].(float64))
		}
		if sum != attempts || acc != int(m["accepted"].(float64)) {
			t.Errorf("%s: timeline holds %d attempts (%d accepted), want %d (%v)", m["name"], sum, acc, attempts, m["accepted"])
		}
	}
	if _, err := os.Stat(defaultReport); !os.IsNotExist(err) {
		t.Errorf("--json wrote %s (%v)", defaultReport, err)
	}

	// --quiet drops the attempt log; an explicit --report is honoured.
	code, out, _ = runCLI(t, "lab", "--json", "--quiet", "--callers", "2", "--outage", "50ms", "--latency", "0s",
		"--strategy", "expo", "--report", "x.html")
	if code != exitOK || strings.Contains(out, "attempt_log") {
		t.Errorf("--quiet: exit %d, log present %v", code, strings.Contains(out, "attempt_log"))
	}
	if _, err := os.Stat("x.html"); err != nil {
		t.Errorf("--report with --json: %v", err)
	}
}

// TestLabJitterCheck: full jitter over a window smaller than the 1 ms
// granularity draws 0 every time; the jitter check fails the run.
func TestLabJitterCheck(t *testing.T) {
	t.Chdir(t.TempDir())
	code, out, errOut := runCLI(t, "lab", "--strategy", "expo-full", "--base", "500us", "--max-attempts", "2",
		"--outage", "1s", "--latency", "1ms", "--report", "")
	if code != exitFail {
		t.Fatalf("exit %d, want %d\n%s\n%s", code, exitFail, out, errOut)
	}
	first, _, _ := strings.Cut(errOut, "\n")
	if first != "expo-full: every wait was identical — jitter is not doing anything (4 waits, 1 distinct)" {
		t.Errorf("stderr starts with %q", first)
	}
	if !strings.Contains(out, "after 0ms -> DOWN") {
		t.Errorf("log does not show the zero waits:\n%s", out)
	}
	// Strategies without jitter are not held to it.
	code, _, errOut = runCLI(t, "lab", "--strategy", "constant", "--max-attempts", "3", "--outage", "1s",
		"--latency", "1ms", "--base", "5ms", "--report", "", "--quiet")
	if code != exitOK {
		t.Errorf("constant: exit %d: %s", code, errOut)
	}
}

func TestLabBadFlags(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	cases := []struct {
		args []string
		flag string
	}{
		{[]string{"--callers", "-1"}, "--callers"},
		{[]string{"--callers", "0"}, "--callers"},
		{[]string{"--callers", "true"}, "--callers"},
		{[]string{"--callers", "NaN"}, "--callers"},
		{[]string{"--callers", "1.5"}, "--callers"},
		{[]string{"--callers", "1e3"}, "--callers"},
		{[]string{"--callers", "99999"}, "--callers"},
		{[]string{"--callers="}, "--callers"},
		{[]string{"--window", "0"}, "--window"},
		{[]string{"--window", "0s"}, "--window"},
		{[]string{"--window", "-1s"}, "--window"},
		{[]string{"--window", "NaN"}, "--window"},
		{[]string{"--window", "Inf"}, "--window"},
		{[]string{"--window", "200"}, "--window"},
		{[]string{"--window", "true"}, "--window"},
		{[]string{"--outage", "-700ms"}, "--outage"},
		{[]string{"--outage", "+Inf"}, "--outage"},
		{[]string{"--outage", "2h"}, "--outage"},
		{[]string{"--latency", "-5ms"}, "--latency"},
		{[]string{"--latency", "NaN"}, "--latency"},
		{[]string{"--latency", "false"}, "--latency"},
		{[]string{"--ramp", "-1ms"}, "--ramp"},
		{[]string{"--strategy", "nope"}, "--strategy"},
		{[]string{"--strategy", "expo+nope"}, "--strategy"},
		{[]string{"--strategy", ""}, "--strategy"},
		{[]string{"--strategy", "immediate,,expo"}, "--strategy"},
		{[]string{"--strategy", "immediate", "--strategy", "immediate"}, "--strategy"},
		{[]string{"--max-attempts", "0"}, "--max-attempts"},
		{[]string{"--max-attempts", "-3"}, "--max-attempts"},
		{[]string{"--seed", "-1"}, "--seed"},
		{[]string{"--seed", "1.5"}, "--seed"},
		{[]string{"--base", "0s"}, "--base"},
		{[]string{"--cap", "10ms"}, "--cap"},
		{[]string{"--budget-initial", "201"}, "--budget-initial"},
		{[]string{"--bulkhead", "0"}, "--bulkhead"},
		{[]string{"--capacity", "-1"}, "--capacity"},
		{[]string{"--attempt-timeout", "NaN"}, "--attempt-timeout"},
		{[]string{"--json=maybe"}, "--json"},
		{[]string{"--frobnicate"}, "--frobnicate"},
		{[]string{"--callers"}, "--callers"},
		{[]string{"extra"}, `"extra"`},
	}
	for _, c := range cases {
		code, out, errOut := runCLI(t, append([]string{"lab"}, c.args...)...)
		if code != exitUsage {
			t.Errorf("%v: exit %d, want %d", c.args, code, exitUsage)
		}
		if !strings.Contains(errOut, c.flag) {
			t.Errorf("%v: stderr does not name %s: %q", c.args, c.flag, errOut)
		}
		if out != "" {
			t.Errorf("%v: wrote to stdout: %q", c.args, out)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("bad flags left files behind: %v", entries)
	}
}

func TestLabHelp(t *testing.T) {
	code, out, errOut := runCLI(t, "lab", "--help")
	if code != exitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	for _, f := range []string{"--callers", "--outage", "--latency", "--window", "--strategy", "--seed",
		"--max-attempts", "--json", "--report", "--quiet", "--ramp", "--base", "--cap", "--budget-initial",
		"--bulkhead", "--capacity", "--attempt-timeout", "expo-full", "+budget"} {
		if !strings.Contains(out, f) {
			t.Errorf("--help does not mention %s", f)
		}
	}
	if strings.Count(out, "Usage: stagger lab") != 1 {
		t.Errorf("usage printed %d times", strings.Count(out, "Usage: stagger lab"))
	}
	// The top-level usage lists the subcommand.
	_, out, _ = runCLI(t, "--help")
	if !strings.Contains(out, "lab") {
		t.Errorf("stagger --help does not list lab:\n%s", out)
	}
}

// TestLabReportFailure: a report that could not be written (its directory
// is missing, or it names a directory) is refused with exit 2 before the
// lab runs, and leaves no file behind.
func TestLabReportFailure(t *testing.T) {
	dir := t.TempDir()
	for _, path := range []string{filepath.Join(dir, "missing-dir", "r.html"), dir} {
		code, out, errOut := runCLI(t, "lab", "--callers", "1", "--outage", "0s", "--latency", "0s", "--strategy", "immediate",
			"--quiet", "--report", path)
		if code != exitUsage || !strings.Contains(errOut, "--report") || out != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 2 naming --report, nothing run", path, code, out, errOut)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("left %v behind", entries)
	}
}

// TestBoolFlagMessage: a bad boolean says what a boolean is.
func TestBoolFlagMessage(t *testing.T) {
	code, _, errOut := runCLI(t, "lab", "--json=2")
	if code != exitUsage || !strings.Contains(errOut, `invalid boolean value "2" for --json: want true or false`) {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = runCLI(t, "sim", "outage", "--parallel", "x")
	if code != exitUsage || !strings.Contains(errOut, "--parallel: want a whole number") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

// TestCheckReportPath: a report may go into any existing directory, the
// current one included, under any file name the platform allows.
func TestCheckReportPath(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	ok := []string{"r.html", filepath.Join(dir, "r.html"), filepath.Join(".", "r.html")}
	if runtime.GOOS != "windows" {
		ok = append(ok, `a\b.html`) // one file name in the current directory
	}
	for _, p := range ok {
		if err := checkReportPath(p); err != nil {
			t.Errorf("%q: %v", p, err)
		}
	}
	for _, p := range []string{dir, filepath.Join(dir, "missing", "r.html")} {
		if err := checkReportPath(p); err == nil {
			t.Errorf("%q: accepted", p)
		}
	}
}
