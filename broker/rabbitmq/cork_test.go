package rabbitmq

import (
	"bytes"
	"io"
	"net"
	"testing"
)

// recordConn is a net.Conn that records its writes.
type recordConn struct {
	net.Conn
	writes [][]byte
}

func (r *recordConn) Write(p []byte) (int, error) {
	r.writes = append(r.writes, bytes.Clone(p))
	return len(p), nil
}

// TestCorkConn: writes go through at once, except between cork and the
// matching uncork (nested), whose writes go out in order in one write.
func TestCorkConn(t *testing.T) {
	r := &recordConn{}
	c := &corkConn{Conn: r}
	write := func(s string) {
		if n, err := c.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	write("a")
	c.cork()
	write("b")
	c.cork()
	write("c")
	if err := c.uncork(); err != nil {
		t.Fatal(err)
	}
	write("d")
	if len(r.writes) != 1 {
		t.Fatalf("%d writes while corked, want 1 (before the cork)", len(r.writes))
	}
	if err := c.uncork(); err != nil {
		t.Fatal(err)
	}
	c.cork()
	if err := c.uncork(); err != nil { // nothing held: no write
		t.Fatal(err)
	}
	write("e")
	want := []string{"a", "bcd", "e"}
	if len(r.writes) != len(want) {
		t.Fatalf("writes %q, want %q", r.writes, want)
	}
	for i, w := range want {
		if string(r.writes[i]) != w {
			t.Fatalf("writes %q, want %q", r.writes, want)
		}
	}
}

// failConn fails every write.
type failConn struct{ net.Conn }

func (failConn) Write([]byte) (int, error) { return 0, io.ErrClosedPipe }

// TestCorkConnError: the failed write of what a cork held is uncork's
// error.
func TestCorkConnError(t *testing.T) {
	c := &corkConn{Conn: failConn{}}
	c.cork()
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := c.uncork(); err != io.ErrClosedPipe {
		t.Fatalf("uncork: %v, want %v", err, io.ErrClosedPipe)
	}
}
