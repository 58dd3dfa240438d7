package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
)

// The commands that need a database or a broker client run in a companion
// program, stagger-store (its package is the directory stagger-store
// below this one), so that building stagger from an empty build cache does
// not compile modernc.org/sqlite, pgx and the broker clients. This program
// lists those commands and hands each to the companion, git's way: the
// companion is found next to this program (os.Executable) or else on PATH,
// and replaces this process (exec), so it gets the arguments, the standard
// streams and the signals, and its exit code is the command's.
//
// A development build that finds no companion (`go run ./cmd/stagger queue
// …` in a clone) builds it from the source tree with `go build` (the first
// time compiles the database and broker code, later runs only check that
// it is up to date) and runs it; a release build prints how to install it
// and exits 2.

// companionName is the companion program's file name.
const companionName = "stagger-store"

// companionPackage is the companion's import path, in this module.
const companionPackage = "github.com/staggerhq/stagger/cmd/stagger/stagger-store"

// storeCommands are the commands stagger-store runs. Their summaries are
// the ones stagger-store registers (a test checks).
var storeCommands = []command{
	{Name: "queue", Summary: "durable retry queue: enqueue, run-once, work, stats, dead, requeue, show, purge, jobs, cancel, delete, pause, resume"},
	{Name: "broker", Summary: "broker dead letters: redrive (move them back, paced)"},
	{Name: "ui", Summary: "the dashboard: queues, jobs, dead letters, a proxy's counts"},
}

func init() {
	for _, c := range storeCommands {
		name := c.Name
		c.Run = func(ctx context.Context, args []string, stdout, stderr io.Writer) int {
			return runCompanion(ctx, append([]string{name}, args...), stdout, stderr)
		}
		register(c)
	}
}

// execve replaces the process; a variable so that a test can see what
// would run.
var execve = syscall.Exec

// runCompanion runs `stagger-store args...` and returns its exit code. When
// the command writes to the process's own standard streams the companion
// replaces this process, and runCompanion returns only if that fails;
// otherwise (a caller with its own writers, such as a test, or Windows,
// which has no exec) it runs as a child whose output goes to stdout and
// stderr, and the context's end interrupts it.
func runCompanion(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	path, code := findCompanion(stderr)
	if path == "" {
		return code
	}
	if runtime.GOOS != "windows" && stdout == io.Writer(os.Stdout) && stderr == io.Writer(os.Stderr) {
		err := execve(path, append([]string{path}, args...), os.Environ())
		fmt.Fprintf(stderr, "stagger %s: cannot run %s: %v\n", args[0], path, err)
		return exitFail
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	err := cmd.Run()
	var exitErr *exec.ExitError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &exitErr):
		if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return exitErr.ExitCode()
	default:
		fmt.Fprintf(stderr, "stagger %s: cannot run %s: %v\n", args[0], path, err)
		return exitFail
	}
}

// findCompanion returns the companion's path: next to this program, else on
// PATH, else, for a development build inside the source tree, built from
// it. With no companion it prints how to install one and returns "" and the
// exit code.
func findCompanion(stderr io.Writer) (path string, code int) {
	exe, err := os.Executable()
	if err == nil {
		p := filepath.Join(filepath.Dir(exe), companionName)
		if runtime.GOOS == "windows" {
			p += ".exe"
		}
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && (runtime.GOOS == "windows" || fi.Mode()&0o111 != 0) {
			return p, exitOK
		}
	}
	if p, err := exec.LookPath(companionName); err == nil {
		return p, exitOK
	}
	version := buildVersion()
	if !isRelease(version) {
		if p, code, ok := buildCompanion(stderr); ok {
			return p, code
		}
		version = "latest"
	}
	fmt.Fprintf(stderr, `stagger: the queue and broker commands run in the companion program %s,
which is neither next to this program nor on PATH. Install both programs with
  go install github.com/staggerhq/stagger/cmd/stagger/...@%s
`, companionName, version)
	return "", exitUsage
}

// buildVersion is this build's main module version ("(devel)" when none was
// recorded).
func buildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// pseudoVersion matches the time and revision part of a Go pseudo-version.
var pseudoVersion = regexp.MustCompile(`[0-9]{14}-[0-9a-f]{12}`)

// isRelease reports whether version is a released version, such as v0.1.0
// or v0.2.0-rc.1: not "(devel)", a pseudo-version or a build of a changed
// tree.
func isRelease(version string) bool {
	return strings.HasPrefix(version, "v") && !strings.Contains(version, "+") && !pseudoVersion.MatchString(version)
}

// buildCompanion builds the companion from the source tree the current
// directory is in, into the user's cache directory, with the go command.
// ok is false when there is no go command or no such source tree; then
// nothing was printed. A failed build prints the go command's errors and
// returns exitFail.
func buildCompanion(stderr io.Writer) (path string, code int, ok bool) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return "", 0, false
	}
	out, err := exec.Command(goCmd, "list", "-f", "{{.Dir}}", companionPackage).Output()
	dir := strings.TrimSpace(string(out))
	if err != nil || dir == "" {
		return "", 0, false
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	// One binary per source tree: two clones do not overwrite each other's.
	h := fnv.New64a()
	h.Write([]byte(dir))
	path = filepath.Join(cache, "stagger", "dev", fmt.Sprintf("%x", h.Sum64()), companionName)
	if _, err := os.Stat(path); err != nil {
		fmt.Fprintf(stderr, "stagger: building %s, the companion program of the queue and broker commands, from %s (the first time takes a while; go install github.com/staggerhq/stagger/cmd/stagger/... installs both programs)\n", companionName, dir)
	}
	build := exec.Command(goCmd, "build", "-o", path, companionPackage)
	build.Stdout, build.Stderr = stderr, stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(stderr, "stagger: building %s failed: %v\n", companionName, err)
		return "", exitFail, true
	}
	return path, exitOK, true
}
