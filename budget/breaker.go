package budget

import (
	"fmt"
	"sync/atomic"
	"time"
)

// Breaker is a retry circuit breaker: retries stop while the failure rate of
// the dependency over a sliding window is at or above a threshold, because
// retrying a dependency that fails most calls only adds load. Original
// requests are never refused; the breaker closes again as soon as the window
// shows the failure rate dropping.
//
// Breaker is a [Circuit] (open or closed, never half-open), so a driver
// gives the retries it refuses their own reason (retry.CircuitOpen).
type Breaker struct {
	open      atomic.Bool // as of the last Retry
	threshold float64
	minCalls  uint64
	calls     *window
	failures  *window
}

// NewBreaker returns a breaker that opens when failures/calls >= threshold
// over span, once at least minCalls results were seen in it.
// threshold must be in (0, 1], minCalls >= 1, span > 0.
func NewBreaker(threshold float64, minCalls int, span time.Duration) (*Breaker, error) {
	if err := checkFraction("Breaker.threshold", threshold, false); err != nil {
		return nil, err
	}
	if minCalls < 1 {
		return nil, fmt.Errorf("%w: Breaker.minCalls must be >= 1, got %d", ErrInvalid, minCalls)
	}
	if span <= 0 {
		return nil, fmt.Errorf("%w: Breaker.span must be > 0, got %v", ErrInvalid, span)
	}
	return &Breaker{threshold: threshold, minCalls: uint64(minCalls), calls: newWindow(span, 10), failures: newWindow(span, 10)}, nil
}

// Open reports whether retries are currently refused.
func (b *Breaker) Open(now time.Time) bool {
	calls := b.calls.sum(now)
	if calls < b.minCalls {
		return false
	}
	return float64(b.failures.sum(now)) >= b.threshold*float64(calls)
}

// Request always allows an original request.
func (b *Breaker) Request(time.Time) bool { return true }

// Retry allows a retry while the breaker is closed.
func (b *Breaker) Retry(now time.Time) bool {
	open := b.Open(now)
	if b.open.Load() != open { // written only on a change: no shared-line traffic
		b.open.Store(open)
	}
	return !open
}

// State returns CircuitOpen when the last Retry was refused and
// CircuitClosed otherwise, without reading the window; Open(now) judges
// the window at now.
func (b *Breaker) State() CircuitState {
	if b.open.Load() {
		return CircuitOpen
	}
	return CircuitClosed
}

// Result records an outcome.
func (b *Breaker) Result(now time.Time, ok bool) {
	b.calls.add(now, 1)
	if !ok {
		b.failures.add(now, 1)
	}
}
