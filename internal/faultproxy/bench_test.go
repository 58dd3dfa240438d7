package faultproxy

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/staggerhq/stagger/internal/labkit"
)

// echoServer answers every byte it reads with the same byte.
func echoServer(b testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

// bareRelay is the floor a TCP proxy is measured against: accept, dial,
// io.Copy both ways.
func bareRelay(b *testing.B, upstream string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				u, err := net.Dial("tcp", upstream)
				if err != nil {
					c.Close()
					return
				}
				go func() { io.Copy(u, c); u.(*net.TCPConn).CloseWrite() }()
				io.Copy(c, u)
				c.Close()
				u.Close()
			}()
		}
	}()
	return ln.Addr().String()
}

// BenchmarkTCPOverhead compares the TCP proxy with no fault active against
// a bare io.Copy relay, to an echo server on loopback: "pingpong" is 64-byte
// round trips on 8 connections (ns/op per round trip, p99-µs), "stream"
// 64 KiB writes echoed back (MB/s).
func BenchmarkTCPOverhead(b *testing.B) {
	up := echoServer(b)
	p, err := StartTCP(Config{Name: "bench", Upstream: up})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	for _, c := range []struct{ name, addr string }{{"bare-iocopy", bareRelay(b, up)}, {"stagger", p.Addr()}} {
		b.Run("pingpong/"+c.name, func(b *testing.B) {
			conns := make(chan net.Conn, 8)
			for range 8 {
				conn, err := net.Dial("tcp", c.addr)
				if err != nil {
					b.Fatal(err)
				}
				defer conn.Close()
				conns <- conn
			}
			lat := make(chan []time.Duration, 64)
			b.SetParallelism(4)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				conn := <-conns
				defer func() { conns <- conn }()
				msg, got := make([]byte, 64), make([]byte, 64)
				var mine []time.Duration
				for pb.Next() {
					start := time.Now()
					if _, err := conn.Write(msg); err != nil {
						b.Error(err)
						return
					}
					if _, err := io.ReadFull(conn, got); err != nil {
						b.Error(err)
						return
					}
					mine = append(mine, time.Since(start))
				}
				lat <- mine
			})
			b.StopTimer()
			close(lat)
			var all []time.Duration
			for l := range lat {
				all = append(all, l...)
			}
			slices.Sort(all)
			if len(all) > 0 {
				b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
			}
		})
		b.Run("stream/"+c.name, func(b *testing.B) {
			conn, err := net.Dial("tcp", c.addr)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			buf := make([]byte, 64<<10)
			done := make(chan error, 1)
			go func() {
				_, err := io.CopyN(io.Discard, conn, int64(b.N)*int64(len(buf)))
				done <- err
			}()
			b.SetBytes(int64(len(buf)))
			b.ResetTimer()
			for range b.N {
				if _, err := conn.Write(buf); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkHTTPOwnCost is the HTTP proxy's own cost per attempt with no
// fault active, in process and without the network: the same handler
// called bare, and behind the proxy's counting and fault path (the
// reverse proxy itself left out). The difference is what the proxy adds
// to a bare httputil.ReverseProxy; allocs/op and the instructions
// (callgrind) do not depend on the machine's load.
func BenchmarkHTTPOwnCost(b *testing.B) {
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) })
	p, err := NewHTTP(Config{Name: "bench", Upstream: "http://127.0.0.1:1"})
	if err != nil {
		b.Fatal(err)
	}
	p.next = next
	ctl, err := NewHTTP(Config{Name: "bench", Upstream: "http://127.0.0.1:1", NoRequestCounts: true})
	if err != nil {
		b.Fatal(err)
	}
	ctl.next = next
	for _, c := range []struct {
		name string
		h    http.Handler
	}{{"bare", next}, {"proxy", ctl}, {"proxy-request-counts", p}} {
		b.Run(c.name, func(b *testing.B) {
			req := httptest.NewRequest("GET", "/x", nil)
			req.Header.Set(labkit.HeaderRequestID, "order-1")
			req.Header.Set("Stagger-Attempt", "1")
			w := &nopWriter{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				c.h.ServeHTTP(w, req)
			}
		})
	}
}

// nopWriter is a ResponseWriter that keeps nothing.
type nopWriter struct{ h http.Header }

func (w *nopWriter) Header() http.Header       { return w.h }
func (*nopWriter) Write(p []byte) (int, error) { return len(p), nil }
func (*nopWriter) WriteHeader(int)             {}

