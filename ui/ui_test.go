package ui_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/budget"
	"github.com/staggerhq/stagger/limit"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/ui"
)

func newDashboard(t *testing.T, c ui.Config) *ui.Dashboard {
	t.Helper()
	d, err := ui.New(c)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// Counts, rates, amplification, give-ups by reason and gauges after a
// sample; history grows one sample per Sample and stays bounded.
func TestSampleAndHistory(t *testing.T) {
	d := newDashboard(t, ui.Config{History: 3})
	hooks, err := d.Hooks("payments")
	if err != nil {
		t.Fatal(err)
	}
	tb := &budget.TokenBucket{Initial: 20}
	cb, _ := budget.NewCircuitBreaker(budget.CircuitConfig{})
	bh, _ := limit.NewBulkhead(4)
	for _, err := range []error{d.Budget("payments", tb), d.Breaker("payments", cb), d.Limiter("payments", bh)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	p := &retry.Policy{MaxAttempts: 3, Schedule: backoff.Constant(0), Hooks: hooks, Budget: tb}
	fail := func(context.Context) error { return retry.Retryable(errors.New("down")) }
	retry.Do(context.Background(), p, fail) // 3 attempts (two retries cost 20 credits), exhausted
	retry.Do(context.Background(), p, fail) // 1 attempt, the budget refuses the retry
	bh.TryAcquire()
	t0 := time.Unix(1000, 0)
	d.Sample(t0)
	deps := d.Dependencies(true)
	if len(deps) != 1 {
		t.Fatalf("%d dependencies", len(deps))
	}
	s := deps[0].Now
	if s.AttemptsPerSec != 4 || s.RetriesPerSec != 2 || s.Amplification != 2 || s.State != "closed" ||
		s.InFlight != 1 || s.Limit != 4 || s.Level != float64(tb.Credits())/200 {
		t.Fatalf("sample %+v", s)
	}
	if g := deps[0].GiveUps; g["exhausted"] != 1 || g["budget"] != 1 || len(g) != 2 {
		t.Fatalf("give-ups %v, want exhausted 1 and budget 1", g)
	}
	for i := range 4 { // nothing new: rates drop to 0; the ring keeps 3
		d.Sample(t0.Add(time.Duration(i+1) * time.Second))
	}
	deps = d.Dependencies(true)
	h := deps[0].History
	if len(h) != 3 || h[0].T != t0.Add(2*time.Second).UnixMilli() || h[2].T != t0.Add(4*time.Second).UnixMilli() || deps[0].Now.AttemptsPerSec != 0 {
		t.Fatalf("history %+v", h)
	}
}

func TestBadInput(t *testing.T) {
	if _, err := ui.New(ui.Config{History: -1}); err == nil || !strings.Contains(err.Error(), "Config.History") {
		t.Errorf("negative History: %v", err)
	}
	if _, err := ui.New(ui.Config{History: 1 << 21}); err == nil || !strings.Contains(err.Error(), "Config.History") {
		t.Errorf("huge History: %v", err)
	}
	d := newDashboard(t, ui.Config{MaxDependencies: 1})
	for _, name := range []string{"", strings.Repeat("x", ui.MaxNameLen+1), "\xff"} {
		if _, err := d.Hooks(name); !errors.Is(err, ui.ErrInvalid) {
			t.Errorf("name %q: %v", name, err)
		}
	}
	if _, err := d.Hooks("a"); err != nil {
		t.Fatal(err)
	}
	if err := d.Budget("b", &budget.TokenBucket{}); !errors.Is(err, ui.ErrInvalid) || !strings.Contains(err.Error(), "MaxDependencies") {
		t.Errorf("one dependency too many: %v", err)
	}
}

const hostile = `<script>alert(1)</script>"'&</td><img src=x onerror=alert(2)>`

// Hostile names reach the browser only as data: escaped in every response,
// and equal to the original once decoded.
func TestHostileInput(t *testing.T) {
	d := newDashboard(t, ui.Config{})
	hooks, err := d.Hooks(hostile)
	if err != nil {
		t.Fatal(err)
	}
	hooks.OnAttempt(retry.Event{Attempt: 1})
	hooks.OnGiveUp(retry.Event{Attempt: 1, Reason: retry.Reason(250)})
	d.Sample(time.Unix(1, 0))
	srv := httptest.NewServer(d)
	defer srv.Close()
	for _, path := range []string{"/", "/app.js", "/style.css", "/api/dependencies"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d", path, resp.StatusCode)
		}
		for _, raw := range []string{"<script>alert", "<img src=x", "</td>"} {
			if strings.Contains(string(body), raw) {
				t.Errorf("%s carries %q unescaped", path, raw)
			}
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'self'") {
			t.Errorf("%s: security headers %v", path, resp.Header)
		}
		if path == "/api/dependencies" {
			if strings.ContainsAny(string(body), "<>") {
				t.Errorf("the JSON carries < or > unescaped: %s", body)
			}
			var deps []ui.Dependency
			if err := json.Unmarshal(body, &deps); err != nil || len(deps) != 1 || deps[0].Name != hostile {
				t.Fatalf("decoded %+v, %v; want the name back exactly", deps, err)
			}
		}
	}
	// The page's script writes text only: no innerHTML, no eval.
	js, _ := http.Get(srv.URL + "/app.js")
	b, _ := io.ReadAll(js.Body)
	js.Body.Close()
	for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "eval(", "document.write", "http://", "https://"} {
		if strings.Contains(strings.ReplaceAll(string(b), "http://www.w3.org/2000/svg", ""), bad) {
			t.Errorf("app.js uses %s", bad)
		}
	}
}

