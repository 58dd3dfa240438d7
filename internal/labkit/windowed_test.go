package labkit

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

func mustWindowed(t testing.TB, start time.Time, cfg WindowedConfig) *WindowedRecorder {
	t.Helper()
	r, err := NewWindowedRecorder(start, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestWindowedMatchesExact feeds the same attempts, nearly in order (as
// concurrent handlers record them), to a Recorder and a WindowedRecorder
// whose horizon covers the run: every statistic must agree.
func TestWindowedMatchesExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for iter := range 200 {
		start := time.Unix(500, 0)
		w := time.Duration(1+rng.IntN(50)) * time.Millisecond
		exact := NewRecorder(start)
		win := mustWindowed(t, start, WindowedConfig{Window: w, Horizon: 10 * time.Second, Lateness: 20 * time.Millisecond})
		var at time.Duration
		for range rng.IntN(400) {
			at += time.Duration(rng.ExpFloat64() * float64(w) / 4)
			jitter := time.Duration(rng.Int64N(int64(15 * time.Millisecond))) // < Lateness
			t := max(at-jitter, 0)
			id := ""
			if rng.IntN(5) > 0 {
				id = strconv.Itoa(rng.IntN(40))
			}
			o := Outcome(1 + rng.IntN(int(lastOutcome)))
			exact.Record(start.Add(t), id, 0, o)
			win.Record(start.Add(t), id, 0, o)
		}
		e, g := exact.Stats(w), win.Stats(true)
		if fmt.Sprintf("%+v", e) != fmt.Sprintf("%+v", g) {
			t.Fatalf("iter %d (window %v):\nexact    %+v\nwindowed %+v", iter, w, e, g)
		}
	}
}

// TestWindowedFoldsOldWindows: the timeline keeps the last Horizon; older
// attempts stay in the totals and are counted as folded.
func TestWindowedFoldsOldWindows(t *testing.T) {
	start := time.Unix(0, 0)
	ms := time.Millisecond
	r := mustWindowed(t, start, WindowedConfig{Window: 100 * ms, Horizon: 300 * ms})
	at := func(d time.Duration) time.Time { return start.Add(d) }
	r.Record(at(10*ms), "a", 1, Down)
	r.Record(at(20*ms), "a", 2, Down)
	r.Record(at(150*ms), "a", 3, Accepted)
	r.Record(at(420*ms), "b", 1, Busy)     // windows 0 and 1 leave: 3 folded
	r.Record(at(50*ms), "c", 1, Accepted)  // older than the horizon: totals only
	r.Record(at(560*ms), "", 0, Abandoned) // window 5: window 2 (empty) leaves
	s := r.Stats(true)
	if s.Total != 6 || s.Accepted != 2 || s.Down != 2 || s.Busy != 1 || s.Abandoned != 1 || s.Rejected != 3 {
		t.Errorf("totals %+v", s)
	}
	if s.Folded != 4 {
		t.Errorf("Folded = %d, want 4", s.Folded)
	}
	want := []Bucket{{Start: 300 * ms}, {Start: 400 * ms, Rejected: 1, Busy: 1}, {Start: 500 * ms, Abandoned: 1}}
	if fmt.Sprint(s.Timeline) != fmt.Sprint(want) {
		t.Errorf("Timeline = %v, want %v", s.Timeline, want)
	}
	// 50 ms came in 370 ms after the latest arrival, past the 250 ms
	// lateness: the window from 10 ms had closed with 10 and 20 in it.
	if s.Peak != 2 || s.PeakAt != 10*ms {
		t.Errorf("peak %d at %v, want 2 at 10ms", s.Peak, s.PeakAt)
	}
	if s.Requests != 3 || s.RequestsAccepted != 2 || s.MaxAttempts != 3 || s.Unidentified != 1 {
		t.Errorf("requests %+v", s)
	}
	// A jump past the whole horizon folds every window at once.
	r.Record(at(time.Hour), "", 0, Accepted)
	s = r.Stats(true)
	if s.Folded != 6 || len(s.Timeline) != 3 || s.Timeline[2].Accepted != 1 || s.Timeline[0].Start != time.Hour-200*ms {
		t.Errorf("after a jump: folded %d, timeline %v", s.Folded, s.Timeline)
	}
	if s2 := r.Stats(false); s2.Timeline != nil || s2.Total != 7 {
		t.Errorf("Stats(false) = %+v", s2)
	}
}

// TestWindowedEvicts: at most MaxRequests IDs are tracked; a new one forgets
// the oldest, and that request counts as new if it comes back.
func TestWindowedEvicts(t *testing.T) {
	start := time.Unix(0, 0)
	r := mustWindowed(t, start, WindowedConfig{MaxRequests: 3})
	for i, id := range []string{"a", "b", "a", "c", "d", "e", "a", "e"} {
		r.Record(start.Add(time.Duration(i)*time.Millisecond), id, 0, Accepted)
	}
	s := r.Stats(false)
	// a b c tracked; d evicts a, e evicts b; a again evicts c and is new; e is known.
	if s.Requests != 6 || s.Evicted != 3 || s.MaxAttempts != 2 || s.RequestsAccepted != 6 || s.Total != 8 {
		t.Errorf("requests %d evicted %d max attempts %d accepted %d total %d; want 6, 3, 2, 6, 8",
			s.Requests, s.Evicted, s.MaxAttempts, s.RequestsAccepted, s.Total)
	}
	r.Record(start, strings.Repeat("x", MaxIDLen+1), 0, Accepted)
	if s := r.Stats(false); s.Unidentified != 1 || s.Requests != 6 {
		t.Errorf("an over-long ID: unidentified %d requests %d", s.Unidentified, s.Requests)
	}
}

// TestWindowedLatePeak: an attempt passed to Arrive on time counts toward
// the peak although its outcome comes long after.
func TestWindowedLatePeak(t *testing.T) {
	start := time.Unix(0, 0)
	ms := time.Millisecond
	r := mustWindowed(t, start, WindowedConfig{Window: 100 * ms, Lateness: 10 * ms})
	slow := r.Arrive(start.Add(5 * ms))
	for i := range 50 {
		r.Record(start.Add(time.Duration(10+i*40)*ms), "", 0, Accepted)
	}
	r.Finish(slow, "x", 1, Accepted) // 2 s later
	s := r.Stats(true)
	if s.Peak != 4 || s.PeakAt != 5*ms || s.Total != 51 || s.Timeline[0].Accepted != 4 { // 5, 10, 50, 90
		t.Errorf("peak %d at %v, total %d, first window %+v; want 4 at 5ms, 51, 4 accepted", s.Peak, s.PeakAt, s.Total, s.Timeline[0])
	}
}

func TestWindowedConfigRejects(t *testing.T) {
	for _, c := range []struct {
		cfg  WindowedConfig
		want string
	}{
		{WindowedConfig{Window: -1}, "Window"},
		{WindowedConfig{Window: time.Second, Horizon: time.Millisecond}, "Horizon"},
		{WindowedConfig{Window: time.Millisecond, Horizon: 2000 * time.Hour}, "at most 1048576 windows"},
		{WindowedConfig{MaxRequests: -3}, "MaxRequests"},
		{WindowedConfig{Lateness: -time.Second}, "Lateness"},
	} {
		_, err := NewWindowedRecorder(time.Now(), c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one naming %s", c.cfg, err, c.want)
		}
	}
}

// feedWindowed records n attempts one millisecond apart, spread over ids
// distinct request IDs, with a mix of outcomes.
func feedWindowed(r *WindowedRecorder, n, ids int) {
	buf := make([]byte, 0, 32)
	for i := range n {
		buf = strconv.AppendInt(append(buf[:0], "req-"...), int64(i%ids), 10)
		r.Record(r.start.Add(time.Duration(i)*time.Millisecond), string(buf), i/ids+1, Outcome(1+i%int(lastOutcome)))
	}
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestWindowedMemory is the bound the proxy relies on: 10 million attempts
// from 1 million distinct request IDs, 2.8 hours at one attempt per
// millisecond (longer than the default horizon), in under 80 MB of heap.
func TestWindowedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("records 10 million attempts; run without -short")
	}
	n, ids := 10_000_000, 1_000_000
	cfg := WindowedConfig{}
	if raceEnabled {
		// The race detector is 10 times slower: 1 million attempts (as many
		// IDs, so the map is as large), 17 minutes past a 10 minute horizon.
		n, cfg.Horizon = 1_000_000, 10*time.Minute
	}
	before := heapInUse()
	r := mustWindowed(t, time.Unix(0, 0), cfg)
	feedWindowed(r, n, ids)
	used := heapInUse() - before
	s := r.Stats(false)
	runtime.KeepAlive(r)
	t.Logf("%d attempts, %d request IDs: %.1f MB of heap (%.1f B per ID)", n, ids, float64(used)/1e6, float64(used)/float64(ids))
	if s.Total != n || s.Requests != ids || s.Evicted != 0 || s.Folded == 0 {
		t.Fatalf("stats: total %d requests %d evicted %d folded %d", s.Total, s.Requests, s.Evicted, s.Folded)
	}
	if used > 80<<20 {
		t.Errorf("heap grew by %.1f MB, want under 80 MB", float64(used)/(1<<20))
	}
}

// BenchmarkWindowedRecorderRecord is the cost of counting one attempt, from
// many goroutines at once (one shared recorder, 1,024 request IDs).
func BenchmarkWindowedRecorderRecord(b *testing.B) {
	r := mustWindowed(b, time.Now(), WindowedConfig{})
	ids := make([]string, 1024)
	for i := range ids {
		ids[i] = strconv.Itoa(i)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			r.Record(time.Now(), ids[i%len(ids)], i/len(ids)+1, Outcome(1+i%3))
		}
	})
	b.StopTimer()
	if s := r.Stats(false); s.Total != b.N {
		b.Fatalf("recorded %d of %d", s.Total, b.N)
	}
}

