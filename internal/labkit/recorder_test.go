package labkit

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
)

// brutePeak is the reference: it slides a window over every whole-unit start
// from before the first arrival to the last one and counts the arrivals in
// [s, s+w) directly. It does not rely on the fact that an optimal window can
// start at an arrival, which the implementation does.
func brutePeak(times []int64, w int64) (int, int64) {
	if len(times) == 0 || w <= 0 {
		return 0, 0
	}
	lo, hi := times[0], times[0]
	for _, t := range times {
		lo, hi = min(lo, t), max(hi, t)
	}
	best, bestAt := 0, int64(0)
	for s := lo - w; s <= hi; s++ {
		n := 0
		for _, t := range times {
			if t >= s && t < s+w {
				n++
			}
		}
		if n > best {
			best, bestAt = n, s
		}
	}
	return best, bestAt
}

func TestSlidingPeakMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for iter := range 2000 {
		n := rng.IntN(40)
		span := 1 + rng.Int64N(400)
		w := 1 + rng.Int64N(120)
		times := make([]int64, n)
		ds := make([]time.Duration, n)
		for i := range times {
			times[i] = rng.Int64N(span)
			if rng.IntN(5) == 0 && i > 0 { // duplicates matter for the edges
				times[i] = times[rng.IntN(i)]
			}
			ds[i] = time.Duration(times[i])
		}
		want, _ := brutePeak(times, w)
		got, at := SlidingPeak(ds, time.Duration(w))
		if got != want {
			t.Fatalf("iter %d: SlidingPeak(%v, %d) = %d, brute force says %d", iter, times, w, got, want)
		}
		if n == 0 {
			continue
		}
		// The reported start must be an arrival and really hold the peak,
		// and no earlier start may hold as many.
		inside, isArrival := 0, false
		for _, x := range times {
			if x >= int64(at) && x < int64(at)+w {
				inside++
			}
			isArrival = isArrival || x == int64(at)
		}
		if !isArrival || inside != got {
			t.Fatalf("iter %d: PeakAt %d holds %d arrivals (arrival: %v), want %d", iter, at, inside, isArrival, got)
		}
		for s := int64(at) - w; s < int64(at); s++ {
			c := 0
			for _, x := range times {
				if x >= s && x < s+w {
					c++
				}
			}
			if c >= got && c > 0 {
				// an earlier window holds as many: only allowed when it
				// starts before the first arrival it holds, i.e. it is the
				// same set of arrivals as a window starting at one.
				first := int64(-1)
				for _, x := range times {
					if x >= s && x < s+w && (first < 0 || x < first) {
						first = x
					}
				}
				if first < int64(at) {
					t.Fatalf("iter %d: window at %d (first arrival %d) holds %d, earlier than PeakAt %d", iter, s, first, c, at)
				}
			}
		}
	}
}

func TestSlidingPeakEdges(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		times []time.Duration
		w     time.Duration
		peak  int
		at    time.Duration
	}{
		{nil, 200 * ms, 0, 0},
		{[]time.Duration{5 * ms}, 0, 0, 0},
		{[]time.Duration{5 * ms}, 200 * ms, 1, 5 * ms},
		// Half-open: an arrival exactly one window later is not inside.
		{[]time.Duration{0, 200 * ms}, 200 * ms, 1, 0},
		{[]time.Duration{0, 200*ms - 1}, 200 * ms, 2, 0},
		// Unsorted input, the densest cluster later on.
		{[]time.Duration{900 * ms, 10 * ms, 950 * ms, 300 * ms, 901 * ms}, 100 * ms, 3, 900 * ms},
		// A window reaching past the largest duration does not overflow.
		{[]time.Duration{1<<63 - 2, 1<<63 - 1}, time.Hour, 2, 1<<63 - 2},
	}
	for _, c := range cases {
		peak, at := SlidingPeak(c.times, c.w)
		if peak != c.peak || at != c.at {
			t.Errorf("SlidingPeak(%v, %v) = %d at %v, want %d at %v", c.times, c.w, peak, at, c.peak, c.at)
		}
	}
}

