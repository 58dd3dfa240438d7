package retryhttp_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/staggerhq/stagger/internal/wire"
	"github.com/staggerhq/stagger/internal/wire/wiretest"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retryhttp"
)

// FuzzGuardHeaders: no value of the attempt, timeout or request ID
// headers makes Guard panic or hand its handler an attempt number, a
// deadline or an ID beyond the rule.
func FuzzGuardHeaders(f *testing.F) {
	vals := wiretest.Values()
	vals = vals[:len(vals)-1] // the 1 MiB value makes a slow seed
	for i, v := range vals {
		f.Add(v, vals[(i+1)%len(vals)], vals[(i+2)%len(vals)])
	}
	f.Add("2", "1500", "order-7")
	const maxTimeout = 2 * time.Second
	g := &retryhttp.Guard{MaxTimeout: maxTimeout}
	f.Fuzz(func(t *testing.T, attempt, timeout, id string) {
		served := false
		g.Next = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			served = true
			ctx := r.Context()
			if dl, ok := ctx.Deadline(); ok && time.Until(dl) > maxTimeout {
				t.Errorf("timeout %q: deadline in %v", timeout, time.Until(dl))
			}
			if ctx.Err() != nil {
				t.Errorf("timeout %q: an expired context", timeout)
			}
			if n, ok := retryhttp.UpstreamAttempt(ctx); ok && n > wire.MaxAttempt {
				t.Errorf("attempt %q: %d", attempt, n)
			}
			if d, ok := retry.DeliveryFrom(ctx); ok && (d.ID != "" && !wire.ValidID(d.ID) || d.Attempt < 1 || d.Attempt > wire.MaxAttempt) {
				t.Errorf("Delivery %+v", d)
			}
		})
		r := httptest.NewRequest("GET", "/", nil)
		r.Header = http.Header{retryhttp.AttemptHeader: {attempt}, retryhttp.TimeoutHeader: {timeout}, retryhttp.RequestIDHeader: {id}}
		g.ServeHTTP(httptest.NewRecorder(), r)
		if !served {
			t.Fatal("the request was not served")
		}
	})
}
