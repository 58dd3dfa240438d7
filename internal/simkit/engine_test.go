package simkit

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestEngineOrder checks the heap against a sort of the same events: time
// first, then schedule order for equal times, also while events are added
// during the run.
func TestEngineOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	e := NewEngine(0)
	type rec struct {
		at  time.Duration
		seq int
	}
	var want []rec
	seq := 0
	add := func(at time.Duration) {
		seq++
		want = append(want, rec{at, seq})
		e.At(at, 0, int32(seq))
	}
	for range 5000 {
		add(time.Duration(r.IntN(300))) // many ties
	}
	var got []rec
	for {
		ev, ok := e.Next()
		if !ok {
			break
		}
		if e.Now() != ev.At {
			t.Fatalf("Now %v after event at %v", e.Now(), ev.At)
		}
		got = append(got, rec{ev.At, int(ev.ID)})
		if len(got) < 3000 && r.IntN(2) == 0 {
			add(ev.At + time.Duration(r.IntN(50)))
		}
	}
	slices.SortStableFunc(want, func(a, b rec) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		return a.seq - b.seq
	})
	if !slices.Equal(got, want) {
		t.Fatalf("order differs from sort (len %d vs %d)", len(got), len(want))
	}
	if e.Processed() != uint64(len(want)) {
		t.Errorf("Processed = %d, want %d", e.Processed(), len(want))
	}
}

func TestEnginePastPanics(t *testing.T) {
	e := NewEngine(4)
	e.At(10, 0, 0)
	e.Next()
	defer func() {
		if recover() == nil {
			t.Fatal("scheduling before now did not panic")
		}
	}()
	e.At(9, 0, 0)
}

func TestEngineAfterNegativeAndReset(t *testing.T) {
	e := NewEngine(4)
	e.At(5, 1, 1)
	e.Next()
	e.After(-3, 2, 2)
	ev, _ := e.Next()
	if ev.At != 5 || ev.Kind != 2 {
		t.Fatalf("After(-3) gave %+v, want at 5", ev)
	}
	if e.Time() != Epoch.Add(5) {
		t.Errorf("Time = %v", e.Time())
	}
	e.After(1, 0, 0)
	e.Reset()
	if e.Pending() != 0 || e.Now() != 0 || e.Processed() != 0 {
		t.Fatalf("Reset left pending=%d now=%v processed=%d", e.Pending(), e.Now(), e.Processed())
	}
	if _, ok := e.Next(); ok {
		t.Fatal("Next after Reset returned an event")
	}
	if _, ok := e.Peek(); ok {
		t.Fatal("Peek after Reset returned an event")
	}
}

