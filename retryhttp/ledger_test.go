package retryhttp_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retryhttp"
)

// TestTransportSendsLedger: every attempt of a call carries the same
// logical request ID and the time left before the call's deadline.
func TestTransportSendsLedger(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &fakeBase{answers: statuses(503, 503, 200)}
		p := &retry.Policy{MaxAttempts: 3, Schedule: backoff.Constant(100 * time.Millisecond), Timeout: time.Second}
		tr := retryhttp.New(base, p)
		resp, err := get(t, context.Background(), tr, "http://svc/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		seen := base.seenCopy()
		id := seen[0].header.Get(retryhttp.RequestIDHeader)
		if !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(id) {
			t.Fatalf("generated %s %q, want 16 hex digits", retryhttp.RequestIDHeader, id)
		}
		for i, s := range seen {
			if got := s.header.Get(retryhttp.RequestIDHeader); got != id {
				t.Errorf("attempt %d: request ID %q, want %q on every attempt", i+1, got, id)
			}
			if got, want := s.header.Get(retryhttp.TimeoutHeader), strconv.Itoa(1000-100*i); got != want {
				t.Errorf("attempt %d: %s %q, want %q", i+1, retryhttp.TimeoutHeader, got, want)
			}
		}

		// A second call gets an ID of its own; no deadline, no timeout header.
		base = &fakeBase{answers: statuses(200)}
		resp, _ = get(t, context.Background(), retryhttp.New(base, nil), "http://svc/")
		resp.Body.Close()
		if s := base.seenCopy()[0]; s.header.Get(retryhttp.RequestIDHeader) == id || s.header.Get(retryhttp.TimeoutHeader) != "" {
			t.Errorf("second call: ID %q (first %q), timeout %q; want a new ID and no timeout",
				s.header.Get(retryhttp.RequestIDHeader), id, s.header.Get(retryhttp.TimeoutHeader))
		}
	})
}

// TestTransportKeepsCallersLedger: the request's own ID wins, then the ID
// of the work the context carries; a deadline carried in the context's
// Delivery bounds the call like the context's own.
func TestTransportKeepsCallersLedger(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &fakeBase{answers: statuses(200)}
		tr := retryhttp.New(base, nil)
		req, _ := http.NewRequest(http.MethodGet, "http://svc/", nil)
		req.Header.Set(retryhttp.RequestIDHeader, "order-7")
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()

		ctx := retry.Delivery{ID: "job-9", Attempt: 2, Deadline: time.Now().Add(1500 * time.Millisecond)}.NewContext(context.Background())
		resp, err = get(t, ctx, tr, "http://svc/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		seen := base.seenCopy()
		if got := seen[0].header.Get(retryhttp.RequestIDHeader); got != "order-7" {
			t.Errorf("request's own ID sent as %q", got)
		}
		if got := seen[1].header.Get(retryhttp.RequestIDHeader); got != "job-9" {
			t.Errorf("the context's work ID sent as %q, want job-9", got)
		}
		if got := seen[1].header.Get(retryhttp.TimeoutHeader); got != "1500" {
			t.Errorf("timeout %q, want the 1500 ms the Delivery has left", got)
		}
		if seen[1].deadline != 1500*time.Millisecond {
			t.Errorf("attempt bounded by %v, want the Delivery's 1.5s", seen[1].deadline)
		}
	})
}

// TestGuardPutsLedgerInContext: the handler sees the request's ID, attempt
// and deadline as a retry.Delivery, and its context ends at the deadline
// the caller sent — but a longer one never extends the server's own.
func TestGuardPutsLedgerInContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got retry.Delivery
		var left time.Duration
		g := &retryhttp.Guard{Next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got, _ = retry.DeliveryFrom(r.Context())
			dl, _ := r.Context().Deadline()
			left = time.Until(dl)
		})}
		send := func(ctx context.Context, h map[string]string) {
			r := httptest.NewRequest("GET", "/", nil).WithContext(ctx)
			for k, v := range h {
				r.Header.Set(k, v)
			}
			g.ServeHTTP(httptest.NewRecorder(), r)
		}
		send(context.Background(), map[string]string{retryhttp.RequestIDHeader: "r1", retryhttp.AttemptHeader: "2", retryhttp.TimeoutHeader: "750"})
		if got.ID != "r1" || got.Attempt != 2 || got.Source != "http" || left != 750*time.Millisecond || time.Until(got.Deadline) != 750*time.Millisecond {
			t.Errorf("Delivery %+v, deadline in %v; want r1, attempt 2, 750ms", got, left)
		}

		server, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		send(server, map[string]string{retryhttp.IdempotencyKeyHeader: "k1", retryhttp.TimeoutHeader: "60000"})
		if got.ID != "k1" || got.Attempt != 1 || left != 200*time.Millisecond {
			t.Errorf("Delivery %+v, deadline in %v; want k1, attempt 1, the server's own 200ms", got, left)
		}

		got = retry.Delivery{}
		send(context.Background(), map[string]string{retryhttp.TimeoutHeader: "1e3"})
		if got != (retry.Delivery{}) {
			t.Errorf("malformed timeout: Delivery %+v, want none", got)
		}
	})
}

