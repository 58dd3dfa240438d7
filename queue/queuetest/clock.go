package queuetest

import "sync/atomic"

// Start is the fake clock's default start: 2026-01-01T00:00:00Z in Unix ms.
const Start int64 = 1767225600000

// Clock is a fake clock for Config.Now: Unix milliseconds that move only
// when told to. Safe for concurrent use.
type Clock struct{ ms atomic.Int64 }

// NewClock returns a Clock reading ms.
func NewClock(ms int64) *Clock {
	c := &Clock{}
	c.ms.Store(ms)
	return c
}

// Now returns the current reading.
func (c *Clock) Now() int64 { return c.ms.Load() }

// Set sets the reading (it may go backwards).
func (c *Clock) Set(ms int64) { c.ms.Store(ms) }

// Advance moves the reading by d milliseconds and returns the new one.
func (c *Clock) Advance(d int64) int64 { return c.ms.Add(d) }

// FixedRatio is a rand.Source whose every draw makes backoff.Float64 return
// the ratio r (0 <= r < 1; r = 1 draws the largest value below 1), so the
// retry ratio of a queue is deterministic.
type FixedRatio float64

// Uint64 implements rand.Source.
func (r FixedRatio) Uint64() uint64 {
	if r >= 1 {
		return ^uint64(0)
	}
	if r <= 0 {
		return 0
	}
	return uint64(float64(r)*(1<<53)) << 11
}
