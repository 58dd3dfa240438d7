package ui_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

	"github.com/staggerhq/stagger/ui"
)

// manyQueues is a Queues of n queues with counts only.
type manyQueues struct{ n int }

func (m manyQueues) Overview(context.Context) ([]ui.QueueInfo, error) {
	out := make([]ui.QueueInfo, m.n)
	for i := range out {
		out[i] = ui.QueueInfo{Name: fmt.Sprintf("queue-%03d", i), Due: int64(i), Done: int64(1000 * i)}
	}
	return out, nil
}
func (manyQueues) Jobs(context.Context, ui.JobFilter) ([]ui.JobInfo, string, error) {
	return nil, "", nil
}
func (manyQueues) Job(context.Context, string, int) (ui.JobDetail, error) {
	return ui.JobDetail{}, ui.ErrNotFound
}
func (manyQueues) Cancel(context.Context, string, string) (ui.JobInfo, error) {
	return ui.JobInfo{}, ui.ErrUnsupported
}
func (manyQueues) Requeue(context.Context, string, int, time.Duration, string) (ui.JobInfo, error) {
	return ui.JobInfo{}, ui.ErrUnsupported
}
func (manyQueues) SetPaused(context.Context, string, bool, string) error { return ui.ErrUnsupported }

// BenchmarkDashboardHour measures the whole dashboard: the heap an hour
// of history of 100 dependencies and the counts of 100 queues hold, and
// what one request for the history (/api/dependencies, the largest
// answer) and one queues page allocate, per op.
func BenchmarkDashboardHour(b *testing.B) {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	d, _ := ui.New(ui.Config{Queues: manyQueues{100}})
	for i := range ui.DefaultMaxDependencies {
		d.Hooks(fmt.Sprintf("dependency-%03d", i))
	}
	t0 := time.Unix(0, 0)
	for i := range ui.DefaultHistory {
		d.Sample(t0.Add(time.Duration(i) * time.Second))
	}
	d.SampleQueues(context.Background(), t0)
	d.SampleQueues(context.Background(), t0.Add(time.Second))
	runtime.GC()
	runtime.ReadMemStats(&after)
	held := float64(after.HeapAlloc-before.HeapAlloc) / 1e6
	srv := httptest.NewServer(d)
	defer srv.Close()
	get := func(p string) {
		resp, err := http.Get(srv.URL + p)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	get("/api/dependencies")
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	for b.Loop() {
		get("/api/dependencies")
		get("/queues")
	}
	runtime.ReadMemStats(&m1)
	b.ReportMetric(held, "MB-held")
	b.ReportMetric(float64(m1.TotalAlloc-m0.TotalAlloc)/float64(b.N)/1e6, "MB-alloc/op")
	runtime.KeepAlive(d)
}
