package retryhttp_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/budget"
	"github.com/staggerhq/stagger/limit"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retryhttp"
)

func TestRetriesUntilSuccessAndSendsAttemptHeader(t *testing.T) {
	base := &fakeBase{answers: statuses(503, 502, 200)}
	tr := retryhttp.New(base, noWait(5))
	resp, err := get(t, context.Background(), tr, "http://svc/x")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d, want 200", resp.StatusCode)
	}
	seen := base.seenCopy()
	if len(seen) != 3 {
		t.Fatalf("attempts = %d, want 3", len(seen))
	}
	for i, s := range seen {
		if want := fmt.Sprint(i + 1); s.attempt != want {
			t.Errorf("attempt %d sent %s=%q, want %q", i+1, retryhttp.AttemptHeader, s.attempt, want)
		}
	}
	// The failed responses were drained and closed; the returned one is untouched.
	for i, b := range base.bodies[:2] {
		if !b.closed.Load() || !b.eof.Load() {
			t.Errorf("failed response %d: closed=%v drained=%v, want both", i+1, b.closed.Load(), b.eof.Load())
		}
	}
	if last := base.bodies[2]; last.closed.Load() || last.read.Load() != 0 {
		t.Errorf("returned response was read (%d bytes) or closed (%v) by the transport", last.read.Load(), last.closed.Load())
	}
	body, _ := io.ReadAll(resp.Body)
	if string(body) != "OK" {
		t.Errorf("body %q, want OK", body)
	}
}

func TestDefaultStatusClasses(t *testing.T) {
	cases := []struct {
		status   int
		attempts int
		reason   retry.Reason // give-up reason; NoReason for success
	}{
		{200, 1, retry.NoReason},
		{204, 1, retry.NoReason},
		{304, 1, retry.NoReason},
		{408, 3, retry.Exhausted},
		{429, 3, retry.Exhausted},
		{502, 3, retry.Exhausted},
		{503, 3, retry.Exhausted},
		{504, 3, retry.Exhausted},
		{400, 1, retry.PermanentError},
		{401, 1, retry.PermanentError},
		{404, 1, retry.PermanentError},
		{409, 1, retry.PermanentError},
		{501, 1, retry.PermanentError},
		{500, 1, retry.UnknownError},
		{505, 1, retry.UnknownError},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.status), func(t *testing.T) {
			base := &fakeBase{answers: statuses(c.status)}
			rec := &recorder{}
			p := noWait(3)
			p.Hooks = rec.hooks()
			resp, err := get(t, context.Background(), retryhttp.New(base, p), "http://svc/")
			if err != nil {
				t.Fatalf("err %v: a response must come back as a response", err)
			}
			resp.Body.Close()
			if resp.StatusCode != c.status {
				t.Errorf("status %d, want %d", resp.StatusCode, c.status)
			}
			if n := base.attempts(); n != c.attempts {
				t.Errorf("attempts = %d, want %d", n, c.attempts)
			}
			if c.reason == retry.NoReason {
				if len(rec.success) != 1 || len(rec.giveUps) != 0 {
					t.Errorf("success hooks %d, give-up hooks %d; want 1, 0", len(rec.success), len(rec.giveUps))
				}
				return
			}
			if g := rec.lastGiveUp(t); g.Reason != c.reason || g.Attempt != c.attempts {
				t.Errorf("gave up (%v) after %d, want (%v) after %d", g.Reason, g.Attempt, c.reason, c.attempts)
			}
		})
	}
}

