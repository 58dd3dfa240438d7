package retryhttp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retryhttp"
)

// guardSees runs one request with header h through g and returns what the
// handler saw: its Delivery, how long its context had left (-1: no
// deadline) and whether the context had already ended.
func guardSees(g *retryhttp.Guard, ctx context.Context, h http.Header) (d retry.Delivery, left time.Duration, ended bool) {
	left = -1
	g.Next = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, _ = retry.DeliveryFrom(r.Context())
		if dl, ok := r.Context().Deadline(); ok {
			left = time.Until(dl)
		}
		ended = r.Context().Err() != nil
	})
	r := httptest.NewRequest("GET", "/", nil).WithContext(ctx)
	r.Header = h
	g.ServeHTTP(httptest.NewRecorder(), r)
	return d, left, ended
}

// TestGuardBoundsClientTimeout: a server with no deadline of its own
// once took a client's Stagger-Timeout-Ms as it came — 999999999999 gave
// the handler (and any work it handed on) a deadline 31.7 years away, 0
// an expired context. The client's value is now clamped to
// Guard.MaxTimeout (DefaultMaxTimeout when unset), and 0 gives no deadline
// of the client's.
func TestGuardBoundsClientTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &retryhttp.Guard{}
		d, left, _ := guardSees(g, context.Background(), http.Header{retryhttp.TimeoutHeader: {"999999999999"}})
		if left != retryhttp.DefaultMaxTimeout || time.Until(d.Deadline) != retryhttp.DefaultMaxTimeout {
			t.Errorf("huge timeout: context deadline in %v, Delivery deadline in %v; want %v", left, time.Until(d.Deadline), retryhttp.DefaultMaxTimeout)
		}
		g = &retryhttp.Guard{MaxTimeout: 2 * time.Second}
		if _, left, _ = guardSees(g, context.Background(), http.Header{retryhttp.TimeoutHeader: {"60000"}}); left != 2*time.Second {
			t.Errorf("MaxTimeout 2s: deadline in %v", left)
		}
		if _, left, _ = guardSees(g, context.Background(), http.Header{retryhttp.TimeoutHeader: {"1500"}}); left != 1500*time.Millisecond {
			t.Errorf("a shorter timeout: deadline in %v, want 1.5s", left)
		}
		d, left, ended := guardSees(g, context.Background(), http.Header{retryhttp.TimeoutHeader: {"0"}})
		if ended || left != -1 || !d.Deadline.IsZero() {
			t.Errorf("timeout 0: ended %v, deadline in %v, Delivery %+v; want a live context without a client deadline", ended, left, d)
		}
	})
}

// TestGuardRefusesBadIDs: a request ID that is not 1 to 255 bytes of
// printable ASCII is treated as none, so it never reaches the Delivery
// (and from there a queue job ID or a downstream call).
func TestGuardRefusesBadIDs(t *testing.T) {
	g := &retryhttp.Guard{}
	for _, id := range []string{strings.Repeat("x", 256), "a\nb", "\xff\xfe", strings.Repeat("y", 1<<20)} {
		d, _, _ := guardSees(g, context.Background(), http.Header{retryhttp.RequestIDHeader: {id}})
		if d.ID != "" {
			t.Errorf("ID %.20q… reached the Delivery", id)
		}
		d, _, _ = guardSees(g, context.Background(), http.Header{retryhttp.RequestIDHeader: {id}, retryhttp.IdempotencyKeyHeader: {"k1"}})
		if d.ID != "k1" {
			t.Errorf("with a bad request ID, the Idempotency-Key: Delivery ID %.20q", d.ID)
		}
	}
	if d, _, _ := guardSees(g, context.Background(), http.Header{retryhttp.RequestIDHeader: {"a", "b"}}); d.ID != "" {
		t.Errorf("a repeated request ID header: Delivery ID %q, want none", d.ID)
	}
}

// TestGuardBoundsClientBudget: a request's Stagger-Max-Attempts reaches
// the handler's Delivery clamped to Guard.MaxAttempts (DefaultMaxBudget
// unset), so a client cannot give the work it hands on more attempts than
// the server allows; anything but a decimal integer >= 1 is ignored.
func TestGuardBoundsClientBudget(t *testing.T) {
	for _, c := range []struct {
		max  int
		v    []string
		want int
	}{
		{0, []string{"5"}, 5},
		{0, []string{"999999999999999999999999"}, retryhttp.DefaultMaxBudget},
		{0, []string{"11"}, retryhttp.DefaultMaxBudget},
		{3, []string{"5"}, 3},
		{50, []string{"20"}, 20},
		{0, []string{"0"}, 0},
		{0, []string{"-5"}, 0},
		{0, []string{"NaN"}, 0},
		{0, []string{"1e3"}, 0},
		{0, []string{"5", "6"}, 0},
	} {
		d, _, _ := guardSees(&retryhttp.Guard{MaxAttempts: c.max}, context.Background(),
			http.Header{retryhttp.MaxAttemptsHeader: c.v, retryhttp.AttemptHeader: {"2"}})
		if d.MaxAttempts != c.want || d.Attempt != 2 {
			t.Errorf("MaxAttempts %d, header %q: Delivery %d of %d, want 2 of %d", c.max, c.v, d.Attempt, d.MaxAttempts, c.want)
		}
	}
}
