package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/staggerhq/stagger/internal/labkit"
)

// BenchmarkProxyStats answers /_stagger/stats (JSON, no timeline) after
// 100,000 and after 10 million attempts from up to 1 million request IDs:
// the cost must not grow with the count.
func BenchmarkProxyStats(b *testing.B) {
	for _, n := range []int{100_000, 10_000_000} {
		b.Run(fmt.Sprintf("arrivals=%d", n), func(b *testing.B) {
			up := &upstream{srv: httptest.NewServer(http.NotFoundHandler())}
			defer up.srv.Close()
			var out, errb testWriter
			cfg, _ := parseProxy([]string{"--upstream", up.srv.URL, "--report", ""}, &out, &errb)
			p := newProxy(cfg, time.Unix(0, 0))
			ids := min(n, 1_000_000)
			buf := make([]byte, 0, 32)
			for i := range n {
				buf = strconv.AppendInt(append(buf[:0], "req-"...), int64(i%ids), 10)
				p.Recorder().Record(p.StartTime().Add(time.Duration(i)*time.Millisecond), string(buf), 0, labkit.Accepted)
			}
			req := httptest.NewRequest("GET", statsPath, nil)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				w := httptest.NewRecorder()
				p.ServeHTTP(w, req)
				if w.Code != 200 {
					b.Fatal(w.Code)
				}
			}
		})
	}
}

// BenchmarkProxyCount is the proxy's own cost per attempt: an attempt
// refused by a fault (no upstream call), counted, from all goroutines.
func BenchmarkProxyCount(b *testing.B) {
	up := &upstream{srv: httptest.NewServer(http.NotFoundHandler())}
	defer up.srv.Close()
	var out, errb testWriter
	cfg, _ := parseProxy([]string{"--upstream", up.srv.URL, "--report", "", "--fault", "down 24h at 0s"}, &out, &errb)
	if cfg == nil {
		b.Fatal("bad flags")
	}
	p := newProxy(cfg, time.Now())
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		reqs := make([]*http.Request, 1024)
		for i := range reqs {
			reqs[i] = httptest.NewRequest("GET", "/x", nil)
			reqs[i].Header.Set(labkit.HeaderRequestID, strconv.Itoa(i))
		}
		w := discardWriter{h: http.Header{}}
		i := 0
		for pb.Next() {
			i++
			p.ServeHTTP(w, reqs[i%len(reqs)])
		}
	})
	b.StopTimer()
	if s := p.Recorder().Stats(false); s.Down != b.N {
		b.Fatalf("counted %d of %d", s.Down, b.N)
	}
}

type testWriter struct{}

func (testWriter) Write(p []byte) (int, error) { return len(p), nil }

// discardWriter is a ResponseWriter that keeps nothing.
type discardWriter struct{ h http.Header }

func (w discardWriter) Header() http.Header       { return w.h }
func (discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (discardWriter) WriteHeader(int)             {}

// BenchmarkProxyOverhead sends GETs from 16 keep-alive clients through,
// side by side: a bare httputil.ReverseProxy, `stagger proxy` with no fault
// active, and the in-process proxy of package proxytest. ns/op is the
// inverse of the throughput; p99-µs the 99th percentile of a request's
// round trip.
func BenchmarkProxyOverhead(b *testing.B) {
	upSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(benchBody)
	}))
	defer upSrv.Close()
	u, _ := url.Parse(upSrv.URL)
	var out, errb testWriter
	cfg, _ := parseProxy([]string{"--upstream", upSrv.URL, "--report", ""}, &out, &errb)
	ctlCfg, _ := parseProxy([]string{"--upstream", upSrv.URL, "--report", "", "--control", "127.0.0.1:0"}, &out, &errb)
	cases := []struct {
		name string
		h    http.Handler
	}{
		{"bare-reverseproxy", &httputil.ReverseProxy{
			Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.SetXForwarded() },
			Transport: &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second},
		}},
		{"stagger-proxy", newProxy(cfg, time.Now())},
		{"stagger-proxy-control", newProxy(ctlCfg, time.Now())}, // and per-request counts, as proxytest
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			srv := httptest.NewServer(c.h)
			defer srv.Close()
			tr := &http.Transport{MaxIdleConnsPerHost: 64}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr}
			var mu sync.Mutex
			var lat []time.Duration
			b.SetParallelism(8) // 16 clients on 2 cores
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				var mine []time.Duration
				for pb.Next() {
					start := time.Now()
					resp, err := client.Get(srv.URL + "/x")
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					mine = append(mine, time.Since(start))
				}
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			})
			b.StopTimer()
			slices.Sort(lat)
			if len(lat) > 0 {
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			}
		})
	}
}

var benchBody = bytes.Repeat([]byte("x"), 1024)
