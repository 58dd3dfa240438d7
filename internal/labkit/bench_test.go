package labkit

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkGateway counts attempts per second through the real HTTP path: 32
// keep-alive clients hammer a gateway on 127.0.0.1 (accepting everything, no
// latency), each request carrying a request ID and an attempt number, and
// the gateway's recorder must hold exactly b.N attempts at the end.
// Reported as attempts/s.
//
// Three kinds of client: "raw" writes HTTP/1.1 requests on its own
// keep-alive TCP connection and reads each answer with a bufio.Reader — a
// light client, so the number is mostly the gateway's; "raw-pipelined-8"
// writes 8 requests before reading their answers; "net-http" uses
// net/http's client, which costs about as much CPU as the gateway, on the
// same two cores.
func BenchmarkGateway(b *testing.B) {
	b.Run("raw", func(b *testing.B) { benchGateway(b, rawClient) })
	b.Run("raw-pipelined-8", func(b *testing.B) { benchGateway(b, rawPipelined(8)) })
	b.Run("net-http", func(b *testing.B) { benchGateway(b, netHTTPClient) })
}

// client returns a function that sends one attempt (request id, attempt n)
// and reports whether it was accepted; close releases its connections.
type client func(b *testing.B, url, addr string) (send func(id string, n int64) bool, close func())

func benchGateway(b *testing.B, newClient client) {
	g, err := NewGateway(Faults{}, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	url, err := g.Listen()
	if err != nil {
		b.Fatal(err)
	}
	ids := make([]string, 1024)
	for i := range ids {
		ids[i] = strconv.Itoa(i)
	}
	var (
		seq    atomic.Int64
		failed atomic.Int64
		mu     sync.Mutex
		closes []func()
	)
	b.SetParallelism(16) // 16 × GOMAXPROCS clients
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		send, closeFn := newClient(b, url+"/", strings.TrimPrefix(url, "http://"))
		mu.Lock()
		closes = append(closes, closeFn)
		mu.Unlock()
		for pb.Next() {
			n := seq.Add(1)
			if !send(ids[n%int64(len(ids))], n/int64(len(ids))+1) {
				failed.Add(1)
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "attempts/s")
	for _, c := range closes {
		c()
	}
	if err := g.Close(context.Background()); err != nil {
		b.Fatal(err)
	}
	if got := g.Recorder().Total(); got != b.N || failed.Load() != 0 {
		b.Fatalf("gateway counted %d attempts, %d were sent, %d not accepted", got, b.N, failed.Load())
	}
	if s := g.Recorder().Stats(0); s.Accepted != b.N || s.Unidentified != 0 {
		b.Fatalf("accepted %d, unidentified %d of %d", s.Accepted, s.Unidentified, b.N)
	}
}

func netHTTPClient(b *testing.B, url, _ string) (func(string, int64) bool, func()) {
	tr := &http.Transport{MaxIdleConnsPerHost: 1, DisableCompression: true}
	c := &http.Client{Transport: tr}
	return func(id string, n int64) bool {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header[HeaderRequestID] = []string{id}
		req.Header[HeaderAttempt] = []string{strconv.FormatInt(n, 10)}
		resp, err := c.Do(req)
		if err != nil {
			b.Error(err)
			return false
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, tr.CloseIdleConnections
}

func rawClient(b *testing.B, _, addr string) (func(string, int64) bool, func()) {
	return rawPipelined(1)(b, "", addr)
}

// rawPipelined returns a raw client that writes depth requests before
// reading their answers (HTTP/1.1 pipelining: the gateway reads several
// requests per system call).
func rawPipelined(depth int) client {
	return func(b *testing.B, _, addr string) (func(string, int64) bool, func()) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		br := bufio.NewReader(conn)
		bw := bufio.NewWriter(conn)
		var buf []byte
		pending := 0
		// flush sends what is buffered and reads one answer per request.
		flush := func() bool {
			if err := bw.Flush(); err != nil {
				b.Error(err)
				return false
			}
			ok := true
			for ; pending > 0; pending-- {
				// The gateway's answers have no body (Content-Length: 0):
				// read the status line and the headers up to the blank line.
				status, err := br.ReadSlice('\n')
				if err != nil {
					b.Error(err)
					return false
				}
				ok = ok && bytes.HasPrefix(status, []byte("HTTP/1.1 200 "))
				for {
					line, err := br.ReadSlice('\n')
					if err != nil {
						b.Error(err)
						return false
					}
					if len(line) == 2 { // "\r\n"
						break
					}
				}
			}
			return ok
		}
		send := func(id string, n int64) bool {
			buf = append(buf[:0], "GET / HTTP/1.1\r\nHost: "...)
			buf = append(buf, addr...)
			buf = append(buf, "\r\n"+HeaderRequestID+": "...)
			buf = append(buf, id...)
			buf = append(buf, "\r\n"+HeaderAttempt+": "...)
			buf = strconv.AppendInt(buf, n, 10)
			buf = append(buf, "\r\n\r\n"...)
			if _, err := bw.Write(buf); err != nil {
				b.Error(err)
				return false
			}
			if pending++; pending < depth {
				return true
			}
			return flush()
		}
		return send, func() {
			if !flush() {
				b.Error("pipelined answers at close were not all accepted")
			}
			conn.Close()
		}
	}
}

// BenchmarkRecorderRecord is the cost of counting one attempt, from many
// goroutines at once (one shared recorder, 1,024 request IDs).
func BenchmarkRecorderRecord(b *testing.B) {
	start := time.Now()
	r := NewRecorder(start)
	ids := make([]string, 1024)
	for i := range ids {
		ids[i] = strconv.Itoa(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			r.Record(start.Add(time.Duration(i)*time.Microsecond), ids[i%len(ids)], i/len(ids)+1, Outcome(1+i%3))
		}
	})
	b.StopTimer()
	if r.Total() != b.N {
		b.Fatalf("recorded %d of %d", r.Total(), b.N)
	}
}

// BenchmarkRecorderStats computes the statistics (sort, sliding peak,
// timeline) of 100,000 attempts spread over 10 s.
func BenchmarkRecorderStats(b *testing.B) {
	start := time.Now()
	r := NewRecorder(start)
	for i := range 100_000 {
		r.Record(start.Add(time.Duration(i)*100*time.Microsecond), strconv.Itoa(i%1000), i/1000+1, Outcome(1+i%2))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		s := r.Stats(DefaultWindow)
		if s.Total != 100_000 || s.Peak != 2000 {
			b.Fatalf("total %d peak %d", s.Total, s.Peak)
		}
	}
}
