package budget

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Adaptive is the SRE book's client-side adaptive throttling. Over a sliding
// window it counts requests (every attempt the application made, including
// the ones rejected here) and accepts (attempts the dependency served), and
// rejects a new attempt locally with probability
//
//	max(0, (requests − K·accepts) / (requests + 1))
//
// so a client whose dependency accepts nothing converges to sending almost
// nothing, while a healthy one (accepts ≈ requests) is never throttled. It
// throttles original requests and retries alike.
type Adaptive struct {
	k        float64
	src      rand.Source
	requests *window
	accepts  *window
}

// NewAdaptive returns adaptive throttling with multiplier k (the book uses 2)
// over span (the book uses 2 minutes, 12 slots here); src is the random
// source (nil: the runtime generator). k must be finite and >= 1.
func NewAdaptive(k float64, span time.Duration, src rand.Source) (*Adaptive, error) {
	if math.IsNaN(k) || math.IsInf(k, 0) || k < 1 {
		return nil, fmt.Errorf("%w: Adaptive.k must be finite and >= 1, got %v", ErrInvalid, k)
	}
	if span <= 0 {
		return nil, fmt.Errorf("%w: Adaptive.span must be > 0, got %v", ErrInvalid, span)
	}
	return &Adaptive{k: k, src: src, requests: newWindow(span, 12), accepts: newWindow(span, 12)}, nil
}

// RejectProbability returns the current local rejection probability.
func (a *Adaptive) RejectProbability(now time.Time) float64 {
	req := float64(a.requests.sum(now))
	acc := float64(a.accepts.sum(now))
	return max(0, (req-a.k*acc)/(req+1))
}

func (a *Adaptive) admit(now time.Time) bool {
	p := a.RejectProbability(now)
	a.requests.add(now, 1)
	if p <= 0 {
		return true
	}
	var u uint64
	if a.src == nil {
		u = rand.Uint64()
	} else {
		u = a.src.Uint64()
	}
	return float64(u>>11)/(1<<53) >= p
}

// Request counts the attempt and may reject it locally.
func (a *Adaptive) Request(now time.Time) bool { return a.admit(now) }

// Retry counts the attempt and may reject it locally.
func (a *Adaptive) Retry(now time.Time) bool { return a.admit(now) }

// Result counts an accepted attempt when ok.
func (a *Adaptive) Result(now time.Time, ok bool) {
	if ok {
		a.accepts.add(now, 1)
	}
}