func TestGuardCountsRepeats(t *testing.T) {
	g := &retryhttp.Guard{Next: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})}
	send := func(g *retryhttp.Guard, id, key, attempt string) {
		r := httptest.NewRequest("GET", "/", nil)
		if id != "" {
			r.Header.Set(retryhttp.RequestIDHeader, id)
		}
		if key != "" {
			r.Header.Set(retryhttp.IdempotencyKeyHeader, key)
		}
		if attempt != "" {
			r.Header.Set(retryhttp.AttemptHeader, attempt)
		}
		g.ServeHTTP(httptest.NewRecorder(), r)
	}
	send(g, "a", "", "")  // new
	send(g, "a", "", "")  // repeat: unmarked
	send(g, "b", "", "1") // new
	send(g, "b", "", "2") // a marked retry, not a repeat
	send(g, "b", "", "2") // repeat: the same attempt number again
	send(g, "b", "", "1") // repeat: a lower one
	send(g, "", "k", "")  // new, by Idempotency-Key
	send(g, "", "k", "")  // repeat
	send(g, "", "", "")   // no ID: cannot tell
	send(g, "", "", "")
	if s := g.Stats(); s.Repeats != 4 || s.Evicted != 0 {
		t.Errorf("repeats %d, evicted %d; want 4, 0", s.Repeats, s.Evicted)
	}

	small := &retryhttp.Guard{MaxIDs: 2, Next: g.Next}
	for _, id := range []string{"x", "y", "z", "x"} { // z evicts x; x again evicts y
		send(small, id, "", "")
	}
	if s := small.Stats(); s.Repeats != 0 || s.Evicted != 2 {
		t.Errorf("bounded table: repeats %d, evicted %d; want 0, 2", s.Repeats, s.Evicted)
	}
	send(small, "x", "", "")
	if s := small.Stats(); s.Repeats != 1 {
		t.Errorf("bounded table: repeats %d after x again, want 1", s.Repeats)
	}

	off := &retryhttp.Guard{MaxIDs: -1, Next: g.Next}
	send(off, "a", "", "")
	send(off, "a", "", "")
	if s := off.Stats(); s.Repeats != 0 {
		t.Errorf("MaxIDs -1: repeats %d, want 0", s.Repeats)
	}
}

// TestLedgerAcrossLayers: a stagger client calls service A, whose handler
// calls service B. Through a stagger Transport, B sees A's request ID and
// attempt numbers and a deadline no later than A's. Through a retrying
// client that is not stagger's and re-sends what it was given, B counts
// its re-sends as repeats — when it forwards the ID; when it does not, B
// cannot tell them from new requests (the rule's limit).
func TestLedgerAcrossLayers(t *testing.T) {
	type hit struct {
		id, attempt string
		timeout     int
	}
	var mu sync.Mutex
	var hits []hit
	bottom := &retryhttp.Guard{Next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ms, _ := strconv.Atoi(r.Header.Get(retryhttp.TimeoutHeader))
		mu.Lock()
		hits = append(hits, hit{r.Header.Get(retryhttp.RequestIDHeader), r.Header.Get(retryhttp.AttemptHeader), ms})
		mu.Unlock()
		http.Error(w, "busy", http.StatusServiceUnavailable)
	})}
	b := httptest.NewServer(bottom)
	defer b.Close()

	// mode: how A's handler calls B.
	var mode string
	inner := retryhttp.New(nil, &retry.Policy{MaxAttempts: 3, Schedule: backoff.Constant(0)})
	a := httptest.NewServer(&retryhttp.Guard{Next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch mode {
		case "stagger":
			req, _ := http.NewRequestWithContext(r.Context(), "GET", b.URL, nil)
			if resp, err := inner.RoundTrip(req); err == nil {
				resp.Body.Close()
			}
		default: // a client that retries three times with the same headers
			for range 3 {
				req, _ := http.NewRequestWithContext(r.Context(), "GET", b.URL, nil)
				if mode == "forwarding" {
					req.Header.Set(retryhttp.RequestIDHeader, r.Header.Get(retryhttp.RequestIDHeader))
					req.Header.Set(retryhttp.AttemptHeader, r.Header.Get(retryhttp.AttemptHeader))
				}
				if resp, err := http.DefaultTransport.RoundTrip(req); err == nil {
					resp.Body.Close()
				}
			}
		}
		http.Error(w, "busy", http.StatusServiceUnavailable)
	})})
	defer a.Close()

	top := retryhttp.New(nil, &retry.Policy{MaxAttempts: 2, Schedule: backoff.Constant(0), Timeout: time.Minute})
	call := func() {
		req, _ := http.NewRequest("GET", a.URL, nil)
		req.Header.Set(retryhttp.RequestIDHeader, mode)
		resp, err := top.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}

	mode = "stagger"
	call()
	if len(hits) != 2 || hits[0] != (hit{"stagger", "1", hits[0].timeout}) || hits[1].id != "stagger" || hits[1].attempt != "2" {
		t.Fatalf("B saw %+v, want the top's ID with attempts 1 and 2, once each", hits)
	}
	for _, h := range hits {
		if h.timeout <= 0 || h.timeout > 60000 {
			t.Errorf("B's timeout %d ms, want within the top's minute", h.timeout)
		}
	}
	if s := bottom.Stats(); s.Repeats != 0 {
		t.Errorf("stagger in the middle: %d repeats, want 0", s.Repeats)
	}

	mode = "forwarding"
	call()
	if s := bottom.Stats(); s.Repeats != 4 { // 3 sends per top attempt: 2 repeats each
		t.Errorf("a forwarding client in the middle: %d repeats, want 4", s.Repeats)
	}

	mode = "plain"
	call()
	if s := bottom.Stats(); s.Repeats != 4 || s.Unmarked != 6 {
		t.Errorf("a client that forwards nothing: %d repeats, %d unmarked; want 4 (none new), 6", s.Repeats, s.Unmarked)
	}
}
