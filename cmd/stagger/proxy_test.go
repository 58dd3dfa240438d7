package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/internal/faultproxy"
	"github.com/staggerhq/stagger/internal/labkit"
	"github.com/staggerhq/stagger/internal/report"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retryhttp"
)

// upstream is a service behind the proxy that counts what reaches it.
type upstream struct {
	srv   *httptest.Server
	calls atomic.Int64
}

func newUpstream(t *testing.T, h http.HandlerFunc) *upstream {
	t.Helper()
	u := &upstream{}
	if h == nil {
		h = func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok "+r.URL.Path) }
	}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.calls.Add(1)
		h(w, r)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

// startProxy runs the proxy handler on a loopback server in front of up.
func startProxy(t *testing.T, up *upstream, faults ...string) (*proxy, string) {
	t.Helper()
	var args []string
	for _, f := range faults {
		args = append(args, "--fault", f)
	}
	return startProxyFlags(t, up, args...)
}

// startProxyFlags is startProxy with any flags.
func startProxyFlags(t *testing.T, up *upstream, flags ...string) (*proxy, string) {
	t.Helper()
	args := append([]string{"--upstream", up.srv.URL, "--report", ""}, flags...)
	var out, errb bytes.Buffer
	cfg, code := parseProxy(args, &out, &errb)
	if cfg == nil {
		t.Fatalf("parseProxy: exit %d: %s", code, errb.String())
	}
	p := newProxy(cfg, time.Now())
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return p, srv.URL
}

// deref is *v, or 0 for nil (a number the stats have no value for).
func deref[T int | float64](v *T) T {
	if v == nil {
		return 0
	}
	return *v
}

func getStats(t *testing.T, base string) faultproxy.Stats {
	t.Helper()
	resp, err := http.Get(base + statsPath + "?timeline=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s faultproxy.Stats
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestProxyForwardsAndCounts(t *testing.T) {
	up := newUpstream(t, nil)
	_, base := startProxy(t, up)
	for i := range 3 {
		req, _ := http.NewRequest("GET", base+"/orders/7", nil)
		req.Header.Set(labkit.HeaderRequestID, fmt.Sprintf("r%d", i%2))
		req.Header.Set(retryhttp.AttemptHeader, fmt.Sprint(i/2+1))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "ok /orders/7" {
			t.Fatalf("got %d %q", resp.StatusCode, b)
		}
	}
	s := getStats(t, base)
	if s.Total != 3 || s.Accepted != 3 || deref(s.Requests) != 2 || deref(s.MaxAttempts) != 2 || up.calls.Load() != 3 {
		t.Errorf("stats %+v (upstream %d): want 3 attempts accepted, 2 requests, at most 2 by one", s, up.calls.Load())
	}
	if s.ByAttempt["1"] != 2 || s.ByAttempt["2"] != 1 {
		t.Errorf("by attempt %v", s.ByAttempt)
	}
	if getStats(t, base).Total != 3 {
		t.Error("reading the stats was counted as an attempt")
	}
}

// The schedule is read at each attempt's arrival: drive the proxy's clock.
func TestProxyFaultSchedule(t *testing.T) {
	up := newUpstream(t, nil)
	p, base := startProxy(t, up, "down 700ms at 2s; drop 1s at 5s; retry-after 1500ms")
	var at atomic.Int64
	p.SetClock(func() time.Time { return p.StartTime().Add(time.Duration(at.Load())) })
	// Fresh connections: Go's transport silently resends a GET once when a
	// reused connection dies — a hidden retry the proxy would count.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	send := func(t0 time.Duration) (int, string, error) {
		at.Store(int64(t0))
		resp, err := client.Get(base + "/")
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, resp.Header.Get("Retry-After"), nil
	}
	for _, c := range []struct {
		at     time.Duration
		status int // 0: dropped
		after  string
	}{
		{0, 200, ""},
		{1999 * time.Millisecond, 200, ""},
		{2 * time.Second, 503, "2"},
		{2699 * time.Millisecond, 503, "2"},
		{2700 * time.Millisecond, 200, ""},
		{5 * time.Second, 0, ""},
		{6 * time.Second, 200, ""},
	} {
		code, after, err := send(c.at)
		if c.status == 0 {
			if err == nil {
				t.Errorf("at %v: got %d, want the connection dropped", c.at, code)
			}
			continue
		}
		if err != nil || code != c.status || after != c.after {
			t.Errorf("at %v: %d Retry-After %q (%v), want %d %q", c.at, code, after, err, c.status, c.after)
		}
	}
	s := getStats(t, base)
	if s.Total != 7 || s.Accepted != 4 || s.Down != 2 || s.Dropped != 1 || up.calls.Load() != 4 {
		t.Errorf("stats %+v, upstream %d: want 7 = 4 accepted + 2 down + 1 dropped, upstream 4", s, up.calls.Load())
	}
}

func TestProxyCap(t *testing.T) {
	release := make(chan struct{})
	var entered sync.WaitGroup
	entered.Add(2)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		entered.Done()
		<-release
	})
	_, base := startProxy(t, up, "cap 2; retry-after 1s")
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if resp, err := http.Get(base + "/"); err == nil {
				resp.Body.Close()
			}
		}()
	}
	entered.Wait()
	resp, err := http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get(labkit.HeaderOutcome) != "busy" || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("third attempt: %d outcome %q, want 503 busy", resp.StatusCode, resp.Header.Get(labkit.HeaderOutcome))
	}
	if s := getStats(t, base); s.InFlight != 2 || s.Busy != 1 {
		t.Errorf("in flight %d, busy %d; want 2, 1", s.InFlight, s.Busy)
	}
	close(release)
	wg.Wait()
	if s := getStats(t, base); s.Total != 3 || s.Accepted != 2 || s.Busy != 1 || s.InFlight != 0 {
		t.Errorf("stats %+v", s)
	}
}

