package queue

import (
	"context"
	"fmt"
	"math"
)

// Limits bound one named queue across every worker process and host that
// serves it, enforced by the store inside each claim's transaction, so a
// fleet of workers cannot stampede the dependency the queue protects
// however many replicas it runs. Configure the same Limits on every
// Worker of the queue (Config.Limits). The zero value limits nothing.
type Limits struct {
	// MaxInFlight is the most jobs of the queue leased at once (a lease
	// that expired no longer counts); 0: no limit.
	MaxInFlight int
	// Rate is the most claims (attempt starts) per second, a token bucket
	// the store keeps per queue; 0: no limit.
	Rate float64
	// Burst is how many claims the bucket allows at once; 0 means
	// max(1, ⌈Rate⌉).
	Burst int
}

// LimitedClaimer is implemented by stores that enforce Limits: Claim, with
// the queue's jobs in flight and its start rate checked and updated in the
// same transaction as the claim. Every store of this repository does.
type LimitedClaimer interface {
	ClaimLimited(ctx context.Context, queue string, lim Limits, now, leaseUntil int64, limit int) ([]Job, error)
}

// Bounds of Limits' fields.
const (
	MaxRate  = 1e6     // Limits.Rate: a million claims per second
	MaxLimit = 1 << 20 // Limits.MaxInFlight and Limits.Burst
)

// IsZero reports whether l limits nothing.
func (l Limits) IsZero() bool { return l.MaxInFlight == 0 && l.Rate == 0 }

// Validate names the field that is out of range.
func (l Limits) Validate() error {
	switch {
	case l.MaxInFlight < 0 || l.MaxInFlight > MaxLimit:
		return fmt.Errorf("%w: Limits.MaxInFlight must be in [0, %d] (0: no limit), got %d", ErrInvalid, MaxLimit, l.MaxInFlight)
	case math.IsNaN(l.Rate) || math.IsInf(l.Rate, 0) || l.Rate < 0 || l.Rate > MaxRate:
		return fmt.Errorf("%w: Limits.Rate must be a number in [0, %g] claims per second (0: no limit), got %v", ErrInvalid, MaxRate, l.Rate)
	case l.Burst < 0 || l.Burst > MaxLimit:
		return fmt.Errorf("%w: Limits.Burst must be in [0, %d] (0: ⌈Rate⌉), got %d", ErrInvalid, MaxLimit, l.Burst)
	case l.Burst > 0 && l.Rate == 0:
		return fmt.Errorf("%w: Limits.Burst (%d) needs a Rate", ErrInvalid, l.Burst)
	}
	return nil
}

func (l Limits) burst() float64 {
	if l.Burst > 0 {
		return float64(l.Burst)
	}
	return max(1, math.Ceil(l.Rate))
}

// Bucket is a queue's claim-rate reserve as a store keeps it: Tokens
// claims available at At (Unix ms). A store with no row yet for the queue
// starts from FullBucket.
type Bucket struct {
	Tokens float64
	At     int64
}

// FullBucket is the reserve of a queue the store has no row for yet.
func (l Limits) FullBucket(now int64) Bucket { return Bucket{Tokens: l.burst(), At: now} }

// Allow is the arithmetic every store runs inside its claim transaction: a
// claim that wants want jobs at now, with inFlight jobs of the queue
// leased and the stored bucket b, may take n; after claiming claimed (≤ n)
// jobs the store writes back Spend(b, now, claimed).
func (l Limits) Allow(inFlight int, b Bucket, now int64, want int) (n int) {
	n = want
	if l.MaxInFlight > 0 {
		n = min(n, max(l.MaxInFlight-inFlight, 0))
	}
	if l.Rate > 0 {
		n = min(n, int(math.Floor(l.refill(b, now).Tokens+1e-9)))
	}
	return max(n, 0)
}

// Spend is b refilled to now, less claimed tokens.
func (l Limits) Spend(b Bucket, now int64, claimed int) Bucket {
	if l.Rate == 0 {
		return b
	}
	r := l.refill(b, now)
	r.Tokens = max(r.Tokens-float64(claimed), 0)
	return r
}

func (l Limits) refill(b Bucket, now int64) Bucket {
	if now <= b.At {
		return Bucket{Tokens: min(b.Tokens, l.burst()), At: b.At}
	}
	return Bucket{Tokens: min(l.burst(), b.Tokens+float64(now-b.At)*l.Rate/1000), At: now}
}
