package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/staggerhq/stagger/internal/faultproxy"
	"github.com/staggerhq/stagger/internal/labkit"
	"github.com/staggerhq/stagger/proxytest"
)

// syncBuffer is a bytes.Buffer safe for a writing process and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitLine waits until out holds a line starting with prefix and returns
// the rest of its first word.
func waitLine(t *testing.T, out *syncBuffer, prefix string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, line := range strings.Split(out.String(), "\n") {
			if rest, ok := strings.CutPrefix(line, prefix); ok {
				return strings.Fields(rest)[0]
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no line %q in %s", prefix, out.String())
	return ""
}

func ctlCall(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The control API steers the command's proxy: a fault from --fault
// answers, is removed at run time, and the thresholds fail the run with
// the numbers seen, in the summary too.
func TestProxyControlAndThresholds(t *testing.T) {
	up := newUpstream(t, nil)
	sum := filepath.Join(t.TempDir(), "summary.json")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, done, out := runProxyCLI(t, ctx, "--upstream", up.srv.URL, "--report", "", "--control", "127.0.0.1:0",
		"--fault", "status 503 retry-after=1s name=outage", "--summary", sum, "--max-amplification", "1.5", "--max-peak", "1000")
	ctl := "http://" + waitLine(t, out, "control API: http://")
	send := func() int {
		req, _ := http.NewRequest("GET", "http://"+addr+"/pay", nil)
		req.Header.Set(labkit.HeaderRequestID, "order-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for range 2 {
		if code := send(); code != 503 {
			t.Fatalf("with the fault: %d", code)
		}
	}
	if code, body := ctlCall(t, "GET", ctl+"/faults/outage", ""); code != 200 || !strings.Contains(body, `"applied": 2`) {
		t.Fatalf("GET /faults/outage: %d %s", code, body)
	}
	if code, body := ctlCall(t, "DELETE", ctl+"/faults/outage", ""); code != 204 {
		t.Fatalf("DELETE: %d %s", code, body)
	}
	if code := send(); code != 200 {
		t.Fatalf("after DELETE: %d", code)
	}
	code, body := ctlCall(t, "GET", ctl+"/stats", "")
	var s faultproxy.Stats
	if err := json.Unmarshal([]byte(body), &s); code != 200 || err != nil || s.Total != 3 || s.Down != 2 || s.Accepted != 1 || *s.MaxAttempts != 3 || s.Name != "main" {
		t.Fatalf("GET /stats: %d %v %s", code, err, body)
	}
	if code, body := ctlCall(t, "GET", ctl+"/stats/requests/order-1", ""); code != 200 || !strings.Contains(body, `"attempts": 3`) {
		t.Errorf("GET /stats/requests/order-1: %d %s", code, body)
	}
	px, err := proxytest.Connect(ctl, "main")
	if err != nil {
		t.Fatal(err)
	}
	if err := px.CheckAttempts("order-1", 3); err != nil {
		t.Error(err)
	}
	if err := px.CheckAttempts("order-1", 1); err == nil || !strings.Contains(err.Error(), `request "order-1" made 3 attempts, want 1`) {
		t.Errorf("CheckAttempts through the command's API: %v", err)
	}
	if code, body := ctlCall(t, "GET", ctl+"/faults/nope", ""); code != 404 || !strings.Contains(body, "no such fault") {
		t.Errorf("unknown fault: %d %s", code, body)
	}
	cancel()
	if code := <-done; code != exitFail {
		t.Fatalf("exit %d, want 1 (amplification 3 over 1.5): %s", code, out.String())
	}
	if !strings.Contains(out.String(), "threshold exceeded: --max-amplification 1.5: attempts per request was 3") {
		t.Errorf("the failure does not say what was seen: %s", out.String())
	}
	b, err := os.ReadFile(sum)
	if err != nil {
		t.Fatal(err)
	}
	var got proxySummary
	if err := json.Unmarshal(b, &got); err != nil || got.Passed || got.Total != 3 || len(got.Thresholds) != 2 ||
		got.Thresholds[0].Flag != "--max-peak" || !got.Thresholds[0].OK || got.Thresholds[1].OK || *got.AttemptsPerRequest != 3 {
		t.Errorf("summary: %v\n%s", err, b)
	}
	if strings.Contains(string(b), "uptime") || strings.Contains(string(b), "127.0.0.1:"+strings.Split(addr, ":")[1]) {
		t.Errorf("the summary holds what changes between runs:\n%s", b)
	}
}

// The same run without a threshold exceeded exits 0.
func TestProxyThresholdsPass(t *testing.T) {
	up := newUpstream(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	addr, done, out := runProxyCLI(t, ctx, "--upstream", up.srv.URL, "--report", "", "--max-amplification", "1", "--max-attempts", "1")
	req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
	req.Header.Set(labkit.HeaderRequestID, "r")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("exit %d: %s", code, out.String())
	}
}

func TestProxyTCPCommand(t *testing.T) {
	redis := os.Getenv("STAGGER_REDIS_ADDR")
	if redis == "" {
		redis = "127.0.0.1:6379"
	}
	if c, err := net.DialTimeout("tcp", redis, 2*time.Second); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skipf("Redis at %s is unreachable: %v", redis, err)
	} else {
		c.Close()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"proxy", "--listen", "127.0.0.1:0", "--upstream", "tcp://" + redis, "--fault", "latency 100ms", "--max-peak", "1", "--window", "1m"}, out, out)
	}()
	addr := strings.TrimPrefix(waitLine(t, out, "stagger proxy: relaying "), "tcp://")
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		io.WriteString(c, "PING\r\n")
		b := make([]byte, 7)
		if _, err := io.ReadFull(c, b); err != nil || string(b) != "+PONG\r\n" || time.Since(start) < 100*time.Millisecond {
			t.Fatalf("%q %v after %v", b, err, time.Since(start))
		}
		c.Close()
	}
	cancel()
	if code := <-done; code != exitFail || !strings.Contains(out.String(), "2 connections") || !strings.Contains(out.String(), "--max-peak 1: the peak in one 1m0s window was 2") {
		t.Fatalf("exit %d: %s", code, out.String())
	}
}

