package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/staggerhq/stagger/internal/simkit"
	"github.com/staggerhq/stagger/internal/timeline"
	"github.com/staggerhq/stagger/retry"
)

// fakeClock is a proxy clock the test moves.
type fakeClock struct {
	start time.Time
	off   atomic.Int64
}

func (c *fakeClock) now() time.Time      { return c.start.Add(time.Duration(c.off.Load())) }
func (c *fakeClock) set(d time.Duration) { c.off.Store(int64(d)) }
func newFakeClock() *fakeClock {
	return &fakeClock{start: time.Date(2026, 11, 3, 14, 0, 0, 0, time.UTC)}
}

// recordingProxy starts a proxy with --record in front of upstream, on a
// clock the test moves.
func recordingProxy(t *testing.T, upstream string, flags ...string) (*proxy, string, *fakeClock, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "run.jsonl")
	args := append([]string{"--upstream", upstream, "--report", "", "--record", path}, flags...)
	var out, errb bytes.Buffer
	cfg, code := parseProxy(args, &out, &errb)
	if cfg == nil {
		t.Fatalf("parseProxy: exit %d: %s", code, errb.String())
	}
	clk := newFakeClock()
	p := newProxy(cfg, clk.start)
	p.SetClock(clk.now)
	if err := p.startRecord(); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return p, srv.URL, clk, path
}

func send(t *testing.T, url string, attempt int, hdr ...string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if attempt > 0 {
		req.Header.Set("Stagger-Attempt", strconv.Itoa(attempt))
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestProxyRecord: a real upstream on 127.0.0.1 behind the proxy with a
// scheduled outage; the timeline holds each window's arrivals, first
// attempts, answers by status, refusals and latencies, and nothing else.
func TestProxyRecord(t *testing.T) {
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/fail":
			w.WriteHeader(http.StatusInternalServerError)
		case "/missing":
			w.WriteHeader(http.StatusNotFound)
		default:
			io.WriteString(w, "ok")
		}
	})
	upSrv := httptest.NewServer(up) // 127.0.0.1
	defer upSrv.Close()
	p, base, clk, path := recordingProxy(t, upSrv.URL, "--fault", "down 400ms at 0s", "--window", "200ms")
	const secret = "Bearer sekret-token-123"
	// window 0 and 1: down; 2 attempts each, the first of window 0 numbered 1
	clk.set(10 * time.Millisecond)
	send(t, base+"/", 1, "Authorization", secret)
	send(t, base+"/", 2)
	clk.set(250 * time.Millisecond)
	send(t, base+"/", 3)
	send(t, base+"/", 0)
	// window 2 is empty; window 3: up
	clk.set(650 * time.Millisecond)
	if code := send(t, base+"/", 4); code != 200 {
		t.Fatalf("after the outage: %d", code)
	}
	send(t, base+"/fail", 1)
	send(t, base+"/missing", 1)
	send(t, base+"/?token=sekret-token-123", 1)
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the timeline exists before the proxy stops: %v", err)
	}
	var out bytes.Buffer
	if err := p.stopRecord(&out); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, leak := range []string{"sekret", "Bearer", p.cfg.upstream.Host, "/fail"} {
		if bytes.Contains(raw, []byte(leak)) {
			t.Errorf("the timeline contains %q:\n%s", leak, raw)
		}
	}
	tl, err := timeline.Read(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("%v\n%s", err, raw)
	}
	if tl.Width != 200*time.Millisecond || !tl.Origin.Equal(clk.start) || len(tl.Windows) != 3 {
		t.Fatalf("%s", raw)
	}
	w0, w1, w3 := tl.Windows[0], tl.Windows[1], tl.Windows[2]
	if w0.Start != 0 || w0.Arrivals != 2 || w0.Originals != 1 || w0.Refusals != 2 || !w0.HasLatency {
		t.Errorf("window 0: %+v", w0)
	}
	if w1.Start != 200*time.Millisecond || w1.Arrivals != 2 || w1.Originals != 0 || w1.Refusals != 2 {
		t.Errorf("window 1: %+v", w1)
	}
	if w3.Start != 600*time.Millisecond || w3.Arrivals != 4 || w3.Originals != 3 || w3.Code("200") != 2 || w3.Code("500") != 1 || w3.Code("404") != 1 || w3.Failed() != 1 {
		t.Errorf("window 3: %+v", w3)
	}
	// The recording replays: the dependency refuses the first two windows.
	d, err := simkit.ReplayDependency(tl)
	if err != nil {
		t.Fatal(err)
	}
	res, err := d.Run(context.Background(), &retry.Policy{MaxAttempts: 1}, simkit.ReplayOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Originals != 4 || res.GaveUp[retry.Exhausted] != 2 {
		t.Errorf("replay: %d originals, gave up %v; want 4, with the one in the outage and the 500 exhausted", res.Originals, res.GaveUp)
	}
}

// TestProxyRecordErrors: a dropped connection counts as a reset, an
// unreachable upstream (a closed port on 127.0.0.1) as a refused
// connection, a client that leaves during a latency fault as abandoned.
func TestProxyRecordErrors(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	l.Close()
	p, base, clk, path := recordingProxy(t, closed, "--fault", "drop 100ms at 0s; slow 10s at 1s for 1s")
	clk.set(50 * time.Millisecond)
	send(t, base+"/", 1) // dropped
	clk.set(500 * time.Millisecond)
	if code := send(t, base+"/", 1); code != http.StatusBadGateway {
		t.Errorf("closed upstream: %d", code)
	}
	clk.set(1500 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/", nil)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Error("the slow fault answered within 50 ms")
	}
	cancel()
	// the handler sees the client leave a moment later
	deadline := time.Now().Add(10 * time.Second)
	for p.InFlight() > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if err := p.stopRecord(io.Discard); err != nil {
		t.Fatal(err)
	}
	tl, err := timeline.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(tl.Windows) != 3 || tl.Windows[0].Resets != 1 || tl.Windows[1].Refused != 1 || tl.Windows[2].Abandoned != 1 {
		t.Errorf("%+v", tl.Windows)
	}
}

func TestProxyRecordUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--record", filepath.Join(t.TempDir(), "missing", "r.jsonl")}, "--record"},
		{[]string{"--record", t.TempDir()}, "is a directory"},
		{[]string{"--record", filepath.Join(t.TempDir(), "r.jsonl"), "--window", "1500us", "--horizon", "1m"}, "whole milliseconds"},
	} {
		code, _, errOut := runCLI(t, append([]string{"proxy", "--upstream", "http://127.0.0.1:1"}, c.args...)...)
		if code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", c.args, code, errOut, c.want)
		}
	}
}

// TestProxyRecordBodyCut: a chunked body that stops arriving is an
// abandoned attempt in the timeline, not an answer of 200.
func TestProxyRecordBodyCut(t *testing.T) {
	upSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("a cut body reached the upstream")
	}))
	defer upSrv.Close()
	p, base, _, path := recordingProxy(t, upSrv.URL)
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(conn, "POST / HTTP/1.1\r\nHost: x\r\nStagger-Attempt: 1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab")
	conn.(*net.TCPConn).CloseWrite()
	// The server closes the connection after the handler (and the
	// recording of its attempt) has returned.
	io.Copy(io.Discard, conn)
	conn.Close()
	var out bytes.Buffer
	if err := p.stopRecord(&out); err != nil {
		t.Fatal(err)
	}
	tl, err := timeline.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(tl.Windows) != 1 || tl.Windows[0].Abandoned != 1 || tl.Windows[0].Code("200") != 0 {
		t.Fatalf("a cut body: %+v", tl.Windows)
	}
}
