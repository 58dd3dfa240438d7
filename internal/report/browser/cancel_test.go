//go:build linux

package browser

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// alive reports whether pid is a live (not zombie) process.
func alive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	i := strings.LastIndexByte(string(stat), ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}

// TestCancelKillsProcessGroup runs a fake browser that forks a helper and
// hangs, as a wedged Chromium would: cancelling the context must return
// promptly with the context's error and kill the helper too.
func TestCancelKillsProcessGroup(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "helper.pid")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	fake := writeFile(t, dir, "hanging-browser", "#!/bin/sh\nsleep 600 &\necho $! > '"+fifo+"'\nwait\n", 0o755)
	page := writeFile(t, dir, "p.html", "<p>x</p>", 0o644)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := DumpDOM(ctx, fake, page)
		errc <- err
	}()
	pidc := make(chan int, 1)
	go func() {
		b, _ := os.ReadFile(fifo) // blocks until the fake browser writes
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		pidc <- pid
	}()
	var helper int
	select {
	case helper = <-pidc:
	case err := <-errc:
		t.Fatalf("DumpDOM returned before its browser started: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the fake browser never started")
	}
	if helper <= 0 || !alive(helper) {
		t.Fatalf("helper pid %d is not running", helper)
	}
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("DumpDOM after cancel = %v, want context.Canceled", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("DumpDOM did not return after its context was cancelled")
	}
	// SIGKILL went to the whole group; give the kernel a moment to act.
	for deadline := time.Now().Add(30 * time.Second); alive(helper); {
		if time.Now().After(deadline) {
			syscall.Kill(helper, syscall.SIGKILL)
			t.Fatalf("helper %d survived the cancelled browser", helper)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
