package faultproxy

import (
	"io"
	"net"
	"slices"
	"testing"
	"time"
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