func TestOnlySafeRequestsAreRetried(t *testing.T) {
	cases := []struct {
		name     string
		method   string
		key      bool
		body     bool
		getBody  bool
		attempts int
	}{
		{"GET", "GET", false, false, false, 3},
		{"HEAD", "HEAD", false, false, false, 3},
		{"OPTIONS", "OPTIONS", false, false, false, 3},
		{"DELETE", "DELETE", false, false, false, 3},
		{"PUT replayable", "PUT", false, true, true, 3},
		{"PUT without GetBody", "PUT", false, true, false, 1},
		{"POST", "POST", false, true, true, 1},
		{"PATCH", "PATCH", false, true, true, 1},
		{"POST with Idempotency-Key", "POST", true, true, true, 3},
		{"POST with key, no GetBody", "POST", true, true, false, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			base := &fakeBase{answers: statuses(503)}
			req, err := http.NewRequest(c.method, "http://svc/orders", nil)
			if err != nil {
				t.Fatal(err)
			}
			if c.body {
				const payload = `{"order":42}`
				req.Body = io.NopCloser(strings.NewReader(payload))
				req.ContentLength = int64(len(payload))
				if c.getBody {
					req.GetBody = func() (io.ReadCloser, error) {
						return io.NopCloser(strings.NewReader(payload)), nil
					}
				}
			}
			if c.key {
				req.Header.Set("Idempotency-Key", "k-1")
			}
			resp, err := retryhttp.New(base, noWait(3)).RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			seen := base.seenCopy()
			if len(seen) != c.attempts {
				t.Fatalf("attempts = %d, want %d", len(seen), c.attempts)
			}
			if c.body {
				for i, s := range seen {
					if s.body != `{"order":42}` {
						t.Errorf("attempt %d sent body %q: the body was not replayed", i+1, s.body)
					}
				}
			}
			if req.Header.Get(retryhttp.AttemptHeader) != "" {
				t.Error("the caller's request was modified (attempt header set on it)")
			}
		})
	}
}

func TestErrorClasses(t *testing.T) {
	dnsMissing := &net.DNSError{Err: "no such host", Name: "nope.invalid", IsNotFound: true}
	cases := []struct {
		name     string
		err      error
		attempts int
		reason   retry.Reason
	}{
		{"refused", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, 3, retry.Exhausted},
		{"reset", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, 3, retry.Exhausted},
		{"eof", io.ErrUnexpectedEOF, 3, retry.Exhausted},
		{"dns not found", &net.OpError{Op: "dial", Net: "tcp", Err: dnsMissing}, 1, retry.PermanentError},
		{"unknown", errBoom, 1, retry.UnknownError},
		{"marked permanent", retry.Permanent(errBoom), 1, retry.PermanentError},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			base := &fakeBase{answers: []answer{{err: c.err}}}
			rec := &recorder{}
			p := noWait(3)
			p.Hooks = rec.hooks()
			resp, err := get(t, context.Background(), retryhttp.New(base, p), "http://svc/")
			if resp != nil {
				t.Fatalf("got a response %d for a transport error", resp.StatusCode)
			}
			if !errors.Is(err, c.err) {
				t.Errorf("errors.Is(err, cause) is false: %v", err)
			}
			if n := base.attempts(); n != c.attempts {
				t.Errorf("attempts = %d, want %d", n, c.attempts)
			}
			if g := rec.lastGiveUp(t); g.Reason != c.reason {
				t.Errorf("reason %v, want %v", g.Reason, c.reason)
			}
			if c.reason == retry.Exhausted && !errors.Is(err, retry.ErrExhausted) {
				t.Errorf("err %v is not ErrExhausted", err)
			}
			if c.reason == retry.UnknownError && err != c.err {
				t.Errorf("unknown error came back as %v, want it unchanged", err)
			}
		})
	}
}

func TestConnectionRefusedOnLoopback(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	var dials atomic.Int64
	base := &http.Transport{DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
		dials.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, a)
	}}
	_, err = get(t, context.Background(), retryhttp.New(base, noWait(3)), "http://"+addr+"/")
	if !errors.Is(err, retry.ErrExhausted) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("err = %v, want exhausted after ECONNREFUSED", err)
	}
	if n := dials.Load(); n != 3 {
		t.Errorf("dials = %d, want 3", n)
	}
}

// A failed response is drained so its keep-alive connection is reused.
func TestFailedResponsesAreDrainedForReuse(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) < 4 {
			w.WriteHeader(503)
			io.WriteString(w, strings.Repeat("unavailable ", 100))
			return
		}
		io.WriteString(w, "ok")
	}))
	var conns atomic.Int64
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	client := &http.Client{Transport: retryhttp.New(base, noWait(4))}
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || calls.Load() != 4 {
		t.Fatalf("status %d after %d calls, want 200 after 4", resp.StatusCode, calls.Load())
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("connections = %d, want 1: failed responses were not drained", n)
	}

	// MaxDrain < 0: the transport closes without reading, so Go cannot reuse them.
	calls.Store(0)
	conns.Store(0)
	base2 := &http.Transport{}
	defer base2.CloseIdleConnections()
	tr := retryhttp.New(base2, noWait(4))
	tr.MaxDrain = -1
	resp, err = (&http.Client{Transport: tr}).Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if n := conns.Load(); n != 4 {
		t.Errorf("without draining: connections = %d, want 4 (one per attempt)", n)
	}
}

