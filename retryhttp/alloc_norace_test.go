//go:build !race

package retryhttp_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retryhttp"
)

// ctxBase answers 200 at once, deriving and ending a cancelable context
// from the request's as net/http's Transport does for every request: what
// the attempt's context costs shows.
type ctxBase struct{}

func (ctxBase) RoundTrip(r *http.Request) (*http.Response, error) {
	_, cancel := context.WithCancelCause(r.Context())
	cancel(nil)
	return &http.Response{StatusCode: 200, Body: http.NoBody, Header: http.Header{}, Request: r}, nil
}

// TestRoundTripAllocs bounds what a Transport allocates for one
// successful call over what its Base allocates: the call's state (with
// the first attempt's request), the attempt's header map (two: the map
// and its group; the ledger's values are made once) and, for a context
// that can be canceled only by a refused re-send, its channel and the
// AfterFunc registration net/http's context makes on it (three: the
// registration's stop is one function for all, wireCtx.AfterFunc).
func TestRoundTripAllocs(t *testing.T) {
	req, _ := http.NewRequest("GET", "http://svc/x", nil)
	req.Header.Set("Accept", "application/json")
	allocs := func(rt http.RoundTripper) float64 {
		return testing.AllocsPerRun(500, func() {
			resp, err := rt.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		})
	}
	base := allocs(ctxBase{})
	for _, c := range []struct {
		name string
		rt   http.RoundTripper
		max  float64
	}{
		{"no deadline", retryhttp.New(ctxBase{}, nil), 6},
		// Policy.Timeout: the Step's bounded context (context.WithTimeout:
		// four, with its timer, and two for the children net/http's context
		// adds to it) takes the place of the own cancel, and the time left
		// is one value more.
		{"Policy.Timeout", retryhttp.New(ctxBase{}, &retry.Policy{Timeout: time.Minute}), 11},
	} {
		if n := allocs(c.rt) - base; n > c.max {
			t.Errorf("%s: %v allocations per call over the base's %v, want at most %v", c.name, n, base, c.max)
		} else {
			t.Logf("%s: %v allocations over the base's %v", c.name, n, base)
		}
	}
}