func TestRecorderStats(t *testing.T) {
	start := time.Unix(1000, 0)
	r := NewRecorder(start)
	ms := time.Millisecond
	at := func(d time.Duration) time.Time { return start.Add(d) }
	r.Record(at(12*ms), "1", 1, Down)
	r.Record(at(58*ms), "1", 2, Down)
	r.Record(at(30*ms), "2", 1, Busy) // out of order
	r.Record(at(250*ms), "2", 2, Accepted)
	r.Record(at(104*ms), "1", 3, Accepted)
	r.Record(at(-5*ms), "", 0, Failed)                   // before start: counts at 0, unidentified
	r.Record(at(410*ms), strings.Repeat("x", 300), 1, 0) // ID too long; unknown outcome → Failed

	s := r.Stats(200 * ms)
	check := func(name string, got, want any) {
		t.Helper()
		if got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	check("Total", s.Total, 7)
	check("Accepted", s.Accepted, 2)
	check("Rejected", s.Rejected, 5)
	check("Down", s.Down, 2)
	check("Busy", s.Busy, 1)
	check("Failed", s.Failed, 2)
	check("Peak", s.Peak, 5) // 0, 12, 30, 58, 104 inside [0, 200)
	check("PeakAt", s.PeakAt, time.Duration(0))
	check("First", s.First, time.Duration(0))
	check("Last", s.Last, 410*ms)
	check("LastAccepted", s.LastAccepted, 250*ms)
	check("Requests", s.Requests, 2)
	check("RequestsAccepted", s.RequestsAccepted, 2)
	check("Unidentified", s.Unidentified, 2)
	check("MaxAttempts", s.MaxAttempts, 3)
	check("AttemptsPerRequest", s.AttemptsPerRequest(), 2.5)
	want := []Bucket{{Start: 0, Accepted: 1, Rejected: 4, Down: 2, Busy: 1, Failed: 1}, {Start: 200 * ms, Accepted: 1}, {Start: 400 * ms, Rejected: 1, Failed: 1}}
	if fmt.Sprint(s.Timeline) != fmt.Sprint(want) {
		t.Errorf("Timeline = %v, want %v", s.Timeline, want)
	}

	reqs := r.Requests()
	if len(reqs) != 2 || reqs[0] != (Request{"1", 3, 1, 12 * ms, 104 * ms}) || reqs[1] != (Request{"2", 2, 1, 30 * ms, 250 * ms}) {
		t.Errorf("Requests = %+v", reqs)
	}
	arr := r.Arrivals()
	var prev time.Duration
	for i, a := range arr {
		if a.At < prev {
			t.Fatalf("Arrivals not sorted at %d: %+v", i, arr)
		}
		prev = a.At
	}
	if arr[0].At != 0 || arr[0].ID != "" || arr[0].Outcome != Failed || arr[1].ID != "1" || arr[1].Attempt != 1 {
		t.Errorf("Arrivals = %+v", arr)
	}
	// A narrower window changes the peak and the buckets, not the totals.
	s2 := r.Stats(50 * ms)
	if s2.Peak != 3 || len(s2.Timeline) != 9 || s2.Total != 7 {
		t.Errorf("Stats(50ms): peak %d, %d buckets, total %d; want 3, 9, 7", s2.Peak, len(s2.Timeline), s2.Total)
	}
	if r.Stats(0).Window != DefaultWindow {
		t.Error("Stats(0) does not use DefaultWindow")
	}
}

func TestRecorderEmpty(t *testing.T) {
	s := NewRecorder(time.Now()).Stats(0)
	if s.Total != 0 || s.Peak != 0 || s.Timeline != nil || s.AttemptsPerRequest() != 0 {
		t.Errorf("empty recorder: %+v", s)
	}
}

// TestRecorderConcurrent records from many goroutines and checks that the
// counts, the timeline and the per-request attempts are exact (run with
// -race).
func TestRecorderConcurrent(t *testing.T) {
	start := time.Unix(0, 0)
	r := NewRecorder(start)
	const workers, per = 16, 2000
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				o := Down
				if i%4 == 0 {
					o = Accepted
				}
				id := fmt.Sprint(i % 50)
				r.Record(start.Add(time.Duration(w*per+i)*time.Microsecond), id, i/50+1, o)
			}
		}()
	}
	wg.Wait()
	s := r.Stats(time.Millisecond)
	if s.Total != workers*per || s.Accepted != workers*per/4 || s.Requests != 50 || s.Unidentified != 0 {
		t.Fatalf("stats: total %d accepted %d requests %d unidentified %d", s.Total, s.Accepted, s.Requests, s.Unidentified)
	}
	sum := 0
	for _, b := range s.Timeline {
		sum += b.Total()
	}
	if sum != s.Total {
		t.Errorf("timeline sums to %d, total is %d", sum, s.Total)
	}
	if s.Peak != 1000 { // one arrival per µs: 1000 in any 1 ms window
		t.Errorf("Peak = %d, want 1000", s.Peak)
	}
	for _, q := range r.Requests() {
		if q.Attempts != workers*per/50 {
			t.Errorf("request %s: %d attempts, want %d", q.ID, q.Attempts, workers*per/50)
		}
	}
}

func TestOutcomeText(t *testing.T) {
	for _, o := range []Outcome{Accepted, Down, Busy, Failed, Dropped, Abandoned} {
		b, err := o.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back Outcome
		if err := back.UnmarshalText(b); err != nil || back != o {
			t.Errorf("%v round trip: %v, %v", o, back, err)
		}
	}
	if _, err := Outcome(0).MarshalText(); err == nil {
		t.Error("MarshalText(0) succeeded")
	}
	var o Outcome
	if err := o.UnmarshalText([]byte("ACCEPTED")); err == nil {
		t.Error("UnmarshalText accepted an unknown name")
	}
	if Outcome(9).String() != "Outcome(9)" {
		t.Error(Outcome(9).String())
	}
}
