package main

import (
	"net"
	"os"
	"strings"
	"testing"
)

// TestQueueWorkWaitsForDB: `queue work` with PostgreSQL down at start
// waits (--db-wait), logging each wait without the password, and exits 1
// once the wait is spent; SIGINT during the wait exits 130; a bad
// --db-wait is bad usage.
func TestQueueWorkWaitsForDB(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // a closed port: the server is down
	db := "postgres://postgres:S3cretPW@" + addr + "/test"
	code, _, errOut := runCLI(t, "queue", "work", "--db", db, "--db-wait", "300ms", "--exec", "true")
	if code != exitFail || !strings.Contains(errOut, "database not ready, waiting") || strings.Contains(errOut, "S3cretPW") {
		t.Fatalf("exit %d, stderr:\n%s\nwant exit 1, a wait logged, no password", code, errOut)
	}
	if code, errOut := runWithSignal(t, os.Interrupt, "queue", "work", "--db", db, "--db-wait", "1h", "--exec", "true"); code != exitInterrupted {
		t.Fatalf("SIGINT while waiting: exit %d, want %d (%s)", code, exitInterrupted, errOut)
	}
	if code, _, errOut := runCLI(t, "queue", "work", "--db", db, "--db-wait", "-1s", "--exec", "true"); code != exitUsage || !strings.Contains(errOut, "--db-wait") {
		t.Fatalf("--db-wait -1s: exit %d, stderr %q; want 2 naming --db-wait", code, errOut)
	}
}
