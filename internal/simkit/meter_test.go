package simkit

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestMeterPeak compares the sliding-window peak with a brute-force count
// over every window that starts at an arrival.
func TestMeterPeak(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for trial := range 50 {
		w := time.Duration(1+r.IntN(300)) * time.Millisecond
		n := 1 + r.IntN(3000)
		ts := make([]time.Duration, n)
		for i := range ts {
			ts[i] = time.Duration(r.IntN(5000)) * time.Millisecond / time.Duration(1+trial%3)
		}
		slices.Sort(ts)
		m := NewMeter(w, time.Second)
		for _, at := range ts {
			m.Call(at)
		}
		want := 0
		for i := range ts {
			k := 0
			for j := i; j < n && ts[j] < ts[i]+w; j++ {
				k++
			}
			want = max(want, k)
		}
		if got, _ := m.Peak(); got != want {
			t.Fatalf("trial %d (w=%v, n=%d): peak %d, brute force %d", trial, w, n, got, want)
		}
		if m.Calls() != int64(n) {
			t.Fatalf("calls %d, want %d", m.Calls(), n)
		}
		var sum int64
		for _, x := range m.Load() {
			sum += x
		}
		if sum != int64(n) {
			t.Fatalf("load buckets sum to %d, want %d", sum, n)
		}
	}
}

// TestMeterLittle checks the in-flight integral on a hand-made trace:
// requests [0,2), [1,4), [3,4) seconds: area 2+3+1 = 6 over 4 s.
func TestMeterLittle(t *testing.T) {
	s := time.Second
	trace := func(m *Meter) {
		m.Enter(0)
		m.Enter(1 * s)
		m.Leave(2*s, 0)
		m.Enter(3 * s)
		m.Leave(4*s, 1*s)
		m.Leave(4*s, 3*s)
	}
	m := NewMeter(DefaultWindow, time.Second)
	trace(m)
	l, lambda, w := m.Little(4 * s)
	if l != 1.5 || lambda != 0.75 || w != 2 {
		t.Fatalf("L=%v λ=%v W=%v; want 1.5, 0.75, 2", l, lambda, w)
	}
	// the same trace measured over [1s, 3s): area 1+2 = 3 over 2 s; one
	// request entered in the span (at 1 s) and stayed 3 s
	m = NewMeter(DefaultWindow, time.Second)
	m.Measure(1*s, 3*s)
	trace(m)
	l, lambda, w = m.Little(4 * s)
	if l != 1.5 || lambda != 0.5 || w != 3 || m.Unfinished() != 0 {
		t.Fatalf("span: L=%v λ=%v W=%v unfinished=%d; want 1.5, 0.5, 3, 0", l, lambda, w, m.Unfinished())
	}
	if now, peak := m.InFlight(); now != 0 || peak != 2 {
		t.Fatalf("in flight %d, peak %d", now, peak)
	}
}
