package conformance_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retryhttp"
)

// failing is a Guard-ed service that always answers 503 and records the
// attempt number and budget of every request.
func failing(t *testing.T) (*retryhttp.Guard, string, func() [][2]string) {
	var mu sync.Mutex
	var seen [][2]string
	g := &retryhttp.Guard{Next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, [2]string{r.Header.Get(retryhttp.AttemptHeader), r.Header.Get(retryhttp.MaxAttemptsHeader)})
		mu.Unlock()
		http.Error(w, "down", http.StatusServiceUnavailable)
	})}
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	return g, srv.URL, func() [][2]string {
		mu.Lock()
		defer mu.Unlock()
		return append([][2]string(nil), seen...)
	}
}

func foreignClient(retries int) *retryablehttp.Client {
	c := retryablehttp.NewClient()
	c.RetryMax = retries
	c.RetryWaitMin, c.RetryWaitMax = time.Millisecond, time.Millisecond
	c.Logger = nil
	c.ErrorHandler = retryablehttp.PassthroughErrorHandler
	return c
}

// TestForeignRetriesBelowTransport: go-retryablehttp as a Transport's
// Base re-sends through the attempt's context; each re-send that reaches
// a connection is an attempt of the ledger (its own Stagger-Attempt) and
// needs an attempt left, so the service gets at most the budget, not
// stagger's attempts × go-retryablehttp's.
func TestForeignRetriesBelowTransport(t *testing.T) {
	_, url, seen := failing(t)
	client := &http.Client{Transport: retryhttp.New(&retryablehttp.RoundTripper{Client: foreignClient(4)},
		&retry.Policy{MaxAttempts: 3, Schedule: tick})}
	if resp, err := client.Get(url); err == nil {
		resp.Body.Close()
	}
	got := seen()
	if len(got) != 3 {
		t.Fatalf("the service got %q, want 3 requests (the budget), not 3 × 5", got)
	}
	for i, s := range got {
		if s[1] != "3" || s[0] != string(rune('1'+i)) {
			t.Errorf("request %d carried attempt %q of %q, want %d of 3", i+1, s[0], s[1], i+1)
		}
	}
}

// TestForeignRetriesAboveTransport: go-retryablehttp above a stagger
// Transport calls it afresh for each of its retries, each a call of its
// own. With the logical request's ID on the request, the Guard sees the
// repeats of that request — same ID, no higher attempt number — and counts
// them; it cannot stop them (2 attempts × 3 calls = 6 requests, 4 repeats).
func TestForeignRetriesAboveTransport(t *testing.T) {
	g, url, seen := failing(t)
	foreign := foreignClient(2)
	foreign.HTTPClient = &http.Client{Transport: retryhttp.New(nil, &retry.Policy{MaxAttempts: 2, Schedule: tick})}
	req, _ := retryablehttp.NewRequest(http.MethodGet, url, nil)
	req.Header.Set(retryhttp.RequestIDHeader, "order-7")
	if resp, err := foreign.Do(req); err == nil {
		resp.Body.Close()
	}
	s := g.Stats()
	if s.Total() != 6 || s.Repeats != 4 || s.ByAttempt[0] != 3 || s.ByAttempt[1] != 3 {
		t.Errorf("Guard counted %d requests (by attempt %v), %d repeats; want 6, 3 + 3, 4 (got %q)", s.Total(), s.ByAttempt[:2], s.Repeats, seen())
	}
}
