package postgres_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/staggerhq/stagger/ui"
)

// countingWriter counts the bytes a handler writes.
type countingWriter struct {
	http.ResponseWriter
	n    int64
	code int
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return c.ResponseWriter.Write(p)
}

func (c *countingWriter) WriteHeader(code int) {
	c.code = code
	c.ResponseWriter.WriteHeader(code)
}

// BenchmarkDashboardJobsPage times the dashboard's job list (package ui,
// GET jobs?… as a browser asks for it, through the HTTP handler) over
// the 1,000,000 jobs of BenchmarkSearchFirstPage, for the default view
// and each filter: one op is one page (50 jobs, the default), timed in
// the handler (ms-server/op) with the bytes it writes (B-page). Run it
// alone, under the benchmark lock:
//
//	flock /tmp/bench.lock go test -run '^$' -bench DashboardJobsPage -benchtime 20x -v
func BenchmarkDashboardJobsPage(b *testing.B) {
	_, q := bigTable(b)
	d, err := ui.New(ui.Config{Queues: ui.NewQueues(q)})
	if err != nil {
		b.Fatal(err)
	}
	var served time.Duration
	var bytes int64
	var code int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cw := &countingWriter{ResponseWriter: w, code: 200}
		t0 := time.Now()
		d.ServeHTTP(cw, r)
		served += time.Since(t0)
		bytes, code = cw.n, cw.code
	}))
	defer srv.Close()
	for _, c := range []struct{ name, query string }{
		{"default", ""},
		{"state_pending", "state=pending"},
		{"state_leased", "state=leased"},
		{"state_done", "state=done"},
		{"state_dead", "state=dead"},
		{"queue", "queue=big"},
		{"reason_exhausted", "reason=exhausted"},
		{"reason_canceled", "reason=canceled"}, // 100 of 200,000 dead jobs
		{"age_1h", "age=1h"},
		{"age_11d", "age=264h"}, // older than 11 days: the oldest 5 %
		{"prefix", "prefix=job-05"},
		{"limit_1000", "limit=1000"},
	} {
		b.Run(c.name, func(b *testing.B) {
			url := srv.URL + "/jobs"
			if c.query != "" {
				url += "?" + c.query
			}
			var rows int
			get := func() {
				resp, err := http.Get(url)
				if err != nil {
					b.Fatal(err)
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || code != 200 {
					b.Fatalf("GET %s: %d %v: %.300s", url, code, err, body)
				}
				rows = strings.Count(string(body), `<a href="job?id=`)
			}
			// The queues' names, as the dashboard reads them every
			// Config.Interval; a search of every queue takes them.
			d.SampleQueues(context.Background(), time.Now())
			get() // warm: the plan, the pool's connection
			served, bytes = 0, 0
			for b.Loop() {
				get()
			}
			b.ReportMetric(float64(served.Microseconds())/1000/float64(b.N), "ms-server/op")
			b.ReportMetric(float64(bytes), "B-page")
			b.ReportMetric(float64(rows), "jobs")
		})
	}
}