// BenchmarkWindowedRecorderStats reads the statistics after 100,000 and
// after 10 million attempts (one per millisecond, 1 million request IDs at
// most): the cost must not grow with the count. /timeline also lays out the
// kept windows (18,000 of 200 ms in the default hour).
func BenchmarkWindowedRecorderStats(b *testing.B) {
	for _, n := range []int{100_000, 10_000_000} {
		r := mustWindowed(b, time.Unix(0, 0), WindowedConfig{})
		feedWindowed(r, n, min(n, 1_000_000))
		for _, tl := range []bool{false, true} {
			name := fmt.Sprintf("arrivals=%d", n)
			if tl {
				name += "/timeline"
			}
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if s := r.Stats(tl); s.Total != n {
						b.Fatalf("total %d", s.Total)
					}
				}
			})
		}
	}
}

// BenchmarkWindowedRecorderMemory reports the heap a recorder holds after 10
// million attempts from 1 million request IDs (MB/recorder), and the cost
// per attempt of getting there.
func BenchmarkWindowedRecorderMemory(b *testing.B) {
	const n, ids = 10_000_000, 1_000_000
	var mb float64
	for b.Loop() {
		before := heapInUse()
		r := mustWindowed(b, time.Unix(0, 0), WindowedConfig{})
		feedWindowed(r, n, ids)
		mb = float64(heapInUse()-before) / 1e6
		runtime.KeepAlive(r)
	}
	b.ReportMetric(mb, "MB/recorder")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/attempt")
}

// A receiver that runs for days counts with a WindowedRecorder: Arrive
// when the attempt arrives (for the peak), Finish once its outcome is known.
func ExampleWindowedRecorder() {
	start := time.Unix(0, 0)
	rec, err := NewWindowedRecorder(start, WindowedConfig{Window: 200 * time.Millisecond, Horizon: time.Hour, MaxRequests: 100_000})
	if err != nil {
		panic(err)
	}
	for i, o := range []Outcome{Down, Down, Accepted, Accepted} {
		p := rec.Arrive(start.Add(time.Duration(i) * 50 * time.Millisecond))
		rec.Finish(p, fmt.Sprint("order-", i%2), i/2+1, o)
	}
	s := rec.Stats(false)
	fmt.Printf("%d attempts, %d accepted, peak %d in %v, %d requests, %.1f attempts/request\n",
		s.Total, s.Accepted, s.Peak, s.Window, s.Requests, s.AttemptsPerRequest())
	// Output: 4 attempts, 2 accepted, peak 4 in 200ms, 2 requests, 2.0 attempts/request
}
