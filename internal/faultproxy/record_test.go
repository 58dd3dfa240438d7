package faultproxy

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/staggerhq/stagger/internal/timeline"
)

// fakeClock is a proxy clock the test moves.
type fakeClock struct {
	start time.Time
	off   atomic.Int64
}

func (c *fakeClock) now() time.Time      { return c.start.Add(time.Duration(c.off.Load())) }
func (c *fakeClock) set(d time.Duration) { c.off.Store(int64(d)) }
func newFakeClock() *fakeClock {
	return &fakeClock{start: time.Date(2026, 11, 3, 14, 0, 0, 0, time.UTC)}
}

// TestRecorderHold: a window whose attempt is still unanswered
// recordHold after its end is written with it as a timeout, the late
// answer is not counted again, and memory holds only the open windows.
func TestRecorderHold(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hold.jsonl")
	clk := newFakeClock()
	rc, err := newTimelineRecorder(path, time.Second, clk.start)
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	_, _, hung := rc.arrive(httptest.NewRecorder(), req, clk.now)
	for i := 1; i <= 1000; i++ { // answered attempts, one per second
		clk.set(time.Duration(i) * time.Second)
		w, _, a := rc.arrive(httptest.NewRecorder(), req, clk.now)
		w.WriteHeader(http.StatusOK)
		a.done()
		if n := len(rc.wins); n > int(recordHold/time.Second)+2 {
			t.Fatalf("%d windows open after %d s", n, i)
		}
	}
	if n := len(rc.wins); n > 2 {
		t.Errorf("%d windows open at the end", n)
	}
	hung.done() // answered long after its window was written: not counted
	if err := rc.close(); err != nil {
		t.Fatal(err)
	}
	tl, err := timeline.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if w := tl.Windows[0]; w.Arrivals != 1 || w.Timeouts != 1 || len(w.Status) != 0 {
		t.Errorf("window 0: %+v", w)
	}
	if len(tl.Windows) != 1001 || tl.Arrivals() != 1001 {
		t.Errorf("%d windows, %d arrivals", len(tl.Windows), tl.Arrivals())
	}
}

// TestRecorderConcurrent: attempts from many goroutines are all counted.
func TestRecorderConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.jsonl")
	clk := newFakeClock()
	rc, err := newTimelineRecorder(path, 200*time.Millisecond, clk.start)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				_, _, a := rc.arrive(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil), clk.now)
				a.sw.Status = 200 + g%2*300
				a.done()
				if g == 0 && i%50 == 0 {
					clk.off.Add(int64(100 * time.Millisecond))
				}
			}
		}()
	}
	wg.Wait()
	if err := rc.close(); err != nil {
		t.Fatal(err)
	}
	tl, err := timeline.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var ok, fail int64
	for _, w := range tl.Windows {
		ok, fail = ok+w.Code("200"), fail+w.Code("500")
	}
	if tl.Arrivals() != 4000 || ok != 2000 || fail != 2000 {
		t.Errorf("%d arrivals, %d ok, %d failed", tl.Arrivals(), ok, fail)
	}
}

func TestLatencyHist(t *testing.T) {
	var h latencyHist
	for i := 1; i <= 1000; i++ {
		h.add(time.Duration(i) * time.Millisecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Millisecond}, {0.9, 900 * time.Millisecond}, {0.99, 990 * time.Millisecond}} {
		got := h.quantile(c.q)
		if d := float64(got-c.want) / float64(c.want); d < -0.05 || d > 0.05 {
			t.Errorf("quantile %v = %v, want %v ± 5%%", c.q, got, c.want)
		}
	}
}

// TestRecorderIdle: a long idle spell between attempts opens no windows.
func TestRecorderIdle(t *testing.T) {
	path := filepath.Join(t.TempDir(), "idle.jsonl")
	clk := newFakeClock()
	rc, err := newTimelineRecorder(path, time.Millisecond, clk.start)
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	_, _, hung := rc.arrive(httptest.NewRecorder(), req, clk.now)
	for _, at := range []time.Duration{time.Minute, 29 * 24 * time.Hour} {
		clk.set(at)
		w, _, a := rc.arrive(httptest.NewRecorder(), req, clk.now)
		w.WriteHeader(http.StatusNoContent)
		a.done()
		if n := len(rc.wins); n > 2 {
			t.Fatalf("%d windows open at %v", n, at)
		}
	}
	hung.done()
	if err := rc.close(); err != nil {
		t.Fatal(err)
	}
	tl, err := timeline.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(tl.Windows) != 3 || tl.Windows[0].Timeouts != 1 || tl.Windows[2].Start != 29*24*time.Hour || tl.Windows[2].Code("204") != 1 {
		t.Errorf("%+v", tl.Windows)
	}
}
