package faultproxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// redisAddr is a real Redis (STAGGER_REDIS_ADDR, default 127.0.0.1:6379);
// the TCP faults are measured on its connections. Unreachable, the test
// skips, except under CI=true.
func redisAddr(t *testing.T) string {
	t.Helper()
	addr := os.Getenv("STAGGER_REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("Redis at %s: %v", addr, err)
		}
		t.Skipf("Redis at %s is unreachable (set STAGGER_REDIS_ADDR): %v", addr, err)
	}
	c.Close()
	return addr
}

func startTCP(t *testing.T, clauses ...string) *TCPProxy {
	t.Helper()
	p, err := StartTCP(Config{Name: "redis", Upstream: redisAddr(t), Kind: "tcp", Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	for _, c := range clauses {
		addFault(t, p.Faults(), c)
	}
	return p
}

// ping sends PING through p and reads the answer line, with a deadline.
// It reports the time from before the dial: a fault timed from the
// proxy's accept (timeout, reset-peer) then never looks early, however
// long the dial's return took.
func ping(t *testing.T, p *TCPProxy, deadline time.Duration) (string, time.Duration, error) {
	t.Helper()
	start := time.Now()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(deadline))
	if _, err := io.WriteString(c, "PING\r\n"); err != nil {
		return "", 0, err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return line, time.Since(start), err
}

func TestTCPCountsConnectionsAndBytes(t *testing.T) {
	p := startTCP(t)
	for range 3 {
		if line, _, err := ping(t, p, 10*time.Second); err != nil || line != "+PONG\r\n" {
			t.Fatalf("%q %v", line, err)
		}
	}
	waitFor(t, func() bool { return p.Stats(false).Total == 3 }, "3 connections counted")
	s := p.Stats(true)
	if s.Accepted != 3 || s.Peak != 3 || s.BytesUp != 3*6 || s.BytesDown != 3*7 || s.PeakBytes != 3*13 {
		t.Errorf("counted %+v; want 3 accepted connections, peak 3, 18 bytes up, 21 down, 39 in the peak window", s)
	}
	if len(s.Timeline) != 1 || s.Timeline[0].BytesUp != 18 || s.Timeline[0].BytesDown != 21 {
		t.Errorf("timeline %+v", s.Timeline)
	}
}

func TestTCPLatency(t *testing.T) {
	p := startTCP(t, "latency 150ms jitter=20ms")
	line, took, err := ping(t, p, 10*time.Second)
	if err != nil || line != "+PONG\r\n" || took < 130*time.Millisecond {
		t.Fatalf("%q %v after %v; want PONG after at least 130ms", line, err, took)
	}
	p.Faults().Clear()
	addFault(t, p.Faults(), "latency 150ms dir=up")
	line, took, err = ping(t, p, 10*time.Second)
	if err != nil || line != "+PONG\r\n" || took < 150*time.Millisecond {
		t.Fatalf("upstream: %q %v after %v", line, err, took)
	}
}

func TestTCPTimeoutHolds(t *testing.T) {
	p := startTCP(t, "timeout 0s")
	_, _, err := ping(t, p, 300*time.Millisecond)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("got %v; want no answer (a read deadline)", err)
	}
	p.Faults().Clear()
	addFault(t, p.Faults(), "timeout 100ms")
	_, took, err := ping(t, p, 10*time.Second)
	if err == nil || took < 100*time.Millisecond {
		t.Fatalf("got %v after %v; want the connection closed after 100ms", err, took)
	}
	waitFor(t, func() bool { return p.Stats(false).Dropped >= 1 }, "the timed-out connection counted as dropped")
}

func TestTCPResetPeer(t *testing.T) {
	p := startTCP(t, "reset-peer 50ms")
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = c.Read(make([]byte, 1))
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("got %v; want a connection reset", err)
	}
	waitFor(t, func() bool { return p.Stats(false).Dropped == 1 }, "the reset connection counted as dropped")
}

func TestTCPLimitData(t *testing.T) {
	p := startTCP(t, "limit-data 3")
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "PING\r\n")
	got, err := io.ReadAll(c)
	if string(got) != "+PO" {
		t.Fatalf("read %q, %v; want the first 3 bytes, then the end", got, err)
	}
}

func TestTCPSlicerAndBandwidth(t *testing.T) {
	p := startTCP(t, "slicer 1 delay=5ms")
	line, took, err := ping(t, p, 10*time.Second)
	if err != nil || line != "+PONG\r\n" || took < 30*time.Millisecond {
		t.Fatalf("slicer: %q %v after %v; want 7 one-byte slices 5ms apart (>= 30ms)", line, err, took)
	}
	p.Faults().Clear()
	addFault(t, p.Faults(), "bandwidth 20000 dir=up")
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	val := strings.Repeat("x", 8000)
	start := time.Now()
	io.WriteString(c, "SET stagger:faultproxy:bw "+val+"\r\n")
	line, err = bufio.NewReader(c).ReadString('\n')
	if took := time.Since(start); err != nil || line != "+OK\r\n" || took < 380*time.Millisecond {
		t.Fatalf("bandwidth: %q %v after %v; want +OK after at least 0.4s (8 KB at 20 KB/s)", line, err, took)
	}
}

