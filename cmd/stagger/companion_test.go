package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runBin runs a built program and returns its exit code and output.
func runBin(t *testing.T, env []string, bin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = t.TempDir()
	cmd.Env = env
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("%s %q: %v", bin, args, err)
	}
	return cmd.ProcessState.ExitCode(), o.String(), e.String()
}

// stagger hands the queue and broker commands to stagger-store next to it:
// same arguments, output and exit code; its overview lists them with
// stagger-store's own summaries, and `stagger help queue` is stagger-store's
// `queue --help`.
func TestCompanionRunsStoreCommands(t *testing.T) {
	bin := buildStagger(t)
	store := filepath.Join(filepath.Dir(bin), companionName)
	env := os.Environ()
	missing := filepath.Join(t.TempDir(), "missing.db")
	for _, args := range [][]string{
		{"queue", "stats", "--db", missing},        // exit 1: no such store
		{"queue", "bogus"},                         // exit 2
		{"queue", "stats", "--db", missing, "--x"}, // exit 2: unknown flag
		{"broker", "redrive", "--help"},            // exit 0
	} {
		wantCode, wantOut, wantErr := runBin(t, env, store, args...)
		code, out, errOut := runBin(t, env, bin, args...)
		if code != wantCode || out != wantOut || errOut != wantErr {
			t.Errorf("stagger %q: exit %d, stdout %q, stderr %q; stagger-store: exit %d, %q, %q",
				args, code, out, errOut, wantCode, wantOut, wantErr)
		}
	}
	_, overview, _ := runBin(t, env, bin, "--help")
	_, storeOverview, _ := runBin(t, env, store, "--help")
	for _, c := range storeCommands {
		line := "  " + c.Name + " "
		var got, want string
		for _, l := range strings.Split(overview, "\n") {
			if strings.HasPrefix(l, line) {
				got = l
			}
		}
		for _, l := range strings.Split(storeOverview, "\n") {
			if strings.HasPrefix(l, line) {
				want = l
			}
		}
		if got == "" || got != want {
			t.Errorf("stagger --help lists %q, stagger-store --help %q", got, want)
		}
	}
	_, want, _ := runBin(t, env, store, "queue", "--help")
	if code, got, _ := runBin(t, env, bin, "help", "queue"); code != exitOK || got != want {
		t.Errorf("stagger help queue: exit %d, %q; want stagger-store queue --help: %q", code, got, want)
	}

	// In process, with writers of its own (not the process's streams), the
	// companion runs as a child; found on PATH.
	t.Setenv("PATH", filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	wantCode, _, wantErr := runBin(t, os.Environ(), store, "queue", "show", "--db", missing, "--id", "nope")
	if code, _, errOut := runCLI(t, "queue", "show", "--db", missing, "--id", "nope"); code != wantCode || errOut != wantErr {
		t.Errorf("in process: exit %d, stderr %q; stagger-store: exit %d, %q", code, errOut, wantCode, wantErr)
	}
}

// Without stagger-store next to it or on PATH, and no source tree to build
// it from, stagger says how to install it and exits 2; its own commands
// still run.
func TestCompanionMissing(t *testing.T) {
	built := buildStagger(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "stagger")
	b, err := os.ReadFile(built)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=" + dir, "HOME=" + t.TempDir()} // no go command either
	code, _, errOut := runBin(t, env, bin, "queue", "stats", "--db", "q.db")
	if code != exitUsage || !strings.Contains(errOut, "go install github.com/staggerhq/stagger/cmd/stagger/...@latest") {
		t.Errorf("exit %d, stderr %q; want 2 and the install command", code, errOut)
	}
	if code, out, _ := runBin(t, env, bin, "sim", "list"); code != exitOK || out == "" {
		t.Errorf("sim list without the companion: exit %d", code)
	}
}

func TestIsRelease(t *testing.T) {
	for v, want := range map[string]bool{
		"v0.1.0":                               true,
		"v1.2.3-rc.1":                          true,
		"(devel)":                              false,
		"":                                     false,
		"v0.1.1-0.20261201090452-fb0cc94ed7b0": false,
		"v0.0.0-20261201090452-fb0cc94ed7b0+dirty": false,
		"v0.1.0+dirty": false,
		"v0.2.0-rc.1.0.20261201090452-fb0cc94ed7b0": false,
	} {
		if got := isRelease(v); got != want {
			t.Errorf("isRelease(%q) = %v, want %v", v, got, want)
		}
	}
}
