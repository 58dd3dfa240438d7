package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/staggerhq/stagger/internal/faultproxy"
	"github.com/staggerhq/stagger/internal/labkit"
)

// serveProxy runs the proxy as runProxy does — its http.Server behind the
// connection cap — on 127.0.0.1, with the given extra flags. It returns
// the proxy, its address, and the most connections it ever had open.
func serveProxy(t *testing.T, up *upstream, flags ...string) (p *proxy, addr string, maxOpen *atomic.Int64) {
	t.Helper()
	var out, errb bytes.Buffer
	cfg, code := parseProxy(append([]string{"--upstream", up.srv.URL, "--report", ""}, flags...), &out, &errb)
	if cfg == nil {
		t.Fatalf("parseProxy: exit %d: %s", code, errb.String())
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p = newProxy(cfg, time.Now())
	// Counted under the limit listener, as its slots are: a connection is
	// open from the inner Accept to its Close, which comes before the slot
	// is freed. (The server's ConnState hooks run after the close, so they
	// can see the next connection first.)
	counted := &countingListener{Listener: l, max: &atomic.Int64{}}
	maxOpen = counted.max
	p.Serve(counted, p.serverConfig())
	t.Cleanup(func() { p.Close() })
	return p, l.Addr().String(), maxOpen
}

// dial opens a raw connection; reads on it give up after a minute, a bound
// that only keeps a broken build from hanging (no assertion is timed).
func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(time.Minute))
	t.Cleanup(func() { c.Close() })
	return c
}

// requireClosedByServer reads c to its end and fails unless the proxy
// closed it (end of file or a reset, not the safety deadline).
func requireClosedByServer(t *testing.T, c net.Conn, what string) {
	t.Helper()
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("%s: the proxy kept the connection open", what)
	}
}

func get(t *testing.T, c net.Conn, br *bufio.Reader) *http.Response {
	t.Helper()
	if _, err := io.WriteString(c, "GET /x HTTP/1.1\r\nHost: proxy\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// An idle keep-alive connection is closed after --idle-timeout, which frees
// its slot under --max-conns: a second client gets in only then.
func TestProxyIdleTimeoutAndConnectionCap(t *testing.T) {
	up := newUpstream(t, nil)
	p, addr, maxOpen := serveProxy(t, up, "--idle-timeout", "50ms", "--max-conns", "1")
	idle := dial(t, addr)
	if resp := get(t, idle, bufio.NewReader(idle)); resp.StatusCode != 200 {
		t.Fatalf("first client: %d", resp.StatusCode)
	}
	// The first client now sits idle. The second waits for its slot.
	second := dial(t, addr)
	if resp := get(t, second, bufio.NewReader(second)); resp.StatusCode != 200 {
		t.Fatalf("second client: %d", resp.StatusCode)
	}
	requireClosedByServer(t, idle, "idle keep-alive connection")
	if m := maxOpen.Load(); m != 1 {
		t.Errorf("%d connections were open at once, want at most --max-conns 1", m)
	}
	if s := p.Stats(false); s.Total != 2 || s.Accepted != 2 {
		t.Errorf("stats %+v", s)
	}
}

// A client that sends its headers and never finishes them is cut off after
// --read-header-timeout without being counted: no attempt arrived.
func TestProxySlowHeaders(t *testing.T) {
	up := newUpstream(t, nil)
	p, addr, _ := serveProxy(t, up, "--read-header-timeout", "50ms")
	c := dial(t, addr)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: proxy\r\nX-Slow: ")
	requireClosedByServer(t, c, "half-sent headers")
	if s := p.Stats(false); s.Total != 0 || up.calls.Load() != 0 {
		t.Errorf("stats %+v, upstream %d: want nothing counted", s, up.calls.Load())
	}
}

// A client that sends its body a byte at a time is cut off after
// --read-timeout; the attempt counts as abandoned: the client never
// finished sending it.
func TestProxySlowBody(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			w.WriteHeader(http.StatusBadRequest)
		}
	})
	p, addr, _ := serveProxy(t, up, "--read-timeout", "100ms")
	c := dial(t, addr)
	io.WriteString(c, "POST / HTTP/1.1\r\nHost: proxy\r\nContent-Length: 100\r\n\r\nx")
	requireClosedByServer(t, c, "slow body")
	s := waitStats(t, p, 1)
	if s.Abandoned != 1 || s.Total != 1 {
		t.Errorf("stats %+v: want the attempt abandoned", s)
	}
}

