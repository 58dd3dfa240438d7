package retryhttp_test

import (
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retryhttp"
)

func TestGuardCountsAttempts(t *testing.T) {
	var seen []int
	var mu sync.Mutex
	g := &retryhttp.Guard{Next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, ok := retryhttp.UpstreamAttempt(r.Context())
		if !ok {
			n = 0
		}
		mu.Lock()
		seen = append(seen, n)
		mu.Unlock()
	})}
	send := func(values ...string) {
		r := httptest.NewRequest("GET", "/", nil)
		for _, v := range values {
			r.Header.Add(retryhttp.AttemptHeader, v)
		}
		g.ServeHTTP(httptest.NewRecorder(), r)
	}
	send("1")
	send("1")
	send("2")
	send("3")
	send("17")
	send("40")
	send()
	for _, bad := range []string{"0", "-1", "+2", "2.0", "abc", " 2", "99999999", "1048577"} {
		send(bad)
	}
	send("1", "2") // repeated header
	s := g.Stats()
	want := [retryhttp.TrackedAttempts]int64{0: 2, 1: 1, 2: 1, 15: 2}
	if s.ByAttempt != want {
		t.Errorf("ByAttempt = %v, want %v", s.ByAttempt, want)
	}
	if s.Unmarked != 1 || s.Malformed != 9 || s.Shed != 0 {
		t.Errorf("unmarked %d, malformed %d, shed %d; want 1, 9, 0", s.Unmarked, s.Malformed, s.Shed)
	}
	if s.Total() != 16 || s.Retries() != 4 {
		t.Errorf("total %d, retries %d; want 16, 4", s.Total(), s.Retries())
	}
	wantSeen := []int{1, 1, 2, 3, 17, 40, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	if len(seen) != len(wantSeen) {
		t.Fatalf("handler saw %d requests, want %d", len(seen), len(wantSeen))
	}
	for i := range wantSeen {
		if seen[i] != wantSeen[i] {
			t.Errorf("request %d: upstream attempt in context %d, want %d", i, seen[i], wantSeen[i])
		}
	}
}

func TestGuardShedsOverCap(t *testing.T) {
	release := make(chan struct{})
	var entered sync.WaitGroup
	entered.Add(2)
	g := &retryhttp.Guard{MaxInFlight: 2, RetryAfter: 1500 * time.Millisecond,
		Next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			entered.Done()
			<-release
		})}
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
		}()
	}
	entered.Wait()
	if in := g.Stats().InFlight; in != 2 {
		t.Fatalf("in flight = %d, want 2", in)
	}
	w := httptest.NewRecorder()
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set(retryhttp.AttemptHeader, "2")
	g.ServeHTTP(w, r)
	if w.Code != 503 || w.Header().Get("Retry-After") != "2" || w.Header().Get(retryhttp.NoRetryHeader) != "1" {
		t.Errorf("shed answer %d Retry-After=%q %s=%q; want 503, \"2\", \"1\"",
			w.Code, w.Header().Get("Retry-After"), retryhttp.NoRetryHeader, w.Header().Get(retryhttp.NoRetryHeader))
	}
	if s := g.Stats(); s.Shed != 1 || s.InFlight != 2 || s.ByAttempt[1] != 1 {
		t.Errorf("stats %+v: want 1 shed, 2 in flight, the shed attempt counted", s)
	}
	close(release)
	wg.Wait()
	if in := g.Stats().InFlight; in != 0 {
		t.Errorf("in flight = %d after the handlers returned, want 0", in)
	}
	// Room again: admitted.
	w = httptest.NewRecorder()
	g.Next = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	g.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	if w.Code != 200 {
		t.Errorf("after the load went: %d, want 200", w.Code)
	}
}

func TestGuardOverloadedFunc(t *testing.T) {
	var overloaded atomic.Bool
	var served atomic.Int64
	g := &retryhttp.Guard{
		Overloaded: func(*http.Request) bool { return overloaded.Load() },
		Next:       http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served.Add(1) }),
	}
	srv := httptest.NewServer(g)
	defer srv.Close()

	// A stagger client does not retry a shed answer.
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	rec := &recorder{}
	p := noWait(5)
	p.Hooks = rec.hooks()
	client := &http.Client{Transport: retryhttp.New(base, p)}
	overloaded.Store(true)
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" || !strings.Contains(string(body), "overloaded") {
		t.Errorf("got %d Retry-After=%q body %q", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if s := g.Stats(); s.Shed != 1 || s.Total() != 1 || served.Load() != 0 {
		t.Errorf("shed %d of %d, served %d: want the one attempt shed and no retry", s.Shed, s.Total(), served.Load())
	}
	if gu := rec.lastGiveUp(t); gu.Reason != retry.PermanentError {
		t.Errorf("client gave up (%v), want permanent", gu.Reason)
	}
	overloaded.Store(false)
	resp, err = client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || served.Load() != 1 {
		t.Errorf("after the overload: %d, served %d", resp.StatusCode, served.Load())
	}
}

func TestWithUpstreamAttempt(t *testing.T) {
	if _, ok := retryhttp.UpstreamAttempt(context.Background()); ok {
		t.Error("empty context carries an attempt")
	}
	if _, ok := retryhttp.UpstreamAttempt(retryhttp.WithUpstreamAttempt(context.Background(), 0)); ok {
		t.Error("attempt 0 counts as an upstream owner")
	}
	if n, ok := retryhttp.UpstreamAttempt(retryhttp.WithUpstreamAttempt(context.Background(), 4)); !ok || n != 4 {
		t.Errorf("got %d, %v; want 4, true", n, ok)
	}
}

// TestGuardRetryAfterRoundsUpWithoutOverflow: Retry-After is RetryAfter
// rounded up to whole seconds, also for the largest Duration (rounding by
// adding a second first overflowed into a negative header).
func TestGuardRetryAfterRoundsUpWithoutOverflow(t *testing.T) {
	for _, c := range []struct {
		ra   time.Duration
		want string
	}{
		{time.Second, "1"},
		{1001 * time.Millisecond, "2"},
		{time.Duration(math.MaxInt64), "9223372037"},
	} {
		g := &retryhttp.Guard{RetryAfter: c.ra, Overloaded: func(*http.Request) bool { return true },
			Next: http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Error("a shed request reached Next") })}
		w := httptest.NewRecorder()
		g.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		if got := w.Header().Get("Retry-After"); w.Code != 503 || got != c.want {
			t.Errorf("RetryAfter %v: %d Retry-After=%q, want 503 %q", c.ra, w.Code, got, c.want)
		}
	}
}
