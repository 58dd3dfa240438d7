package budget

import (
	"fmt"
	"math"
	"sync"
	"time"
)

// Ratio is the SRE book's per-client retry budget: over a sliding window,
// retries may be at most a fixed fraction of original requests (10% in the
// book). Originals are counted lock-free; the check-and-count of a retry is
// serialized so the ratio is never exceeded, even by racing retries.
type Ratio struct {
	ratio   float64
	reqs    *window
	mu      sync.Mutex
	retries *window
}

// NewRatio returns a budget that allows retries up to ratio × originals seen
// in the last span (10 slots). ratio must be in (0, 1], span > 0.
func NewRatio(ratio float64, span time.Duration) (*Ratio, error) {
	if err := checkFraction("Ratio.ratio", ratio, false); err != nil {
		return nil, err
	}
	if span <= 0 {
		return nil, fmt.Errorf("%w: Ratio.span must be > 0, got %v", ErrInvalid, span)
	}
	return &Ratio{ratio: ratio, reqs: newWindow(span, 10), retries: newWindow(span, 10)}, nil
}

// Request counts an original request; it is always allowed.
func (r *Ratio) Request(now time.Time) bool {
	r.reqs.add(now, 1)
	return true
}

// Retry allows a retry while retries+1 <= ratio × originals in the window.
func (r *Ratio) Retry(now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if float64(r.retries.sum(now)+1) > r.ratio*float64(r.reqs.sum(now)) {
		return false
	}
	r.retries.add(now, 1)
	return true
}

// Result is a no-op.
func (r *Ratio) Result(time.Time, bool) {}

// checkFraction validates a value in (0, 1] (or [0, 1] when zeroOK).
func checkFraction(name string, v float64, zeroOK bool) error {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return fmt.Errorf("%w: %s must be a finite number, got %v", ErrInvalid, name, v)
	case v < 0 || v > 1 || (v == 0 && !zeroOK):
		if zeroOK {
			return fmt.Errorf("%w: %s must be in [0, 1], got %v", ErrInvalid, name, v)
		}
		return fmt.Errorf("%w: %s must be in (0, 1], got %v", ErrInvalid, name, v)
	}
	return nil
}