func TestProxyControlFlagsRefused(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--control", "nope"}, "--control \"nope\": want host:port"},
		{[]string{"--max-amplification", "NaN"}, "max-amplification"},
		{[]string{"--max-amplification", "-1"}, "max-amplification"},
		{[]string{"--max-peak", "true"}, "max-peak"},
		{[]string{"--fault", "status 200"}, "400 to 599"},
		{[]string{"--fault", "status 503 name=a; reset name=a"}, "exists"},
		{[]string{"--fault", "slicer 10"}, "not a fault of an HTTP proxy"},
		{[]string{"--name", "a b"}, "--name"},
	} {
		code, _, errOut := runCLI(t, append([]string{"proxy", "--upstream", "http://127.0.0.1:1"}, c.args...)...)
		if code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, %s; want 2 and %q", c.args, code, errOut, c.want)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--upstream", "tcp://127.0.0.1"}, "tcp://host:port"},
		{[]string{"--upstream", "tcp://127.0.0.1:1", "--fault", "down 1s at 0s"}, `unknown fault "down"`},
		{[]string{"--upstream", "tcp://127.0.0.1:1", "--fault", "status 503"}, "not a fault of a TCP proxy"},
	} {
		code, _, errOut := runCLI(t, append([]string{"proxy"}, c.args...)...)
		if code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, %s; want 2 and %q", c.args, code, errOut, c.want)
		}
	}
}

// go-retryablehttp through proxytest: its default policy retries a 503
// until RetryMax, and the proxy counts every attempt of the one request.
func TestProxytestRetryablehttp(t *testing.T) {
	up := newUpstream(t, nil)
	p := proxytest.Start(t, up.srv.URL, proxytest.WithGroupBy("Idempotency-Key"), proxytest.WithWindow(time.Minute))
	if _, err := p.AddFault("status 503 p=1"); err != nil {
		t.Fatal(err)
	}
	c := retryablehttp.NewClient()
	c.RetryMax, c.RetryWaitMin, c.RetryWaitMax, c.Logger = 3, time.Millisecond, 5*time.Millisecond, nil
	req, _ := retryablehttp.NewRequest("POST", p.URL+"/charge", strings.NewReader("{}"))
	req.Header.Set("Idempotency-Key", "charge-1")
	if resp, err := c.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("want retries exhausted, got %d", resp.StatusCode)
	}
	if err := p.CheckAttempts("charge-1", 4); err != nil {
		t.Error(err)
	}
	if err := p.CheckAmplification(4); err != nil {
		t.Error(err)
	}
}

// Through the command's own listener, a reset fault resets the connection
// (the client reads ECONNRESET), a cut one cuts the body, and both count
// as dropped.
func TestProxyResetAndCutCommand(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, strings.Repeat("y", 5000)) })
	ctx, cancel := context.WithCancel(context.Background())
	addr, done, out := runProxyCLI(t, ctx, "--upstream", up.srv.URL, "--report", "", "--fault", "reset path=/reset", "--fault", "cut 10 path=/cut")
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	_, err := client.Get("http://" + addr + "/reset")
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("reset: %v, want ECONNRESET", err)
	}
	resp, err := client.Get("http://" + addr + "/cut")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if len(b) != 10 || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("cut: read %d bytes, %v", len(b), err)
	}
	cancel()
	if code := <-done; code != exitOK || !strings.Contains(out.String(), "2 attempts, 0 accepted, 0 down, 0 busy, 2 dropped") {
		t.Errorf("exit %d: %s", code, out.String())
	}
}
