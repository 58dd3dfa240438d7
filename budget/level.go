package budget

import "time"

// Leveler is implemented by budgets that can say how much retrying they
// allow right now, for a gauge: Level returns the fraction of the budget's
// capacity that is left, in [0, 1] (1: full, 0: empty). Each
// implementation documents the level below which it refuses. Level reads
// a few atomic words: it takes no lock, allocates nothing, changes nothing
// and is safe to call from any goroutine (a metrics callback, a
// dashboard) while the budget is in use.
type Leveler interface {
	Level(now time.Time) float64
}

var (
	_ Leveler = (*TokenBucket)(nil)
	_ Leveler = (*GRPC)(nil)
	_ Leveler = (*Ratio)(nil)
	_ Leveler = (*Adaptive)(nil)
	_ Circuit = (*Breaker)(nil)
	_ Circuit = (*CircuitBreaker)(nil)
)

// Level returns Credits / Max. Retries are refused below MinToRetry / Max
// (PerRetry / Max by default: 10/200 = 0.05).
func (b *TokenBucket) Level(time.Time) float64 {
	return float64(b.Credits()) / float64(b.max())
}

// Level returns Tokens / maxTokens. Retries are refused at or below 0.5,
// as gRPC A6 specifies.
func (g *GRPC) Level(time.Time) float64 {
	return float64(g.max+g.delta.Load()) / float64(g.max)
}

// Level returns the share of the window's retry allowance (ratio ×
// originals in the window ending at now) not yet used: 1 − retries /
// allowance, clamped to [0, 1]; 0 with no original in the window. A retry
// is refused when it would take the level below 0.
func (r *Ratio) Level(now time.Time) float64 {
	allowance := r.ratio * float64(r.reqs.sum(now))
	if allowance <= 0 {
		return 0
	}
	return min(1, max(0, 1-float64(r.retries.sum(now))/allowance))
}

// Level returns 1 − RejectProbability(now): the chance that an attempt is
// admitted (1 while the dependency accepts what it is sent).
func (a *Adaptive) Level(now time.Time) float64 { return 1 - a.RejectProbability(now) }