func TestProxyUpstreamFailures(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) })
	_, base := startProxy(t, up)
	resp, err := http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	up.srv.Close() // now unreachable
	resp, err = http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 502 {
		t.Errorf("unreachable upstream: %d, want 502", resp.StatusCode)
	}
	if s := getStats(t, base); s.Total != 2 || s.Failed != 2 {
		t.Errorf("stats %+v: want both attempts failed", s)
	}
}

func TestProxyBodyLimit(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			w.WriteHeader(http.StatusRequestEntityTooLarge)
		}
	})
	var out, errb bytes.Buffer
	cfg, _ := parseProxy([]string{"--upstream", up.srv.URL, "--max-body", "10"}, &out, &errb)
	srv := httptest.NewServer(newProxy(cfg, time.Now()))
	defer srv.Close()
	resp, err := http.Post(srv.URL, "text/plain", strings.NewReader(strings.Repeat("x", 11)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || up.calls.Load() != 0 {
		t.Errorf("oversized body: %d, upstream %d; want 413 before the upstream", resp.StatusCode, up.calls.Load())
	}
}

func TestParseProxyRejects(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		args []string
		want string
	}{
		{nil, "--upstream is required"},
		{[]string{"--upstream", "ftp://x"}, `--upstream ftp://x: want an http or https URL`},
		{[]string{"--upstream", "http://"}, `want an http or https URL with a host`},
		{[]string{"--upstream", "http://u:secret@x"}, `want an http or https URL`},
		{[]string{"--upstream", "http://x", "--listen", "nonsense"}, `--listen "nonsense": want host:port`},
		{[]string{"--upstream", "http://x", "--fault", "down 1s at soon"}, `--fault "down 1s at soon": want "down D at T": time "soon"`},
		{[]string{"--upstream", "http://x", "--fault", "cap 0"}, `--fault "cap 0": cap: want a whole number`},
		{[]string{"--upstream", "http://x", "--window", "0s"}, `--window`},
		{[]string{"--upstream", "http://x", "--window", "NaN"}, `--window`},
		{[]string{"--upstream", "http://x", "--max-body", "-1"}, `--max-body`},
		{[]string{"--upstream", "http://x", "--max-body", "true"}, `--max-body`},
		{[]string{"--upstream", "http://x", "--duration", "-5s"}, `--duration`},
		{[]string{"--upstream", "http://x", "--id-header", "bad header"}, `--id-header`},
		{[]string{"--upstream", "http://x", "--bogus"}, `unknown flag --bogus`},
		{[]string{"--upstream", "http://x", "--horizon", "100ms"}, `--horizon 100ms: want between the --window (200ms)`},
		{[]string{"--upstream", "http://x", "--window", "1ms", "--horizon", "720h"}, `--horizon 720h0m0s: want between`},
		{[]string{"--upstream", "http://x", "--max-requests", "0"}, `--max-requests`},
		{[]string{"--upstream", "http://x", "--max-conns", "0"}, `--max-conns`},
		{[]string{"--upstream", "http://x", "--max-conns", "1.5"}, `--max-conns`},
		{[]string{"--upstream", "http://x", "--read-timeout", "0s"}, `--read-timeout`},
		{[]string{"--upstream", "http://x", "--read-header-timeout", "-1s"}, `--read-header-timeout`},
		{[]string{"--upstream", "http://x", "--idle-timeout", "Inf"}, `--idle-timeout`},
		{[]string{"--upstream", "http://x", "extra"}, `unexpected argument "extra"`},
		{[]string{"--upstream", "http://x", "--report", filepath.Join(dir, "missing", "r.html")}, `--report: directory of`},
		{[]string{"--upstream", "http://x", "--report", dir}, `--report: ` + dir + ` is a directory`},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		rep := filepath.Join(dir, "r.html")
		code := run(context.Background(), append([]string{"proxy", "--report", rep}, c.args...), &out, &errb)
		if code != exitUsage || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 naming %q", c.args, code, errb.String(), c.want)
		}
		if _, err := os.Stat(rep); err == nil {
			t.Errorf("%q: a report was written for a bad command line", c.args)
		}
	}
	// Secrets in the upstream URL never reach the output.
	var out, errb bytes.Buffer
	run(context.Background(), []string{"proxy", "--upstream", "http://user:hunter2@x"}, &out, &errb)
	if strings.Contains(errb.String()+out.String(), "hunter2") {
		t.Errorf("the password was printed: %s", errb.String())
	}
}

