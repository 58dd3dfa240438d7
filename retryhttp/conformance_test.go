package retryhttp_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retry/drivertest"
	"github.com/staggerhq/stagger/retryhttp"
)

// TestDriverConformance: the Transport, over a Base that runs the suite's
// attempt and answers 200 for nil or returns its error as the transport
// error (a classed error keeps its class and wait), makes the same calls
// as retry.Do and returns what it returns; a panic of Base goes on with
// its slot freed, as a panic of retry.Do's function does.
func TestDriverConformance(t *testing.T) {
	drivertest.Run(t, drivertest.Driver{
		Name:           "retryhttp.Transport",
		HoldsDelivered: true, // a response's body holds the slot until closed
		Classifies:     true, // DefaultClassify: a transport timeout is retryable
		Run: func(ctx context.Context, p *retry.Policy, attempt func(context.Context) error) error {
			base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
				if err := attempt(req.Context()); err != nil {
					return nil, err
				}
				return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("ok")), Header: http.Header{}, Request: req}, nil
			})
			tr := &retryhttp.Transport{Base: base, Policy: p}
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://conformance.test/x", nil)
			resp, err := tr.RoundTrip(req)
			if err == nil {
				resp.Body.Close()
			}
			return err
		},
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
