package retryhttp_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/staggerhq/stagger/retryhttp"
)

// stack builds the stacked-layers picture: a client calls server 1, which calls
// server 2, which calls server 3 (the bottom) — each call through a stagger
// Transport allowing n attempts, each server behind a Guard. The bottom
// answers 503 until it has seen failFor attempts.
type stack struct {
	client *http.Client
	top    string
	guards [3]*retryhttp.Guard
	bottom atomic.Int64
	close  func()
}

func newStack(t *testing.T, n int, nested bool, failFor int64) *stack {
	t.Helper()
	s := &stack{}
	var transports []*http.Transport
	newClient := func() *http.Client {
		base := &http.Transport{}
		transports = append(transports, base)
		tr := retryhttp.New(base, noWait(n))
		tr.NestedRetries = nested
		return &http.Client{Transport: tr}
	}
	relay := func(next string, c *http.Client) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// The inbound context carries the upstream owner's attempt.
			req, _ := http.NewRequestWithContext(r.Context(), "GET", next, nil)
			resp, err := c.Do(req)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			defer resp.Body.Close()
			w.WriteHeader(resp.StatusCode)
			io.Copy(w, resp.Body)
		})
	}
	s.guards[2] = &retryhttp.Guard{Next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.bottom.Add(1) <= failFor {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "paid")
	})}
	bottom := httptest.NewServer(s.guards[2])
	s.guards[1] = &retryhttp.Guard{Next: relay(bottom.URL, newClient())}
	mid := httptest.NewServer(s.guards[1])
	s.guards[0] = &retryhttp.Guard{Next: relay(mid.URL, newClient())}
	top := httptest.NewServer(s.guards[0])
	s.client, s.top = newClient(), top.URL
	s.close = func() {
		top.Close()
		mid.Close()
		bottom.Close()
		for _, tr := range transports {
			tr.CloseIdleConnections()
		}
	}
	return s
}

func (s *stack) get(t *testing.T) int {
	t.Helper()
	resp, err := s.client.Get(s.top)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// Three stacked layers of three attempts: with the single-owner rule the
// bottom sees 3 attempts, numbered 1, 2, 3 by the owner; without it, 3³ = 27.
func TestStackedLayersSendNAttemptsNotNCubed(t *testing.T) {
	const n = 3
	t.Run("one owner", func(t *testing.T) {
		s := newStack(t, n, false, 1<<30)
		defer s.close()
		if code := s.get(t); code != 503 {
			t.Fatalf("status %d, want 503 (the bottom never recovers)", code)
		}
		if got := s.bottom.Load(); got != n {
			t.Errorf("bottom received %d attempts, want %d", got, n)
		}
		for i, g := range s.guards {
			st := g.Stats()
			if st.Total() != n || st.ByAttempt[0] != 1 || st.ByAttempt[1] != 1 || st.ByAttempt[2] != 1 {
				t.Errorf("server %d counted %v (total %d), want attempts 1, 2, 3 once each", i+1, st.ByAttempt[:n], st.Total())
			}
		}
	})
	t.Run("every layer retries", func(t *testing.T) {
		s := newStack(t, n, true, 1<<30)
		defer s.close()
		s.get(t)
		if got := s.bottom.Load(); got != n*n*n {
			t.Errorf("bottom received %d attempts, want n³ = %d", got, n*n*n)
		}
		if got := s.guards[1].Stats().Total(); got != n*n {
			t.Errorf("middle received %d, want n² = %d", got, n*n)
		}
	})
	t.Run("one owner, bottom recovers", func(t *testing.T) {
		s := newStack(t, n, false, 2)
		defer s.close()
		if code := s.get(t); code != 200 {
			t.Fatalf("status %d, want 200 on the owner's third attempt", code)
		}
		if got := s.bottom.Load(); got != 3 {
			t.Errorf("bottom received %d attempts, want 3", got)
		}
	})
}
