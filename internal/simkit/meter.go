package simkit

import (
	"time"

	"github.com/staggerhq/stagger/retry"
)

// DefaultWindow is the width of the window in which the receiving side's
// peak is counted (200 ms by default, as the lab).
const DefaultWindow = 200 * time.Millisecond

// Meter records one run from both sides: what the server received (calls,
// the peak inside any sliding window, load per bucket) and what the callers
// got (first tries, successes, give-ups by reason, goodput per bucket,
// completion time), plus the in-flight count over time for Little's law.
// Models call it from their event handlers; it allocates only when a
// per-bucket series or the window's ring grows.
type Meter struct {
	window, bucket time.Duration

	calls     int64
	originals int64
	successes int64
	gaveUp    [retry.CircuitOpen + 1]int64
	peak      int
	peakAt    time.Duration
	lastDone  time.Duration

	ring []time.Duration // arrival times inside the current window
	head int

	load    []int64 // calls per bucket
	goodput []int64 // successes per bucket

	inflight  int64
	maxFlight int64
	from, to  time.Duration // Little's-law span; to == 0: open-ended
	lastT     time.Duration
	area      float64 // ∫ in-flight dt over the span, request·seconds
	entered   int64   // requests that entered in the span
	left      int64   // of those, the ones that left
	sojourn   float64 // their total time in system, seconds
}

// NewMeter returns a meter counting the peak over window and series in
// buckets of bucket (both > 0).
func NewMeter(window, bucket time.Duration) *Meter {
	return &Meter{window: window, bucket: bucket}
}

// Call counts an attempt arriving at the server at t. Calls must be
// counted in time order (they are, when counted from engine events).
func (m *Meter) Call(t time.Duration) {
	m.calls++
	for m.head < len(m.ring) && m.ring[m.head] <= t-m.window {
		m.head++
	}
	if m.head > 4096 && m.head*2 > len(m.ring) {
		n := copy(m.ring, m.ring[m.head:])
		m.ring, m.head = m.ring[:n], 0
	}
	m.ring = append(m.ring, t)
	if n := len(m.ring) - m.head; n > m.peak {
		m.peak, m.peakAt = n, t
	}
	bump(&m.load, int(t/m.bucket))
}

// Original counts a logical request's first try.
func (m *Meter) Original() { m.originals++ }

// Success counts a logical request that succeeded at t.
func (m *Meter) Success(t time.Duration) {
	m.successes++
	m.lastDone = max(m.lastDone, t)
	bump(&m.goodput, int(t/m.bucket))
}

// GiveUp counts a logical request that stopped without success at t.
func (m *Meter) GiveUp(t time.Duration, r retry.Reason) {
	if int(r) < len(m.gaveUp) {
		m.gaveUp[r]++
	}
	m.lastDone = max(m.lastDone, t)
}

// Measure restricts the Little's-law figures to [from, to): the
// time-average in-flight count is taken over that span, and λ and W over
// the requests that entered inside it. Without Measure the span is the
// whole run. Call it before the first Enter.
func (m *Meter) Measure(from, to time.Duration) { m.from, m.to = from, to }

// Enter counts a request entering the system at t (for Little's law).
func (m *Meter) Enter(t time.Duration) {
	m.advance(t)
	m.inflight++
	m.maxFlight = max(m.maxFlight, m.inflight)
	if m.inSpan(t) {
		m.entered++
	}
}

// Leave counts a request that entered at start leaving the system at t.
func (m *Meter) Leave(t, start time.Duration) {
	m.advance(t)
	m.inflight--
	if m.inSpan(start) {
		m.sojourn += (t - start).Seconds()
		m.left++
	}
}

func (m *Meter) inSpan(t time.Duration) bool {
	return t >= m.from && (m.to == 0 || t < m.to)
}

// advance integrates the in-flight count up to t, clipped to the span.
func (m *Meter) advance(t time.Duration) {
	if t <= m.lastT {
		return
	}
	lo, hi := max(m.lastT, m.from), t
	if m.to != 0 {
		hi = min(hi, m.to)
	}
	if hi > lo {
		m.area += float64(m.inflight) * (hi - lo).Seconds()
	}
	m.lastT = t
}

func bump(s *[]int64, i int) {
	for len(*s) <= i {
		*s = append(*s, 0)
	}
	(*s)[i]++
}

// Calls returns the attempts the server received.
func (m *Meter) Calls() int64 { return m.calls }

// Originals returns the logical requests started (first tries).
func (m *Meter) Originals() int64 { return m.originals }

// Successes returns the logical requests that succeeded.
func (m *Meter) Successes() int64 { return m.successes }

// GaveUp returns the logical requests that stopped for reason r.
func (m *Meter) GaveUp(r retry.Reason) int64 {
	if int(r) < len(m.gaveUp) {
		return m.gaveUp[r]
	}
	return 0
}

// Failed returns the logical requests that stopped without success, for
// any reason.
func (m *Meter) Failed() int64 {
	var n int64
	for _, g := range m.gaveUp {
		n += g
	}
	return n
}

// Amplification returns calls per first try (0 without first tries).
func (m *Meter) Amplification() float64 {
	if m.originals == 0 {
		return 0
	}
	return float64(m.calls) / float64(m.originals)
}

// Peak returns the most calls inside one window and the arrival time of the
// last call of that window.
func (m *Meter) Peak() (int, time.Duration) { return m.peak, m.peakAt }

// Completion returns the time the last logical request finished.
func (m *Meter) Completion() time.Duration { return m.lastDone }

// Load returns calls per bucket (index i covers [i·bucket, (i+1)·bucket)).
func (m *Meter) Load() []int64 { return m.load }

// Goodput returns successes per bucket.
func (m *Meter) Goodput() []int64 { return m.goodput }

// InFlight returns the current in-flight count and its maximum so far.
func (m *Meter) InFlight() (now, peak int64) { return m.inflight, m.maxFlight }

// Little returns Little's-law figures over the measured span ending at
// t (or at the span's end): L, the time-average number in the system; λ,
// the requests that entered per second; W, the mean time in system of the
// requests that entered in the span and have left. In steady state, once
// those requests have all left, L ≈ λ·W.
func (m *Meter) Little(t time.Duration) (l, lambda, w float64) {
	m.advance(t)
	end := t
	if m.to != 0 {
		end = min(end, m.to)
	}
	span := (end - m.from).Seconds()
	if span <= 0 {
		return 0, 0, 0
	}
	l, lambda = m.area/span, float64(m.entered)/span
	if m.left > 0 {
		w = m.sojourn / float64(m.left)
	}
	return l, lambda, w
}

// Unfinished returns the requests that entered in the span and have not
// left.
func (m *Meter) Unfinished() int64 { return m.entered - m.left }