func TestRetryAfter(t *testing.T) {
	cases := []struct {
		name       string
		retryAfter string // "+3s" means an HTTP-date 3 s from now
		mode       retryhttp.AfterMode
		maxAfter   time.Duration
		timeout    time.Duration // Policy.Timeout (the call's deadline)
		attempts   int
		waited     time.Duration // virtual time between attempt 1 and 2
		reason     retry.Reason  // of the give-up after the last attempt
	}{
		{"seconds", "2", retryhttp.AfterDeadline, 0, 0, 2, 2 * time.Second, retry.Exhausted},
		{"http-date", "+3s", retryhttp.AfterDeadline, 0, 0, 2, 3 * time.Second, retry.Exhausted},
		{"past date", "-5s", retryhttp.AfterDeadline, 0, 0, 2, 0, retry.Exhausted},
		{"malformed ignored", "soon", retryhttp.AfterDeadline, 0, 0, 2, 0, retry.Exhausted},
		{"fits the deadline", "3", retryhttp.AfterDeadline, 0, 5 * time.Second, 2, 3 * time.Second, retry.Exhausted},
		{"past the deadline", "10", retryhttp.AfterDeadline, 0, 5 * time.Second, 1, 0, retry.Deadline},
		{"beyond MaxAfter past no deadline", "120", retryhttp.AfterDeadline, 0, 0, 1, 0, retry.Pushback},
		{"long but within a long deadline", "120", retryhttp.AfterDeadline, 0, time.Hour, 2, 2 * time.Minute, retry.Exhausted},
		{"capped", "3600", retryhttp.AfterCap, 2 * time.Second, 0, 2, 2 * time.Second, retry.Exhausted},
		{"capped under the cap", "1", retryhttp.AfterCap, 2 * time.Second, 0, 2, time.Second, retry.Exhausted},
		{"always, asked for", "3600", retryhttp.AfterAlways, 0, 0, 2, time.Hour, retry.Exhausted},
		{"always still keeps the deadline", "3600", retryhttp.AfterAlways, 0, time.Minute, 1, 0, retry.Deadline},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				v := c.retryAfter
				if strings.HasPrefix(v, "+") || strings.HasPrefix(v, "-") {
					d, _ := time.ParseDuration(v)
					v = time.Now().Add(d).UTC().Format(http.TimeFormat)
				}
				base := &fakeBase{answers: []answer{{status: 503, header: http.Header{"Retry-After": {v}}}}}
				rec := &recorder{}
				p := &retry.Policy{MaxAttempts: 2, Schedule: backoff.Constant(0), MaxAfter: c.maxAfter, Timeout: c.timeout, Hooks: rec.hooks()}
				tr := retryhttp.New(base, p)
				tr.RetryAfter = c.mode
				start := time.Now()
				resp, err := get(t, context.Background(), tr, "http://svc/")
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				seen := base.seenCopy()
				if len(seen) != c.attempts {
					t.Fatalf("attempts = %d, want %d", len(seen), c.attempts)
				}
				if c.attempts == 2 {
					if got := seen[1].at.Sub(seen[0].at); got != c.waited {
						t.Errorf("waited %v between attempts, want %v", got, c.waited)
					}
				} else if el := time.Since(start); el != 0 {
					t.Errorf("gave up after %v, want at once (no sleeping toward a failure)", el)
				}
				if g := rec.lastGiveUp(t); g.Reason != c.reason {
					t.Errorf("reason %v, want %v", g.Reason, c.reason)
				}
			})
		})
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"0", 0, true},
		{"5", 5 * time.Second, true},
		{" 7 ", 7 * time.Second, true},
		{"99999999999999999999999", time.Duration(1<<63 - 1), true},
		{"", 0, false},
		{"-1", 0, false},
		{"1.5", 0, false},
		{"5s", 0, false},
		{"tomorrow", 0, false},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0, true},
		{"Sat, 01 Mar 2025 12:00:30 GMT", 30 * time.Second, true},
		{"Saturday, 01-Mar-25 12:00:30 GMT", 30 * time.Second, true}, // RFC 850
		{"Sat Mar  1 12:00:30 2025", 30 * time.Second, true},         // asctime
	}
	for _, c := range cases {
		got, ok := retryhttp.ParseRetryAfter(c.in, now)
		if got != c.want || ok != c.ok {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

// One deadline for the whole call: the second attempt gets what is left,
// not a fresh AttemptTimeout.
func TestOneDeadlineSplitAcrossAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &fakeBase{answers: []answer{{block: true}}}
		rec := &recorder{}
		p := &retry.Policy{MaxAttempts: 5, Schedule: backoff.Constant(0),
			Timeout: time.Second, AttemptTimeout: 800 * time.Millisecond, Hooks: rec.hooks()}
		start := time.Now()
		_, err := get(t, context.Background(), retryhttp.New(base, p), "http://svc/")
		if !errors.Is(err, retry.ErrDeadline) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want a deadline give-up", err)
		}
		seen := base.seenCopy()
		if len(seen) != 2 {
			t.Fatalf("attempts = %d, want 2", len(seen))
		}
		if seen[0].deadline != 800*time.Millisecond || seen[1].deadline != 200*time.Millisecond {
			t.Errorf("attempt budgets %v, %v; want 800ms then the 200ms left", seen[0].deadline, seen[1].deadline)
		}
		if el := time.Since(start); el != time.Second {
			t.Errorf("call took %v, want exactly the 1s deadline", el)
		}
		if g := rec.lastGiveUp(t); g.Reason != retry.Deadline || g.Attempt != 2 {
			t.Errorf("gave up %v after %d, want deadline after 2", g.Reason, g.Attempt)
		}
	})
}