// waitStats polls until n attempts have been counted (the proxy counts an
// attempt when its handler ends, after the client saw the end).
func waitStats(t *testing.T, p *proxy, n int) faultproxy.Stats {
	t.Helper()
	for range 10_000 {
		if s := p.Stats(false); s.Total >= n {
			return s
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("the proxy never counted %d attempts: %+v", n, p.Stats(false))
	return faultproxy.Stats{}
}

// A client that goes away — while the upstream works, while a latency fault
// holds it, or while the answer is being copied — is counted as abandoned,
// not failed, and counted at all.
func TestProxyAbandoned(t *testing.T) {
	big := strings.Repeat("x", 8<<20) // more than the sockets buffer
	for _, c := range []struct {
		name, fault string
		upstream    func(entered chan<- struct{}) http.HandlerFunc
		readHeaders bool // the client reads the response headers, then leaves
	}{
		{name: "upstream working", upstream: func(entered chan<- struct{}) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				entered <- struct{}{}
				<-r.Context().Done()
			}
		}},
		{name: "latency fault", fault: "latency 1h"},
		{name: "copying the answer", readHeaders: true, upstream: func(chan<- struct{}) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", "16777216")
				w.WriteHeader(200)
				for range 2 {
					if _, err := io.WriteString(w, big); err != nil {
						return
					}
				}
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			entered := make(chan struct{}, 1)
			var h http.HandlerFunc
			if c.upstream != nil {
				h = c.upstream(entered)
			}
			up := newUpstream(t, h)
			var flags []string
			if c.fault != "" {
				flags = append(flags, "--fault", c.fault)
			}
			p, addr, _ := serveProxy(t, up, flags...)
			conn := dial(t, addr)
			io.WriteString(conn, "GET / HTTP/1.1\r\nHost: proxy\r\n"+labkit.HeaderRequestID+": r1\r\n\r\n")
			switch {
			case c.readHeaders:
				if _, err := http.ReadResponse(bufio.NewReader(conn), nil); err != nil {
					t.Fatal(err)
				}
			case c.upstream != nil:
				<-entered
			default:
				for p.InFlight() == 0 { // inside the latency fault
					time.Sleep(time.Millisecond)
				}
			}
			conn.Close()
			s := waitStats(t, p, 1)
			if s.Abandoned != 1 || s.Failed != 0 || s.Accepted != 0 || deref(s.Requests) != 1 {
				t.Errorf("stats %+v: want 1 abandoned attempt of 1 request", s)
			}
		})
	}
}

// The cap itself, on a listener of in-memory connections in a synctest
// bubble: Accept waits while n are open and returns when one closes.
func TestLimitListener(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inner := &pipeListener{conns: make(chan net.Conn, 8), done: make(chan struct{})}
		for range 4 {
			a, b := net.Pipe()
			defer b.Close()
			inner.conns <- a
		}
		l := newLimitListener(inner, 2)
		c1, _ := l.Accept()
		l.Accept()
		var third net.Conn
		var mu sync.Mutex
		go func() {
			c, _ := l.Accept()
			mu.Lock()
			third = c
			mu.Unlock()
		}()
		synctest.Wait()
		mu.Lock()
		if third != nil || l.open() != 2 {
			t.Errorf("a third connection was accepted with 2 open (cap 2)")
		}
		mu.Unlock()
		c1.Close()
		c1.Close() // a second Close frees nothing more
		synctest.Wait()
		mu.Lock()
		if third == nil || l.open() != 2 {
			t.Errorf("closing one did not let the third in (open %d)", l.open())
		}
		mu.Unlock()
		// Close wakes an Accept waiting for a slot.
		errc := make(chan error, 1)
		go func() { _, err := l.Accept(); errc <- err }()
		synctest.Wait()
		l.Close()
		if err := <-errc; !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
		}
	})
}

// pipeListener hands out the connections queued in conns.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error   { l.once.Do(func() { close(l.done) }); return nil }
func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{} }

// countingListener counts its open connections and keeps the peak.
type countingListener struct {
	net.Listener
	open atomic.Int64
	max  *atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	n := l.open.Add(1)
	for m := l.max.Load(); n > m && !l.max.CompareAndSwap(m, n); m = l.max.Load() {
	}
	return &countedConn{Conn: c, l: l}, nil
}

type countedConn struct {
	net.Conn
	l    *countingListener
	once sync.Once
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}