func TestProxyHelp(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"proxy", "--help"}, &out, &errb); code != exitOK {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"down D at T", "retry-after D", "--upstream", statsPath,
		"--read-timeout D", "(default 1m0s)", "--read-header-timeout D", "(default 10s)",
		"--idle-timeout D", "--max-conns N", "(default 1024)", "--horizon D", "--max-requests N"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help lacks %q", want)
		}
	}
}

// runProxyCLI starts `stagger proxy` in-process and returns its address.
func runProxyCLI(t *testing.T, ctx context.Context, args ...string) (addr string, done <-chan int, stdout *syncBuffer) {
	t.Helper()
	pr, pw := io.Pipe()
	stdout = &syncBuffer{}
	ch := make(chan int, 1)
	go func() {
		ch <- run(ctx, append([]string{"proxy", "--listen", "127.0.0.1:0"}, args...), io.MultiWriter(pw, stdout), stdout)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("no first line: %v (%s)", err, stdout.String())
	}
	go io.Copy(io.Discard, pr)
	f := strings.Fields(line)
	for _, w := range f {
		if strings.HasPrefix(w, "http://127.0.0.1:") {
			return strings.TrimPrefix(w, "http://"), ch, stdout
		}
	}
	t.Fatalf("no address in %q", line)
	return "", nil, nil
}

// The command runs until its context ends (SIGINT/SIGTERM in main), then
// prints the summary and writes the report.
func TestProxyCommandWritesReportOnExit(t *testing.T) {
	up := newUpstream(t, nil)
	rep := filepath.Join(t.TempDir(), "proxy.html")
	ctx, cancel := context.WithCancel(context.Background())
	addr, done, out := runProxyCLI(t, ctx, "--upstream", up.srv.URL, "--report", rep, "--fault", "down 1h at 0s")
	for range 2 {
		resp, err := http.Get("http://" + addr + "/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("exit %d: %s", code, out.String())
	}
	if !strings.Contains(out.String(), "2 attempts, 0 accepted, 2 down") {
		t.Errorf("summary: %s", out.String())
	}
	html, err := os.ReadFile(rep)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`<figure class="figure wide">`, `<svg class="chart wide"`, `data-title="attempts arriving at the proxy"`, `class="shade"`, `<g class="series" data-name="down"`, `<table class="summary">`, "down 1h at 0s"} {
		if !bytes.Contains(html, []byte(want)) {
			t.Errorf("report lacks %s", want)
		}
	}
}