// BenchmarkHTTPOverheadPaired measures the HTTP proxy with no fault active
// (as `stagger proxy` runs it) against a bare httputil.ReverseProxy, in
// alternating batches of 128 requests of 1 KiB answers from 16
// keep-alive clients, so that both see the same load on a shared machine.
// b.N is the requests to each. It reports time-ratio (the proxy's time
// over the bare one's: the inverse of the throughput ratio) and the p99
// of each.
func BenchmarkHTTPOverheadPaired(b *testing.B) {
	body := make([]byte, 1024)
	upSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(body) }))
	defer upSrv.Close()
	u, _ := url.Parse(upSrv.URL)
	bare := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.SetXForwarded() },
		Transport: &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second},
	})
	defer bare.Close()
	p, err := NewHTTP(Config{Name: "bench", Upstream: upSrv.URL, StatsPath: "/_stagger/stats", NoRequestCounts: true})
	if err != nil {
		b.Fatal(err)
	}
	proxied := httptest.NewServer(p)
	defer proxied.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	targets := [2]string{bare.URL + "/x", proxied.URL + "/x"}
	pairedBatches(b, 16, func(_, target int) error {
		resp, err := client.Get(targets[target])
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		return resp.Body.Close()
	})
}

// BenchmarkTCPOverheadPaired is BenchmarkHTTPOverheadPaired for the TCP
// proxy against a bare io.Copy relay: 64-byte round trips to an echo
// server on 8 connections through each.
func BenchmarkTCPOverheadPaired(b *testing.B) {
	up := echoServer(b)
	p, err := StartTCP(Config{Name: "bench", Upstream: up})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	const workers = 8
	var conns [workers][2]net.Conn
	for w := range workers {
		for t, addr := range []string{bareRelay(b, up), p.Addr()} {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			conns[w][t] = c
		}
	}
	var bufs [workers][2][64]byte
	pairedBatches(b, workers, func(w, target int) error {
		c, buf := conns[w][target], bufs[w][target][:]
		if _, err := c.Write(buf); err != nil {
			return err
		}
		_, err := io.ReadFull(c, buf)
		return err
	})
}

// BenchmarkTCPStreamPaired is BenchmarkTCPOverheadPaired for bulk
// streams: each call writes 256 KiB in one piece on one connection
// through each relay and reads the echo back. b.N is the calls to each;
// time-ratio is the inverse of the throughput ratio.
func BenchmarkTCPStreamPaired(b *testing.B) {
	up := echoServer(b)
	p, err := StartTCP(Config{Name: "bench", Upstream: up})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	var conns [2]net.Conn
	for t, addr := range []string{bareRelay(b, up), p.Addr()} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		conns[t] = c
	}
	out, in := make([]byte, 256<<10), make([]byte, 256<<10)
	b.SetBytes(int64(len(out)))
	pairedBatches(b, 1, func(_, target int) error {
		c := conns[target]
		read := make(chan error, 1)
		go func() { _, err := io.ReadFull(c, in); read <- err }()
		if _, err := c.Write(out); err != nil {
			return err
		}
		return <-read
	})
}

// pairedBatches runs b.N calls of do on each of two targets (0: the bare
// one) from workers goroutines, in alternating batches whose order flips
// each round, and reports the second target's time and p99 over the
// first's. do gets its worker's number, for state of its own.
func pairedBatches(b *testing.B, workers int, do func(worker, target int) error) {
	const batch = 128
	jobs := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var lat [2][]time.Duration
	var failed error
	for w := range workers {
		go func() {
			for t := range jobs {
				start := time.Now()
				err := do(w, t)
				d := time.Since(start)
				mu.Lock()
				lat[t] = append(lat[t], d)
				if err != nil && failed == nil {
					failed = err
				}
				mu.Unlock()
				wg.Done()
			}
		}()
	}
	defer close(jobs)
	var spent [2]time.Duration
	b.ResetTimer()
	for round := 0; round*batch < b.N; round++ {
		for k := range 2 {
			t := (round + k) % 2
			n := min(batch, b.N-round*batch)
			start := time.Now()
			wg.Add(n)
			for range n {
				jobs <- t
			}
			wg.Wait()
			spent[t] += time.Since(start)
		}
	}
	b.StopTimer()
	if failed != nil {
		b.Fatal(failed)
	}
	p99 := func(l []time.Duration) float64 {
		slices.Sort(l)
		return float64(l[len(l)*99/100].Microseconds())
	}
	b.ReportMetric(float64(spent[1])/float64(spent[0]), "time-ratio")
	b.ReportMetric(p99(lat[0]), "p99-bare-µs")
	b.ReportMetric(p99(lat[1]), "p99-proxy-µs")
	b.ReportMetric(p99(lat[1])/p99(lat[0]), "p99-ratio")
}
