package retryhttp_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retryhttp"
)

// memBase answers 200 at once without a network: the transport's own cost.
type memBase struct{}

func (memBase) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Body: http.NoBody, Header: http.Header{}, Request: r}, nil
}

// BenchmarkOverhead measures what retryhttp adds to one successful
// round trip, without the network.
func BenchmarkOverhead(b *testing.B) {
	req, _ := http.NewRequest("GET", "http://svc/x", nil)
	req.Header.Set("Accept", "application/json")
	run := func(b *testing.B, rt http.RoundTripper) {
		b.ReportAllocs()
		for b.Loop() {
			resp, err := rt.RoundTrip(req)
			if err != nil {
				b.Fatal(err)
			}
			resp.Body.Close()
		}
	}
	b.Run("base", func(b *testing.B) { run(b, memBase{}) })
	b.Run("retryhttp", func(b *testing.B) { run(b, retryhttp.New(memBase{}, nil)) })
	// With a deadline: the Step bounds each attempt's context.
	b.Run("retryhttp-timeout", func(b *testing.B) {
		run(b, retryhttp.New(memBase{}, &retry.Policy{Timeout: time.Minute}))
	})
	// A caller's context that can end, which the Step does not bound: the
	// attempt gets a cancelable context of its own.
	b.Run("retryhttp-cancelable", func(b *testing.B) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req := req.WithContext(ctx)
		b.ReportAllocs()
		rt := retryhttp.New(memBase{}, nil)
		for b.Loop() {
			resp, err := rt.RoundTrip(req)
			if err != nil {
				b.Fatal(err)
			}
			resp.Body.Close()
		}
	})
}

// BenchmarkRoundTrip compares a success over loopback HTTP with
// http.DefaultTransport alone and wrapped by retryhttp.
func BenchmarkRoundTrip(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	run := func(b *testing.B, rt http.RoundTripper) {
		req, _ := http.NewRequest("GET", srv.URL, nil)
		b.ReportAllocs()
		for b.Loop() {
			resp, err := rt.RoundTrip(req)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	b.Run("DefaultTransport", func(b *testing.B) { run(b, http.DefaultTransport) })
	b.Run("retryhttp", func(b *testing.B) { run(b, retryhttp.New(http.DefaultTransport, nil)) })
}

type nopWriter struct{ h http.Header }

func (w *nopWriter) Header() http.Header         { return w.h }
func (w *nopWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *nopWriter) WriteHeader(int)             {}

// BenchmarkGuard measures Guard's cost per request, with and without an
// attempt header (which puts the attempt in the context).
func BenchmarkGuard(b *testing.B) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	plain, _ := http.NewRequest("GET", "http://svc/", nil)
	marked, _ := http.NewRequest("GET", "http://svc/", nil)
	marked.Header.Set(retryhttp.AttemptHeader, "2")
	w := &nopWriter{h: http.Header{}}
	for _, c := range []struct {
		name string
		h    http.Handler
		r    *http.Request
	}{
		{"bare", h, marked},
		{"guard-unmarked", &retryhttp.Guard{Next: h, MaxInFlight: 100}, plain},
		{"guard-attempt", &retryhttp.Guard{Next: h, MaxInFlight: 100}, marked},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c.h.ServeHTTP(w, c.r)
			}
		})
	}
	// Logical request IDs: one ID again and again (a repeat each time),
	// and a new ID each time in a full table (an eviction each time).
	withID, _ := http.NewRequest("GET", "http://svc/", nil)
	withID.Header.Set(retryhttp.AttemptHeader, "1")
	withID.Header.Set(retryhttp.RequestIDHeader, "0123456789abcdef")
	b.Run("guard-id-repeat", func(b *testing.B) {
		g := &retryhttp.Guard{Next: h}
		b.ReportAllocs()
		for b.Loop() {
			g.ServeHTTP(w, withID)
		}
	})
	b.Run("guard-id-new", func(b *testing.B) {
		g := &retryhttp.Guard{Next: h, MaxIDs: 1024}
		reqs := make([]*http.Request, 4096)
		for i := range reqs {
			reqs[i] = withID.Clone(withID.Context())
			reqs[i].Header.Set(retryhttp.RequestIDHeader, strconv.Itoa(i))
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			g.ServeHTTP(w, reqs[i%len(reqs)])
			i++
		}
	})
	b.Run("guard-shed", func(b *testing.B) {
		g := &retryhttp.Guard{Next: h, Overloaded: func(*http.Request) bool { return true }}
		b.ReportAllocs()
		for b.Loop() {
			clear(w.h)
			g.ServeHTTP(w, marked)
		}
	})
}
