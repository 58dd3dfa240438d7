package retryhttp_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/staggerhq/stagger/internal/wire/wiretest"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retryhttp"
)

// TestGuardHostileHeaders sends the worst value of every header Guard
// reads, each alone and repeated, over a real connection: the server
// keeps serving, and no handler gets an attempt number, a deadline or a
// request ID beyond the rule (docs/architecture.md, "Values from the
// wire").
func TestGuardHostileHeaders(t *testing.T) {
	const maxTimeout = 3 * time.Second
	var mu sync.Mutex
	var bad []string
	served := 0
	const maxBudget = 4
	g := &retryhttp.Guard{MaxTimeout: maxTimeout, MaxAttempts: maxBudget, Next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		served++
		if n, ok := retryhttp.UpstreamAttempt(r.Context()); ok && (n < 1 || n > retryhttp.MaxAttemptHeader) {
			bad = append(bad, "attempt "+r.Header.Get(retryhttp.AttemptHeader))
		}
		if dl, ok := r.Context().Deadline(); ok && time.Until(dl) > maxTimeout {
			bad = append(bad, "deadline in "+time.Until(dl).String())
		}
		if r.Context().Err() != nil {
			bad = append(bad, "an expired context")
		}
		if d, ok := retry.DeliveryFrom(r.Context()); ok {
			if len(d.ID) > 255 || strings.ContainsFunc(d.ID, func(c rune) bool { return c < 0x20 || c > 0x7e }) {
				bad = append(bad, "ID "+d.ID[:min(len(d.ID), 20)])
			}
			if d.Attempt < 1 || d.Attempt > retryhttp.MaxAttemptHeader || time.Until(d.Deadline) > maxTimeout {
				bad = append(bad, "delivery attempt or deadline")
			}
			if d.MaxAttempts < 0 || d.MaxAttempts > maxBudget {
				bad = append(bad, "delivery budget "+r.Header.Get(retryhttp.MaxAttemptsHeader))
			}
		}
	})}
	srv := httptest.NewServer(g)
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	cases := wiretest.Cases(retryhttp.AttemptHeader, retryhttp.MaxAttemptsHeader, retryhttp.TimeoutHeader, retryhttp.RequestIDHeader, retryhttp.IdempotencyKeyHeader)
	for _, h := range cases {
		_, _ = wiretest.Send(addr, "/", h) // refused (400, 431) or served: either way, no crash
	}
	if code, err := wiretest.Send(addr, "/", []wiretest.Header{{retryhttp.AttemptHeader, "2"}, {retryhttp.TimeoutHeader, "1000"}}); err != nil || code != 200 {
		t.Fatalf("a normal request after the hostile ones: %d, %v", code, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Errorf("handlers saw values beyond the rule: %q", bad)
	}
	if served < len(cases)/2 {
		t.Errorf("only %d of %d hostile requests reached the handler: the test sends too little", served, len(cases))
	}
	if s := g.Stats(); s.Malformed == 0 || s.Total() != int64(served) {
		t.Errorf("stats %+v for %d served", s, served)
	}
}