// TestEngineNoAllocs: once the queue has grown, scheduling and taking events
// allocates nothing.
func TestEngineNoAllocs(t *testing.T) {
	e := NewEngine(1024)
	for i := range 1000 {
		e.At(time.Duration(i), 0, 0)
	}
	var x uint64
	allocs := testing.AllocsPerRun(1000, func() {
		ev, _ := e.Next()
		x = x*6364136223846793005 + 1442695040888963407
		e.At(ev.At+time.Duration(x>>54), 0, 0)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per event in steady state", allocs)
	}
}

// benchHold is the classic "hold" model: a queue of n pending events; each
// step takes the earliest and schedules one at an exponential distance.
func benchHold(b *testing.B, n int) {
	r := rand.New(rand.NewPCG(7, 7))
	e := NewEngine(n)
	for range n {
		e.At(time.Duration(r.ExpFloat64()*1e6), 0, 0)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		ev, _ := e.Next()
		e.At(ev.At+time.Duration(r.ExpFloat64()*1e6), ev.Kind, ev.ID)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

func BenchmarkEngineHold100(b *testing.B) { benchHold(b, 100) }
func BenchmarkEngineHold10k(b *testing.B) { benchHold(b, 10_000) }
func BenchmarkEngineHold1M(b *testing.B)  { benchHold(b, 1_000_000) }

// TestEngineTakenRoot: while an event is being handled (after Next, before
// the handler schedules), Pending and Peek leave it out, and scheduling
// earlier than every pending event, later, or nothing at all keeps the
// order a sort gives.
func TestEngineTakenRoot(t *testing.T) {
	e := NewEngine(0)
	for i, at := range []time.Duration{5, 1, 9, 3} {
		e.At(at, 0, int32(i))
	}
	ev, _ := e.Next() // at 1
	if ev.At != 1 || e.Pending() != 3 {
		t.Fatalf("first %v, pending %d; want at 1, 3 pending", ev, e.Pending())
	}
	if p, ok := e.Peek(); !ok || p.At != 3 || e.Pending() != 3 {
		t.Fatalf("Peek %v %v, pending %d; want at 3, 3 pending", p, ok, e.Pending())
	}
	e.At(2, 0, 9) // after a Peek, before the rest
	var got []time.Duration
	for {
		ev, ok := e.Next()
		if !ok {
			break
		}
		got = append(got, ev.At)
		if ev.At == 3 {
			e.At(4, 0, 8) // replaces the taken root
		}
	}
	if want := []time.Duration{2, 3, 4, 5, 9}; !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}

// TestNormal: the simulator's normal draws are math/rand/v2's NormFloat64
// on the same source, number for number, over enough draws to pass
// through every layer of the ziggurat, its wedges and its tail many times.
func TestNormal(t *testing.T) {
	src, refSrc := occRand(7), occRand(7)
	ref := rand.New(&refSrc)
	tails := 0
	var x [1000]float64
	for i := range 3_000_000 {
		if i%len(x) == 0 {
			src.normals(x[:])
		}
		got, want := x[i%len(x)], ref.NormFloat64()
		if got != want {
			t.Fatalf("draw %d: %v, want %v", i, got, want)
		}
		if math.Abs(got) > zigR {
			tails++
		}
	}
	if tails < 1000 { // P(|x| > 3.44) ≈ 5.8e-4: ~1700 expected
		t.Fatalf("%d draws in the tail, want ~1700", tails)
	}
}

// TestOCCQueueOrder: brooker2015's queue yields its writes in (time,
// client) order, as a sort of the same writes does, while writes are added
// during the run, also when its time range is small enough that base moves
// up many times, and with many ties.
func TestOCCQueueOrder(t *testing.T) {
	for _, atBits := range []uint{0, 12} {
		for _, n := range []int{1, 2, 5, 190, 1000} {
			r := rand.New(rand.NewPCG(uint64(n), uint64(atBits)))
			var q occQueue
			q.reset(n)
			if atBits > 0 {
				q.atBits = atBits
			}
			type rec struct {
				at time.Duration
				id int32
			}
			pending := map[int32]time.Duration{}
			var now time.Duration
			for id := range int32(n) {
				at := time.Duration(r.IntN(50))
				q.push(at, id)
				pending[id] = at
			}
			for steps := 0; len(pending) > 0; steps++ {
				want := rec{-1, -1}
				for id, at := range pending {
					if want.id < 0 || at < want.at || at == want.at && id < want.id {
						want = rec{at, id}
					}
				}
				at, id, ok := q.next()
				if !ok || (rec{at, id}) != want {
					t.Fatalf("atBits %d n %d step %d: next %v %d %v, want %v", atBits, n, steps, at, id, ok, want)
				}
				now = at
				delete(pending, id)
				if steps < 20*n && r.IntN(4) != 0 { // a follow-up, often tied
					next := now + time.Duration(r.IntN(3000))
					q.push(next, id)
					pending[id] = next
				}
			}
			if _, _, ok := q.next(); ok {
				t.Fatalf("atBits %d n %d: an entry left", atBits, n)
			}
			if atBits > 0 && q.base == 0 {
				t.Fatalf("n %d: base never moved", n)
			}
		}
	}
}