// The attempt's timeout context lives as long as the returned body: the
// caller can read the body after RoundTrip returns, and closing it ends the
// context.
func TestSuccessBodyOutlivesRoundTrip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &fakeBase{answers: []answer{{status: 200, body: "payload"}}}
		p := &retry.Policy{AttemptTimeout: time.Second}
		resp, err := get(t, context.Background(), retryhttp.New(base, p), "http://svc/")
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil || string(b) != "payload" {
			t.Fatalf("read %q, %v: the attempt's context was canceled before the body was read", b, err)
		}
		resp.Body.Close()
		if resp.Request.Context().Err() == nil {
			t.Error("closing the body did not end the attempt's context")
		}
	})
}

func TestCallerCancelStopsTheWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &fakeBase{answers: []answer{{status: 503, header: http.Header{"Retry-After": {"30"}}}}}
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(5*time.Second, cancel)
		start := time.Now()
		_, err := get(t, ctx, retryhttp.New(base, noWait(3)), "http://svc/")
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		var se *retryhttp.StatusError
		if !errors.As(err, &se) || se.StatusCode != 503 || se.After != 30*time.Second {
			t.Errorf("the give-up error does not carry the last 503 and its Retry-After: %v", err)
		}
		if el := time.Since(start); el != 5*time.Second {
			t.Errorf("returned after %v, want 5s (the cancel)", el)
		}
		if base.attempts() != 1 {
			t.Errorf("attempts = %d, want 1", base.attempts())
		}
	})
}

func TestNoRetryHeaderIsFinal(t *testing.T) {
	base := &fakeBase{answers: []answer{{status: 503, header: http.Header{
		"Retry-After": {"1"}, retryhttp.NoRetryHeader: {"1"}}}}}
	rec := &recorder{}
	p := noWait(5)
	p.Hooks = rec.hooks()
	resp, err := get(t, context.Background(), retryhttp.New(base, p), "http://svc/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if base.attempts() != 1 {
		t.Errorf("attempts = %d, want 1: %s was ignored", base.attempts(), retryhttp.NoRetryHeader)
	}
	g := rec.lastGiveUp(t)
	var se *retryhttp.StatusError
	if g.Reason != retry.PermanentError || !errors.As(g.Err, &se) || !se.NoRetry {
		t.Errorf("give-up %v (%v), want permanent with NoRetry", g.Reason, g.Err)
	}
}

