package limit

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// MaxRate bounds NewRate's perSecond: one start per nanosecond.
const MaxRate = 1e9

// Rate is a rate limit: at most perSecond starts per second on average, and
// at most burst at once after a quiet spell. It is a [Limiter] whose
// TryAcquire takes a start and whose Release does nothing (a start, once
// made, is spent), so it composes with a concurrency limit on the same
// policy or stands in for one, for example as a queue's per-queue limit.
//
// Rate is the generic cell rate algorithm (GCRA, ITU-T I.371), the
// token bucket written as one number: the theoretical time at which the
// bucket is full again. That number is one atomic word updated with a
// compare-and-swap, so Rate is lock-free, exact under any concurrency (it
// never admits more than burst + perSecond·t starts in any span t) and
// allocates nothing. It starts full: burst starts are admitted at once.
type Rate struct {
	tat atomic.Int64 // theoretical arrival time, ns since origin
	_   [56]byte     // keep the hot word on its own cache line

	origin   atomic.Pointer[time.Time]
	interval int64 // ns between starts at the sustained rate
	limit    int64 // burst × interval: how far tat may run ahead of now
	clock    func() time.Time
}

// NewRate returns a limit of perSecond starts per second (finite, > 0 and
// <= MaxRate) with bursts of up to burst starts (>= 1). clock supplies the
// time for TryAcquire and Wait; nil means the real clock, read as time
// since NewRate (monotonic). With a clock, times are measured from the
// first one the limit sees, with Time.Sub, so a simulator's virtual times
// work; TryAcquireAt and WaitAt take a time directly (for the real clock,
// a time.Now value).
func NewRate(perSecond float64, burst int, clock func() time.Time) (*Rate, error) {
	switch {
	case math.IsNaN(perSecond) || math.IsInf(perSecond, 0):
		return nil, fmt.Errorf("%w: Rate perSecond must be a finite number, got %v", ErrInvalid, perSecond)
	case perSecond <= 0 || perSecond > MaxRate:
		return nil, fmt.Errorf("%w: Rate perSecond must be in (0, %g], got %v", ErrInvalid, float64(MaxRate), perSecond)
	case burst < 1:
		return nil, fmt.Errorf("%w: Rate burst must be >= 1, got %d", ErrInvalid, burst)
	}
	interval := math.Round(float64(time.Second) / perSecond)
	// tat stays within limit of now; keep both far from overflow.
	if interval*float64(burst) > 1<<62 {
		return nil, fmt.Errorf("%w: Rate burst / perSecond must be at most %v, got %d / %v", ErrInvalid, time.Duration(1<<62), burst, perSecond)
	}
	iv := max(int64(interval), 1)
	r := &Rate{interval: iv, limit: iv * int64(burst), clock: clock}
	if clock == nil {
		// The real clock: time from now on, so that TryAcquire reads only
		// the monotonic clock (time.Since), half the cost of time.Now.
		start := time.Now()
		r.origin.Store(&start)
	}
	return r, nil
}

// now returns the clock's time in ns since the origin.
func (r *Rate) now() int64 {
	if r.clock == nil {
		return int64(time.Since(*r.origin.Load()))
	}
	return r.since(r.clock())
}

// since returns now in ns since the limit's origin (the first time seen).
func (r *Rate) since(now time.Time) int64 {
	o := r.origin.Load()
	if o == nil {
		t := now
		if !r.origin.CompareAndSwap(nil, &t) {
			o = r.origin.Load()
		} else {
			o = &t
		}
	}
	return int64(now.Sub(*o))
}

// TryAcquire takes a start at the clock's time if one is due.
func (r *Rate) TryAcquire() bool { return r.acquire(r.now()) }

// TryAcquireAt takes a start at now if one is due: it never blocks.
func (r *Rate) TryAcquireAt(now time.Time) bool { return r.acquire(r.since(now)) }

// acquire takes a start at n ns since the origin if one is due.
func (r *Rate) acquire(n int64) bool {
	for {
		tat := r.tat.Load()
		next := max(tat, n) + r.interval
		if next-n > r.limit {
			return false
		}
		if r.tat.CompareAndSwap(tat, next) {
			return true
		}
	}
}

// Release does nothing: a start is spent when it is made.
func (r *Rate) Release(bool) {}

// Wait returns how long from the clock's time until TryAcquire would
// admit a start (0: now), for a driver that schedules instead of refusing.
func (r *Rate) Wait() time.Duration { return r.wait(r.now()) }

// WaitAt is Wait at now.
func (r *Rate) WaitAt(now time.Time) time.Duration { return r.wait(r.since(now)) }

func (r *Rate) wait(n int64) time.Duration {
	return time.Duration(max(0, r.tat.Load()+r.interval-r.limit-n))
}

// Interval returns the time between starts at the sustained rate.
func (r *Rate) Interval() time.Duration { return time.Duration(r.interval) }

// Burst returns the largest number of starts admitted at once.
func (r *Rate) Burst() int { return int(r.limit / r.interval) }
