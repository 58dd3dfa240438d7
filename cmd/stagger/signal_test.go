package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// buildStagger builds the command and its companion stagger-store into one
// temporary directory, as go install does, and returns stagger's path.
func buildStagger(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the command")
	}
	dir := t.TempDir()
	out, err := exec.Command("go", "build", "-o", dir+string(filepath.Separator), ".", "./"+companionName).CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return filepath.Join(dir, "stagger")
}

// A second SIGINT ends `queue work` at once, while its first only began a
// shutdown that would wait --grace (10 minutes here) for a running --exec
// command; the command's process group is killed too. The worker is run
// through stagger, which hands it to stagger-store by exec, so the signals
// reach the worker itself. Also when the
// process was started with SIGINT ignored, as a script's background job is:
// then the default action the first signal's handler could restore is
// "ignore".
func TestSecondSignalEndsAtOnce(t *testing.T) {
	bin := buildStagger(t)
	for _, ignored := range []bool{false, true} {
		t.Run("ignored="+strconv.FormatBool(ignored), func(t *testing.T) {
			dir := t.TempDir()
			db := filepath.Join(dir, "q.db")
			if out, err := exec.Command(bin, "queue", "enqueue", "--db", db, "--id", "slow").CombinedOutput(); err != nil {
				t.Fatalf("queue enqueue: %v\n%s", err, out)
			}
			pidFile := filepath.Join(dir, "pid")
			script := "echo $$ > " + pidFile + ".tmp && mv " + pidFile + ".tmp " + pidFile + " && exec sleep 600"
			prefix := ""
			if ignored {
				prefix = `trap "" INT; `
			}
			cmd := exec.Command("/bin/sh", "-c", prefix+`exec "$0" "$@"`, bin,
				"queue", "work", "--db", db, "--grace", "10m", "--exec", script)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan struct{})
			var err error
			go func() {
				err = cmd.Wait()
				close(exited)
			}()
			t.Cleanup(func() {
				cmd.Process.Kill()
				<-exited
			})
			var child int
			for deadline := time.Now().Add(time.Minute); child == 0; time.Sleep(20 * time.Millisecond) {
				if b, err := os.ReadFile(pidFile); err == nil {
					child, _ = strconv.Atoi(strings.TrimSpace(string(b)))
				}
				if time.Now().After(deadline) {
					t.Fatalf("the --exec command never started: %s", stderr.String())
				}
			}
			// Two signals (repeated: two sent at the same instant may
			// reach the process as one), and a generous bound: the
			// single-signal shutdown would take 10 minutes.
			tick := time.NewTicker(500 * time.Millisecond)
			defer tick.Stop()
			limit := time.After(time.Minute)
			cmd.Process.Signal(os.Interrupt)
		wait:
			for {
				select {
				case <-exited:
					break wait
				case <-tick.C:
					cmd.Process.Signal(os.Interrupt)
				case <-limit:
					t.Fatalf("still running a minute after repeated SIGINTs: %s", stderr.String())
				}
			}
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != exitInterrupted {
				t.Fatalf("exit: %v, want exit status %d\n%s", err, exitInterrupted, stderr.String())
			}
			// The killed command is gone (or a zombie waiting for init).
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
				st, err := os.ReadFile("/proc/" + strconv.Itoa(child) + "/stat")
				if err != nil || strings.Contains(string(st), ") Z ") || syscall.Kill(child, 0) != nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the --exec command (pid %d) outlived stagger: %s", child, st)
				}
			}
		})
	}
}