func TestUpstreamOwnerMeansOneAttempt(t *testing.T) {
	base := &fakeBase{answers: statuses(503)}
	ctx := retryhttp.WithUpstreamAttempt(context.Background(), 2)
	resp, err := get(t, ctx, retryhttp.New(base, noWait(3)), "http://svc/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	seen := base.seenCopy()
	if len(seen) != 1 || seen[0].attempt != "2" {
		t.Fatalf("sent %d attempts (header %q), want 1 carrying the upstream attempt 2", len(seen), seen[0].attempt)
	}

	base = &fakeBase{answers: statuses(503)}
	tr := retryhttp.New(base, noWait(3))
	tr.NestedRetries = true
	resp, err = get(t, ctx, tr, "http://svc/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if base.attempts() != 3 {
		t.Errorf("NestedRetries: attempts = %d, want 3", base.attempts())
	}
}

func TestPerEndpointClassification(t *testing.T) {
	classify := retryhttp.Routes(nil,
		// The payments API answers 500 for transient lock timeouts.
		retryhttp.Route{Host: "payments", Classify: retryhttp.Statuses(nil, map[int]retry.Class{500: retry.ClassRetryable})},
		// The search API's 404 on /search/warmup means "not ready yet".
		retryhttp.Route{Host: "search", PathPrefix: "/search/warmup", Classify: retryhttp.Statuses(nil, map[int]retry.Class{404: retry.ClassRetryable, 503: retry.ClassPermanent})},
		// Anything under /reports treats 202 as a normal answer but 409 as ok too.
		retryhttp.Route{PathPrefix: "/reports", Classify: retryhttp.Statuses(nil, map[int]retry.Class{409: retry.ClassUnknown})},
	)
	cases := []struct {
		url      string
		status   int
		attempts int
	}{
		{"http://payments/charge", 500, 3},
		{"http://payments:8443/charge", 500, 3}, // host name without the port matches
		{"http://ledger/charge", 500, 1},        // default: 500 has no class
		{"http://search/search/warmup", 404, 3},
		{"http://search/search/warmup", 503, 1},
		{"http://search/search/q", 404, 1},
		{"http://search/search/q", 503, 3},
		{"http://any/reports/7", 409, 1},
	}
	for _, c := range cases {
		base := &fakeBase{answers: statuses(c.status)}
		tr := retryhttp.New(base, noWait(3))
		tr.Classify = classify
		resp, err := get(t, context.Background(), tr, c.url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if n := base.attempts(); n != c.attempts {
			t.Errorf("%s answering %d: attempts = %d, want %d", c.url, c.status, n, c.attempts)
		}
	}
}

func TestBudgetPerHost(t *testing.T) {
	base := &fakeBase{answers: statuses(503)}
	buckets := map[string]*budget.TokenBucket{}
	rec := &recorder{}
	p := noWait(3)
	p.Hooks = rec.hooks()
	tr := retryhttp.New(base, p)
	tr.NewBudget = func(host string) budget.Budget {
		b := &budget.TokenBucket{Initial: 20} // two retries' worth
		buckets[host] = b
		return b
	}
	call := func(host string, attempts int, reason retry.Reason) {
		t.Helper()
		before := base.attempts()
		rec.giveUps = nil
		resp, err := get(t, context.Background(), tr, "http://"+host+"/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if n := base.attempts() - before; n != attempts {
			t.Errorf("call to %s: attempts = %d, want %d", host, n, attempts)
		}
		if g := rec.lastGiveUp(t); g.Reason != reason {
			t.Errorf("call to %s gave up (%v), want (%v)", host, g.Reason, reason)
		}
	}
	// Host a: 20 + 1 credits → two retries (−20) → 1 left; the second
	// request earns 1 → 2 credits: no retry.
	call("a", 3, retry.Exhausted)
	call("a", 1, retry.Budget)
	// Host b has its own budget, untouched by a's failures.
	call("b", 3, retry.Exhausted)
	if got := buckets["a"].Credits(); got != 2 {
		t.Errorf("a's credits = %d, want 2", got)
	}
	if got := buckets["b"].Credits(); got != 1 {
		t.Errorf("b's credits = %d, want 1", got)
	}
	if tr.Budget("a") != budget.Budget(buckets["a"]) {
		t.Error("Transport.Budget(a) is not a's bucket")
	}
}

// countingLimiter is a bulkhead that counts acquires and releases.
type countingLimiter struct {
	*limit.Bulkhead
	acquired, released atomic.Int64
}

func (l *countingLimiter) TryAcquire() bool {
	if l.Bulkhead.TryAcquire() {
		l.acquired.Add(1)
		return true
	}
	return false
}

func (l *countingLimiter) Release(ok bool) {
	l.released.Add(1)
	l.Bulkhead.Release(ok)
}

func TestBulkheadPerHost(t *testing.T) {
	base := &fakeBase{answers: statuses(200)}
	lims := map[string]*countingLimiter{}
	var mu sync.Mutex
	tr := retryhttp.New(base, noWait(3))
	tr.NewLimiter = func(host string) limit.Limiter {
		b, _ := limit.NewBulkhead(1)
		l := &countingLimiter{Bulkhead: b}
		mu.Lock()
		lims[host] = l
		mu.Unlock()
		return l
	}
	held, err := get(t, context.Background(), tr, "http://a/")
	if err != nil {
		t.Fatal(err)
	}
	// a's only slot is held while the body is open: the next call to a is
	// refused at once, a call to b is not.
	if _, err := get(t, context.Background(), tr, "http://a/"); !errors.Is(err, limit.ErrLimited) || !errors.Is(err, retry.ErrLimited) {
		t.Fatalf("second call to a: err = %v, want ErrLimited", err)
	}
	resp, err := get(t, context.Background(), tr, "http://b/")
	if err != nil {
		t.Fatalf("call to b: %v", err)
	}
	resp.Body.Close()
	io.ReadAll(held.Body) // EOF frees the slot
	held.Body.Close()     // and Close does not free it twice
	resp, err = get(t, context.Background(), tr, "http://a/")
	if err != nil {
		t.Fatalf("a after its body was closed: %v", err)
	}
	resp.Body.Close()
	for host, l := range lims {
		if a, r := l.acquired.Load(), l.released.Load(); a != r {
			t.Errorf("%s: %d acquires, %d releases", host, a, r)
		}
	}
	if lims["a"].acquired.Load() != 2 {
		t.Errorf("a: %d acquires, want 2", lims["a"].acquired.Load())
	}

	// Failed attempts release their slot before the wait, so a one-slot
	// bulkhead still allows the retries of one call.
	base2 := &fakeBase{answers: statuses(503, 503, 200)}
	one, _ := limit.NewBulkhead(1)
	tr2 := retryhttp.New(base2, &retry.Policy{MaxAttempts: 3, Schedule: backoff.Constant(0), Limiter: one})
	resp, err = get(t, context.Background(), tr2, "http://c/")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("err %v, want 200 on the third attempt", err)
	}
	if one.InFlight() != 1 {
		t.Errorf("in flight = %d while the body is open, want 1", one.InFlight())
	}
	resp.Body.Close()
	if one.InFlight() != 0 {
		t.Errorf("in flight = %d after close, want 0", one.InFlight())
	}
}

func TestHostRegistryIsBounded(t *testing.T) {
	made := 0
	tr := retryhttp.New(&fakeBase{answers: statuses(200)}, nil)
	tr.MaxHosts = 2
	tr.NewBudget = func(string) budget.Budget { made++; return &budget.TokenBucket{} }
	for _, h := range []string{"a", "b", "c", "d", "a", "e"} {
		resp, err := get(t, context.Background(), tr, "http://"+h+"/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if made != 3 {
		t.Errorf("budgets made = %d, want 3 (a, b, and one shared by the rest)", made)
	}
	if tr.Budget("c") != tr.Budget("zzz") {
		t.Error("hosts past MaxHosts do not share one entry")
	}
}

func TestHooksSeeEveryStep(t *testing.T) {
	base := &fakeBase{answers: statuses(503, 504, 200)}
	rec := &recorder{}
	p := &retry.Policy{MaxAttempts: 3, Schedule: backoff.Constant(0), Hooks: rec.hooks()}
	resp, err := get(t, context.Background(), retryhttp.New(base, p), "http://svc/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if rec.starts != 3 || len(rec.retries) != 2 || len(rec.success) != 1 || len(rec.giveUps) != 0 {
		t.Fatalf("hooks: %d attempts, %d retries, %d successes, %d give-ups; want 3, 2, 1, 0",
			rec.starts, len(rec.retries), len(rec.success), len(rec.giveUps))
	}
	var se *retryhttp.StatusError
	if !errors.As(rec.retries[1].Err, &se) || se.StatusCode != 504 || rec.retries[1].Attempt != 2 {
		t.Errorf("second retry event %+v, want attempt 2 with a 504", rec.retries[1])
	}
	if rec.success[0].Attempt != 3 {
		t.Errorf("success on attempt %d, want 3", rec.success[0].Attempt)
	}
}

func TestSlogRecords(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	base := &fakeBase{answers: statuses(503)}
	tr := retryhttp.New(base, noWait(2))
	tr.Logger = l
	resp, err := get(t, context.Background(), tr, "http://svc/orders")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	out := buf.String()
	for _, want := range []string{
		`level=DEBUG msg="http retry" method=GET host=svc path=/orders attempt=1`,
		`level=WARN msg="http gave up" method=GET host=svc path=/orders attempts=2 reason=exhausted error="retryhttp: GET svc: 503 Service Unavailable"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}

func TestBadConfiguration(t *testing.T) {
	cases := []struct {
		name string
		tr   *retryhttp.Transport
		want string
	}{
		{"policy", retryhttp.New(nil, &retry.Policy{MaxAttempts: -1}), "MaxAttempts must be >= 0"},
		{"timeout", retryhttp.New(nil, &retry.Policy{Timeout: -time.Second}), "Timeout must be >= 0"},
		{"mode", &retryhttp.Transport{RetryAfter: 9}, "Transport.RetryAfter must be"},
		{"hosts", &retryhttp.Transport{MaxHosts: -1}, "Transport.MaxHosts must be >= 0"},
	}
	for _, c := range cases {
		body := &trackedBody{r: strings.NewReader("x"), ctx: context.Background()}
		req, _ := http.NewRequest("PUT", "http://svc/", body)
		_, err := c.tr.RoundTrip(req)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to say %q", c.name, err, c.want)
		}
		if !body.closed.Load() {
			t.Errorf("%s: the request body was not closed", c.name)
		}
	}
}

func TestBrokenBodyReplay(t *testing.T) {
	base := &fakeBase{answers: statuses(503)}
	req, _ := http.NewRequest("PUT", "http://svc/", strings.NewReader("x"))
	req.GetBody = func() (io.ReadCloser, error) { return nil, errBoom }
	_, err := retryhttp.New(base, noWait(3)).RoundTrip(req)
	if !errors.Is(err, errBoom) {
		t.Fatalf("err = %v, want the GetBody error", err)
	}
	if base.attempts() != 1 {
		t.Errorf("attempts = %d, want 1", base.attempts())
	}
}

// panicBase is a Base whose RoundTrip panics.
type panicBase struct{}

func (panicBase) RoundTrip(*http.Request) (*http.Response, error) { panic("transport bug") }

// TestBasePanicReleasesSlot: a Base that panics gives the attempt's
// bulkhead slot back before the panic goes on, so a panic recovered further
// up does not hold the host's slot for good.
func TestBasePanicReleasesSlot(t *testing.T) {
	b, _ := limit.NewBulkhead(1)
	for _, timeout := range []time.Duration{0, time.Hour} { // with and without an attempt context
		p := noWait(3)
		p.Limiter, p.AttemptTimeout = b, timeout
		tr := retryhttp.New(panicBase{}, p)
		func() {
			defer func() {
				if recover() == nil {
					t.Error("the panic must go on")
				}
			}()
			req, _ := http.NewRequest(http.MethodGet, "http://a/", nil)
			_, _ = tr.RoundTrip(req)
		}()
		if n := b.InFlight(); n != 0 {
			t.Fatalf("AttemptTimeout %v: %d slots held after Base panicked", timeout, n)
		}
	}
}

// stepBudget records the budget steps a Transport takes, in order.
type stepBudget struct {
	mu    sync.Mutex
	steps []string
}

func (b *stepBudget) add(s string) { b.mu.Lock(); b.steps = append(b.steps, s); b.mu.Unlock() }
func (b *stepBudget) Request(time.Time) bool {
	b.add("request")
	return true
}
func (b *stepBudget) Retry(time.Time) bool {
	b.add("retry")
	return true
}
func (b *stepBudget) Result(_ time.Time, ok bool) { b.add(fmt.Sprintf("result %v", ok)) }

// TestBudgetLearnsOutcomeBeforeDecision: as in retry.Do (Begin, attempt,
// End, Decide), the Budget is told a failed attempt's outcome before it is
// asked for the retry — a throttle that counts failures (budget.GRPC,
// Breaker) must see the failure it decides on — also while a bulkhead slot
// is held by the delivered response until its body is closed.
func TestBudgetLearnsOutcomeBeforeDecision(t *testing.T) {
	b := &stepBudget{}
	lim, _ := limit.NewBulkhead(1)
	p := noWait(3)
	p.Budget, p.Limiter = b, lim
	tr := retryhttp.New(&fakeBase{answers: statuses(503, 200)}, p)
	resp, err := get(t, context.Background(), tr, "http://a/")
	if err != nil {
		t.Fatal(err)
	}
	want := "request,result false,retry,result true"
	b.mu.Lock()
	got := strings.Join(b.steps, ",")
	b.mu.Unlock()
	if got != want {
		t.Errorf("budget steps %s, want %s", got, want)
	}
	if lim.InFlight() != 1 {
		t.Errorf("%d slots held before the body is closed, want 1", lim.InFlight())
	}
	resp.Body.Close()
	if lim.InFlight() != 0 {
		t.Errorf("%d slots held after the body was closed, want 0", lim.InFlight())
	}
}

// TestPolicyClassifyRunsOncePerAttempt: a failure of no class is judged by
// Policy.Classify exactly once per attempt — for a response, for a
// transport error and for a transport error of an attempt whose own
// timeout fired — and its verdict decides (retryable here; unknown stays
// unknown unless the attempt's own timeout fired).
func TestPolicyClassifyRunsOncePerAttempt(t *testing.T) {
	cases := []struct {
		name     string
		answers  []answer
		verdict  retry.Class
		timeout  time.Duration // Policy.AttemptTimeout
		raw      bool          // Transport.Classify hands transport errors back unclassed
		attempts int
		reason   retry.Reason
	}{
		{"500 made retryable", statuses(500), retry.ClassRetryable, 0, false, 3, retry.Exhausted},
		{"500 left unknown", statuses(500), retry.ClassUnknown, 0, false, 1, retry.UnknownError},
		{"error made permanent", []answer{{err: errBoom}}, retry.ClassPermanent, 0, false, 1, retry.PermanentError},
		{"error made retryable", []answer{{err: errBoom}}, retry.ClassRetryable, 0, false, 3, retry.Exhausted},
		{"own timeout, left unknown", []answer{{block: true}}, retry.ClassUnknown, time.Second, true, 3, retry.Exhausted},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var calls atomic.Int64
				rec := &recorder{}
				p := noWait(3)
				p.AttemptTimeout, p.Hooks = c.timeout, rec.hooks()
				p.Classify = func(error) retry.Class { calls.Add(1); return c.verdict }
				base := &fakeBase{answers: c.answers}
				tr := retryhttp.New(base, p)
				if c.raw {
					tr.Classify = func(req *http.Request, resp *http.Response, err error) error {
						if err != nil {
							return err
						}
						return retryhttp.DefaultClassify(req, resp, nil)
					}
				}
				resp, _ := get(t, context.Background(), tr, "http://svc/")
				if resp != nil {
					resp.Body.Close()
				}
				if n := base.attempts(); n != c.attempts {
					t.Fatalf("attempts = %d, want %d", n, c.attempts)
				}
				if n := calls.Load(); n != int64(c.attempts) {
					t.Errorf("Policy.Classify ran %d times for %d attempts, want once per attempt", n, c.attempts)
				}
				if g := rec.lastGiveUp(t); g.Reason != c.reason {
					t.Errorf("reason %v, want %v", g.Reason, c.reason)
				}
			})
		})
	}
}

// TestRetryAfterOnlyOnRetryableAnswers: a Retry-After is read only from
// an answer that will be retried — a permanent 400 carries none in its
// error — and a 500 made retryable by Policy.Classify waits as asked.
func TestRetryAfterOnlyOnRetryableAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		p := noWait(2)
		p.Hooks = rec.hooks()
		base := &fakeBase{answers: []answer{{status: 400, header: http.Header{"Retry-After": {"7"}}}}}
		resp, err := get(t, context.Background(), retryhttp.New(base, p), "http://svc/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		var se *retryhttp.StatusError
		if g := rec.lastGiveUp(t); !errors.As(g.Err, &se) || se.After != 0 || g.Reason != retry.PermanentError {
			t.Errorf("400 give-up %v (%v): want permanent with no Retry-After read", g.Reason, g.Err)
		}

		p = noWait(2)
		p.Classify = func(error) retry.Class { return retry.ClassRetryable }
		base = &fakeBase{answers: []answer{{status: 500, header: http.Header{"Retry-After": {"7"}}}}}
		resp, err = get(t, context.Background(), retryhttp.New(base, p), "http://svc/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		seen := base.seenCopy()
		if len(seen) != 2 || seen[1].at.Sub(seen[0].at) != 7*time.Second {
			t.Errorf("a 500 made retryable: %d attempts, want 2, 7s apart (Retry-After)", len(seen))
		}
	})
}