// A real process: SIGTERM ends it with the report written.
func TestProxyProcessSIGTERM(t *testing.T) {
	cliChild()
	up := newUpstream(t, nil)
	rep := filepath.Join(t.TempDir(), "proxy.html")
	cmd, r, line := startCLIChild(t, "TestProxyProcessSIGTERM", "proxy", "--listen", "127.0.0.1:0", "--upstream", up.srv.URL, "--report", rep)
	var addr string
	for _, w := range strings.Fields(line) {
		if strings.HasPrefix(w, "http://127.0.0.1:") {
			addr = w
			break
		}
	}
	resp, err := http.Get(addr + "/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cmd.Process.Signal(syscall.SIGTERM)
	rest, _ := io.ReadAll(r)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v\n%s", err, rest)
	}
	if !strings.Contains(string(rest), "1 attempts, 1 accepted") {
		t.Errorf("summary: %s", rest)
	}
	if _, err := os.Stat(rep); err != nil {
		t.Errorf("no report after SIGTERM: %v", err)
	}
}

// Real clients, counted by the proxy.

func requireCurl(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("curl")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("curl is not installed (CI=true)")
		}
		t.Skip("curl is not installed")
	}
	return p
}

func TestCurlRetriesThroughProxy(t *testing.T) {
	if testing.Short() {
		t.Skip("curl waits whole seconds between retries")
	}
	curl := requireCurl(t)
	cases := []struct {
		name     string
		faults   string
		args     []string
		attempts int
		outcome  string // the outcome of every attempt
	}{
		// curl retries a 503 as transient: --retry 2 is 3 attempts.
		{"503 --retry 2", "down 1h at 0s", []string{"--retry", "2", "--retry-delay", "1"}, 3, "down"},
		// Without --retry, one attempt.
		{"503 no retry", "down 1h at 0s", nil, 1, "down"},
		// curl waits what Retry-After says (1 s here) and still counts: 2 attempts.
		{"503 Retry-After --retry 1", "down 1h at 0s; retry-after 1s", []string{"--retry", "1"}, 2, "down"},
		// A dropped connection is not "transient" for curl unless --retry-all-errors.
		{"drop --retry 2", "drop 1h at 0s", []string{"--retry", "2", "--retry-delay", "1"}, 1, "dropped"},
		{"drop --retry-all-errors", "drop 1h at 0s", []string{"--retry", "1", "--retry-delay", "1", "--retry-all-errors"}, 2, "dropped"},
		// Success: nothing to retry.
		{"ok --retry 3", "", []string{"--retry", "3"}, 1, "accepted"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			up := newUpstream(t, nil)
			var faults []string
			if c.faults != "" {
				faults = append(faults, c.faults)
			}
			_, base := startProxy(t, up, faults...)
			// -o to a real file: curl truncates its output before a retry,
			// which fails on /dev/null and ends the retries.
			body := filepath.Join(t.TempDir(), "body")
			args := append([]string{"-s", "-o", body, "-H", labkit.HeaderRequestID + ": curl-1", "--max-time", "20"}, c.args...)
			exec.Command(curl, append(args, base+"/")...).Run() // the exit code is curl's verdict, not ours
			s := getStats(t, base)
			if s.Total != c.attempts || deref(s.Requests) != 1 || deref(s.MaxAttempts) != c.attempts {
				t.Errorf("proxy counted %d attempts of %d requests (max %d), want %d of 1", s.Total, deref(s.Requests), deref(s.MaxAttempts), c.attempts)
			}
			got := map[string]int{"accepted": s.Accepted, "down": s.Down, "busy": s.Busy, "dropped": s.Dropped, "failed": s.Failed}
			if got[c.outcome] != c.attempts {
				t.Errorf("outcomes %v, want all %d %s", got, c.attempts, c.outcome)
			}
			if s.Unnumbered != int64(c.attempts) || s.ByAttempt != nil {
				t.Errorf("unnumbered %d, by attempt %v: curl sends no Stagger-Attempt (want %d, null)", s.Unnumbered, s.ByAttempt, c.attempts)
			}
		})
	}
}