func TestTCPSlowClose(t *testing.T) {
	p := startTCP(t, "slow-close 200ms")
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	io.WriteString(c, "QUIT\r\n")
	got, err := io.ReadAll(c)
	if took := time.Since(start); err != nil || string(got) != "+OK\r\n" || took < 200*time.Millisecond {
		t.Fatalf("read %q, %v after %v; want +OK and the close 200ms later", got, err, took)
	}
}

func TestTCPUpstreamDown(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	p, err := StartTCP(Config{Name: "gone", Upstream: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, _ := net.Dial("tcp", p.Addr())
	io.ReadAll(c)
	c.Close()
	waitFor(t, func() bool { return p.Stats(false).Failed == 1 }, "a connection to a closed port counted as failed")
}

// TestTCPChangeUnderTraffic flips a fault between kinds while four clients
// open connections: every connection and every byte is counted.
func TestTCPChangeUnderTraffic(t *testing.T) {
	p := startTCP(t)
	stop, changed := make(chan struct{}), make(chan int)
	go func() {
		clauses := []string{"latency 1ms", "slicer 2", "latency 0s jitter=1ms dir=both"}
		n := 0
		for ; ; n++ {
			select {
			case <-stop:
				changed <- n
				return
			default:
			}
			f, _ := p.Faults().Parse(clauses[n%len(clauses)])
			p.Faults().Put("flip", f)
			if n%5 == 4 {
				p.Faults().Remove("flip")
			}
			time.Sleep(time.Millisecond)
		}
	}()
	const clients, each = 4, 40
	errs := make(chan error, clients)
	for range clients {
		go func() {
			for range each {
				line, _, err := ping(t, p, 10*time.Second)
				if err == nil && line != "+PONG\r\n" {
					err = errors.New("answer " + line)
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range clients {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	n := <-changed
	waitFor(t, func() bool { return p.Stats(false).Total == clients*each }, "every connection counted")
	s := p.Stats(false)
	if s.Accepted != clients*each || s.BytesUp != clients*each*6 || s.BytesDown != clients*each*7 {
		t.Errorf("after %d changes: %d connections, %d accepted, %d bytes up, %d down; want %d, %d, %d, %d",
			n, s.Total, s.Accepted, s.BytesUp, s.BytesDown, clients*each, clients*each, clients*each*6, clients*each*7)
	}
	if got, err := p.Faults().Get("flip"); err == nil && got.Matched > int64(clients*each) {
		t.Errorf("the fault matched %d of %d connections", got.Matched, clients*each)
	}
}

// TestByteWindows: bytes counted from many goroutines add up exactly, per
// window and in all; the peak survives its window leaving the ring.
func TestByteWindows(t *testing.T) {
	start := time.Unix(0, 0)
	b := newByteWindows(start, time.Second)
	at := func(sec int) time.Time { return start.Add(time.Duration(sec) * time.Second) }
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				b.add(at(i%3), int64(g), 1) // windows 0, 1, 2
			}
		}()
	}
	wg.Wait()
	up, down, peak, peakAt := b.totals()
	if up != 28*1000 || down != 8000 {
		t.Errorf("totals %d up, %d down; want 28000, 8000", up, down)
	}
	tl := []Window{{StartMS: 0}, {StartMS: 1000}, {StartMS: 2000}, {StartMS: 3000}}
	b.fill(tl)
	if tl[0].BytesDown != 8*334 || tl[1].BytesDown != 8*333 || tl[3].BytesDown != 0 || tl[0].BytesUp != 28*334 {
		t.Errorf("windows %+v", tl)
	}
	if peak != 36*334 || peakAt != 0 {
		t.Errorf("peak %d at %d ms; want %d at 0", peak, peakAt, 36*334)
	}
	b.add(at(maxByteWindows+5), 1, 0) // window 0 leaves the ring; window 5 too
	b.add(at(2), 1, 0)                // too old for the ring: in the totals only
	if up2, _, peak2, at2 := b.totals(); up2 != up+2 || peak2 != peak || at2 != 0 {
		t.Errorf("after the ring moved: up %d, peak %d at %d", up2, peak2, at2)
	}
	tl = []Window{{StartMS: 2000}, {StartMS: (maxByteWindows + 5) * 1000}}
	b.fill(tl)
	if tl[0].BytesUp != 0 || tl[1].BytesUp != 1 {
		t.Errorf("windows after the ring moved %+v", tl)
	}
}

// streamEcho writes n bytes of a pattern through p to an echo server on
// one connection, in writes of varied sizes, calling before each write
// with the bytes written so far, and checks every byte comes back in order.
func streamEcho(t *testing.T, p *TCPProxy, n int, before func(written int)) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(60 * time.Second))
	data := make([]byte, n)
	for i := range data {
		data[i] = byte(i*7 + i/251)
	}
	done := make(chan error, 1)
	go func() {
		got, err := io.ReadAll(c)
		if err == nil && !bytes.Equal(got, data) {
			err = errors.New("the echo differs from what was sent")
		}
		done <- err
	}()
	for i, size := 0, 1; i < n; size = size*3%70001 + 1 {
		if before != nil {
			before(i)
		}
		k := min(size, n-i)
		if _, err := c.Write(data[i : i+k]); err != nil {
			t.Fatal(err)
		}
		i += k
	}
	c.(*net.TCPConn).CloseWrite()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestTCPSpliceCountsEveryByte: with no fault the relay splices in the
// kernel, and counts each byte each way, in all and in its window; a
// fault added and removed in the middle of a stream loses and adds none.
func TestTCPSpliceCountsEveryByte(t *testing.T) {
	if runtime.GOOS == "linux" && !canSplice(&net.TCPConn{}, &net.TCPConn{}) {
		t.Fatal("two TCP connections are not spliced")
	}
	p, err := StartTCP(Config{Name: "echo", Upstream: echoServer(t), Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const n = 3<<20 + 7
	streamEcho(t, p, n, nil)
	added, removed := false, false
	streamEcho(t, p, n, func(written int) {
		if !added && written >= n/3 {
			added = true
			addFault(t, p.Faults(), "slicer 1000 dir=both name=s")
		}
		if !removed && written >= 2*n/3 {
			removed = true
			p.Faults().Remove("s")
		}
	})
	waitFor(t, func() bool { return p.Stats(false).Total == 2 }, "both connections counted")
	s := p.Stats(true)
	if s.Accepted != 2 || s.BytesUp != 2*n || s.BytesDown != 2*n {
		t.Fatalf("%d accepted, %d bytes up, %d down; want 2, %d, %d", s.Accepted, s.BytesUp, s.BytesDown, 2*n, 2*n)
	}
	var up, down int64
	for _, w := range s.Timeline {
		up, down = up+w.BytesUp, down+w.BytesDown
	}
	if up != 2*n || down != 2*n {
		t.Errorf("the windows hold %d bytes up, %d down; want %d each", up, down, 2*n)
	}
}

// TestTCPFaultAddedMidConnection: a fault added while a connection is
// open acts on it from its next chunk, counted once.
func TestTCPFaultAddedMidConnection(t *testing.T) {
	p, err := StartTCP(Config{Name: "echo", Upstream: echoServer(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := openEcho(t, p)
	// 2 bytes have passed down: 3 more may.
	addFault(t, p.Faults(), "limit-data 5 name=cut")
	io.WriteString(c, "wxyz")
	got, err := io.ReadAll(c)
	if string(got) != "wxy" || err == nil {
		t.Fatalf("after the fault: read %q, %v; want \"wxy\", then a reset", got, err)
	}
	waitFor(t, func() bool { return p.Stats(false).Dropped == 1 }, "the cut connection counted as dropped")
	if fc, _ := p.Faults().Get("cut"); fc.Matched != 1 || fc.Applied != 1 {
		t.Errorf("the fault counts %+v; want it matched and applied once", fc)
	}
	if s := p.Stats(false); s.BytesUp != 6 || s.BytesDown != 5 {
		t.Errorf("%d bytes up, %d down; want 6, 5", s.BytesUp, s.BytesDown)
	}
}

// TestTCPResetPeerChangedMidConnection: a reset-peer changed with Put
// while a connection is open acts with its new wait, counted from when
// the connection opened, on the connection's next chunk.
func TestTCPResetPeerChangedMidConnection(t *testing.T) {
	p, err := StartTCP(Config{Name: "echo", Upstream: echoServer(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	addFault(t, p.Faults(), "reset-peer 10m name=cut")
	c := openEcho(t, p)
	f, err := p.Faults().Parse("reset-peer 1ms")
	if err != nil {
		t.Fatal(err)
	}
	if added, err := p.Faults().Put("cut", f); err != nil || added {
		t.Fatalf("Put = %v, %v; want the fault replaced", added, err)
	}
	io.WriteString(c, "cd")
	if got, err := io.ReadAll(c); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("after the change: read %q, %v; want a reset well before the 10-minute wait", got, err)
	}
	if fc, _ := p.Faults().Get("cut"); fc.Matched != 1 || fc.Applied != 1 {
		t.Errorf("the fault counts %+v; want it matched and applied once", fc)
	}
}

// openEcho opens a connection through p to an echo server and sends "ab"
// through it and back; the connection closes with the test, and its
// reads and writes fail after 10 s.
func openEcho(t *testing.T, p *TCPProxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 2)
	if _, err := io.WriteString(c, "ab"); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ab" {
		t.Fatalf("echo through the proxy: %q %v", buf, err)
	}
	return c
}