// Read-only: every method but GET and HEAD is refused and changes nothing.
func TestReadOnly(t *testing.T) {
	d := newDashboard(t, ui.Config{})
	d.Hooks("a")
	srv := httptest.NewServer(d)
	defer srv.Close()
	for _, m := range []string{"POST", "PUT", "DELETE", "PATCH"} {
		req, _ := http.NewRequest(m, srv.URL+"/api/dependencies", strings.NewReader(`[{"name":"b"}]`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
			t.Errorf("%s: %d %q", m, resp.StatusCode, resp.Header.Get("Allow"))
		}
	}
	if deps := d.Dependencies(false); len(deps) != 1 || deps[0].Name != "a" {
		t.Fatalf("dependencies changed: %+v", deps)
	}
	resp, _ := http.Get(srv.URL + "/nope")
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("unknown path: %d", resp.StatusCode)
	}
}

// The event stream sends the current state, then one event per sample;
// streams beyond MaxClients are refused.
func TestEvents(t *testing.T) {
	d := newDashboard(t, ui.Config{MaxClients: 1})
	hooks, _ := d.Hooks("a")
	srv := httptest.NewServer(d)
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	r := bufio.NewReader(resp.Body)
	next := func() []ui.Dependency {
		t.Helper()
		line, err := r.ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "data: ") {
			t.Fatalf("event line %q, %v", line, err)
		}
		if blank, _ := r.ReadString('\n'); blank != "\n" {
			t.Fatalf("event not ended by a blank line: %q", blank)
		}
		var deps []ui.Dependency
		if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &deps); err != nil {
			t.Fatal(err)
		}
		return deps
	}
	if deps := next(); len(deps) != 1 || deps[0].Now.T != 0 {
		t.Fatalf("first event %+v, want a before any sample", deps)
	}
	// A second stream is over the limit (the first is registered: it sent).
	if resp2, err := http.Get(srv.URL + "/events"); err != nil || resp2.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("second stream: %v %v", resp2, err)
	} else {
		resp2.Body.Close()
	}
	hooks.OnAttempt(retry.Event{Attempt: 1})
	d.Sample(time.Unix(5, 0))
	if deps := next(); deps[0].Now.T != 5000 || deps[0].Now.AttemptsPerSec != 1 {
		t.Fatalf("event after a sample %+v", deps[0].Now)
	}
}

// The history is a ring: it keeps Config.History samples per dependency
// however many are taken.
func TestHistoryBound(t *testing.T) {
	d := newDashboard(t, ui.Config{History: 50, MaxDependencies: 3})
	for _, n := range []string{"a", "b", "c"} {
		if _, err := d.Hooks(n); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Unix(0, 0)
	for i := range 130 {
		d.Sample(t0.Add(time.Duration(i) * time.Second))
	}
	for _, dp := range d.Dependencies(true) {
		if len(dp.History) != 50 || dp.History[0].T != 80_000 || dp.History[49].T != 129_000 {
			t.Fatalf("%s: %d samples from %d to %d, want 50 from 80000 to 129000", dp.Name, len(dp.History), dp.History[0].T, dp.History[len(dp.History)-1].T)
		}
	}
}

// BenchmarkHourOf100 measures the heap an hour of history (DefaultHistory
// samples) of 100 dependencies holds, and the cost of one Sample of them.
func BenchmarkHourOf100(b *testing.B) {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	d, _ := ui.New(ui.Config{})
	for i := range ui.DefaultMaxDependencies {
		d.Hooks(fmt.Sprintf("dependency-%03d", i))
	}
	t0 := time.Unix(0, 0)
	for i := range ui.DefaultHistory {
		d.Sample(t0.Add(time.Duration(i) * time.Second))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	i := ui.DefaultHistory
	for b.Loop() {
		d.Sample(t0.Add(time.Duration(i) * time.Second))
		i++
	}
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/1e6, "MB-held")
	runtime.KeepAlive(d)
}

func BenchmarkHooksPerAttempt(b *testing.B) {
	d, _ := ui.New(ui.Config{})
	h, _ := d.Hooks("bench")
	e := retry.Event{Attempt: 1}
	b.ReportAllocs()
	for b.Loop() {
		h.OnAttempt(e)
		h.OnSuccess(e)
	}
}

// Hooks, samples and readers at once (run with -race): the counts add up.
func TestConcurrent(t *testing.T) {
	d := newDashboard(t, ui.Config{History: 100})
	hooks, _ := d.Hooks("a")
	bh, _ := limit.NewBulkhead(2)
	d.Limiter("a", bh)
	srv := httptest.NewServer(d)
	defer srv.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 50 {
			d.Sample(time.Unix(int64(i), 0))
			if resp, err := http.Get(srv.URL + "/api/dependencies"); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	}()
	const n = 2000
	for range n {
		hooks.OnAttempt(retry.Event{Attempt: 1})
		hooks.OnSuccess(retry.Event{Attempt: 1})
	}
	<-done
	d.Sample(time.Unix(100, 0))
	var total float64
	for _, s := range d.Dependencies(true)[0].History {
		total += s.AttemptsPerSec
	}
	// Every attempt is counted in exactly one interval (1s: the rate is
	// the count), and the ring holds all 51 samples.
	if deps := d.Dependencies(false); deps[0].Now.T != 100_000 || total != n {
		t.Fatalf("last sample %+v, attempts in history %v, want %d", deps[0].Now, total, n)
	}
}