func TestRetryablehttpThroughProxy(t *testing.T) {
	up := newUpstream(t, nil)
	_, base := startProxy(t, up, "down 1h at 0s")
	c := retryablehttp.NewClient()
	c.RetryMax = 3
	c.RetryWaitMin, c.RetryWaitMax = time.Millisecond, 5*time.Millisecond
	c.Logger = nil
	for i := range 2 {
		req, _ := retryablehttp.NewRequest("GET", base+"/", nil)
		req.Header.Set(labkit.HeaderRequestID, fmt.Sprintf("rh-%d", i))
		_, err := c.Do(req)
		if err == nil || !strings.Contains(err.Error(), "giving up after 4 attempt(s)") {
			t.Errorf("err = %v, want go-retryablehttp to give up after 4 attempts", err)
		}
	}
	s := getStats(t, base)
	// RetryMax 3 = 4 attempts per request, every one refused.
	if s.Total != 8 || s.Down != 8 || deref(s.Requests) != 2 || deref(s.MaxAttempts) != 4 {
		t.Errorf("stats %+v: want 2 requests × 4 attempts, all down", s)
	}

	// Against a service that recovers: go-retryablehttp also retries a
	// POST without any idempotency key; stagger does not.
	up2 := newUpstream(t, nil)
	p2, base2 := startProxy(t, up2, "down 1h at 0s")
	req, _ := retryablehttp.NewRequest("POST", base2+"/charge", strings.NewReader("{}"))
	c.Do(req)
	client := &http.Client{Transport: retryhttp.New(nil, &retry.Policy{MaxAttempts: 4, Schedule: backoff.Constant(time.Millisecond)})}
	resp, err := client.Post(base2+"/charge", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if s := p2.Recorder().Stats(false); s.Total != 4+1 {
		t.Errorf("POSTs: %d attempts, want 4 (go-retryablehttp) + 1 (stagger)", s.Total)
	}
}

func TestStaggerTransportThroughProxy(t *testing.T) {
	up := newUpstream(t, nil)
	_, base := startProxy(t, up, "down 1h at 0s")
	client := &http.Client{Transport: retryhttp.New(nil, &retry.Policy{MaxAttempts: 3, Schedule: backoff.Constant(time.Millisecond)})}
	req, _ := http.NewRequest("GET", base+"/", nil)
	req.Header.Set(labkit.HeaderRequestID, "st-1")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	s := getStats(t, base)
	if s.Total != 3 || s.Down != 3 || deref(s.MaxAttempts) != 3 {
		t.Errorf("stats %+v: want 3 attempts, all down", s)
	}
	if s.ByAttempt["1"] != 1 || s.ByAttempt["2"] != 1 || s.ByAttempt["3"] != 1 {
		t.Errorf("by attempt %v, want 1, 2, 3 once each", s.ByAttempt)
	}
}

// The report's attempt-number table lists the counted numbers in order:
// none, 1, 2, …, the last with "+"; the live stats use the same names.
func TestProxyReportByAttempt(t *testing.T) {
	p, _ := startProxy(t, newUpstream(t, nil))
	for _, i := range []int{retryhttp.TrackedAttempts, 2, 0, 10, 1} {
		for range i + 1 { // i+1 attempts numbered i (0: none)
			req := httptest.NewRequest("GET", "/x", nil)
			if i > 0 {
				req.Header.Set(retryhttp.AttemptHeader, strconv.Itoa(i))
			}
			p.ServeHTTP(httptest.NewRecorder(), req)
		}
	}
	var tab *report.Table
	for _, sec := range p.reportPage("", p.Recorder().Stats(true)).Sections {
		if sec.Title == "Attempts by attempt number" {
			tab = sec.Table
		}
	}
	last := strconv.Itoa(retryhttp.TrackedAttempts)
	want := [][]string{{"none", "1"}, {"1", "2"}, {"2", "3"}, {"10", "11"}, {last + "+", strconv.Itoa(retryhttp.TrackedAttempts + 1)}}
	if tab == nil || !reflect.DeepEqual(tab.Rows, want) {
		t.Fatalf("rows %v, want %v", tab, want)
	}
	if got := p.Stats(false).ByAttempt; len(got) != 5 || got["none"] != 1 || got[last+"+"] != int64(retryhttp.TrackedAttempts+1) {
		t.Errorf("stats ByAttempt %v", got)
	}
}
