package faultproxy

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/staggerhq/stagger/internal/labkit"
)

// echoServer answers every byte it reads with the same byte.
func echoServer(b *testing.B) string {
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
