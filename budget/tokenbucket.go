package budget

import (
	"fmt"
	"sync/atomic"
	"time"
)

// The default credits: +1 per original request, a retry needs and spends
// 10, the reserve holds at most 200. Ten originals earn one retry: a 10%
// retry budget, as in Marc Brooker 2022 ("Fixing retries with token buckets
// and circuit breakers") and the SRE book's per-client retry budget.
const (
	DefaultMax        = 200 // TokenBucket.Max: the largest reserve, in credits
	DefaultPerRequest = 1   // TokenBucket.PerRequest: credits earned per original request
	DefaultPerRetry   = 10  // TokenBucket.PerRetry: credits a retry needs and spends
)

// TokenBucket is a retry budget in integer credits. Every original request
// earns PerRequest credits up to Max; a retry is allowed when at least
// MinToRetry credits are held and then spends PerRetry.
//
// The zero value is the default budget (Max 200, PerRequest 1, PerRetry 10,
// MinToRetry 10), starting full: a dependency that has been healthy has a
// full reserve, so the first failures may be retried (20 retries before the
// bucket must be earned back). Set Empty to start with no credits, as a
// budget that must be earned from the first request. Fractional budgets
// scale to integers: the
// "+0.1 per call, cap 5, a retry needs more than 1 then spends 1" bucket is
// {Max: 50, PerRequest: 1, PerRetry: 10, MinToRetry: 11}.
//
// Configuration fields must not change after first use. Credits are conserved
// exactly under any concurrency: each successful Retry removes PerRetry and
// each Request adds min(PerRequest, room) with a single atomic update.
type TokenBucket struct {
	// delta is the reserve minus the initial one, so the zero value holds
	// the initial reserve.
	delta atomic.Int64
	_     [56]byte // keep the hot counter on its own cache line

	// Max is the largest reserve; 0 means DefaultMax.
	Max int64
	// PerRequest is earned by every original request; 0 means DefaultPerRequest.
	PerRequest int64
	// PerRetry is spent by every retry; 0 means DefaultPerRetry.
	PerRetry int64
	// MinToRetry is the smallest reserve that allows a retry; 0 means PerRetry.
	MinToRetry int64
	// Initial is the reserve before the first request; 0 means Max (full),
	// unless Empty is set.
	Initial int64
	// Empty starts the reserve at 0 credits (Initial must then be 0).
	Empty bool
}

// NewTokenBucket returns a validated, full bucket: each original request
// earns perRequest credits up to max, a retry needs and spends perRetry.
// Set MinToRetry or Initial on the result before first use for the variants.
func NewTokenBucket(max, perRequest, perRetry int64) (*TokenBucket, error) {
	if max == 0 || perRequest == 0 || perRetry == 0 {
		return nil, fmt.Errorf("%w: NewTokenBucket needs max, perRequest and perRetry > 0 (got %d, %d, %d); use &TokenBucket{} for the defaults", ErrInvalid, max, perRequest, perRetry)
	}
	b := &TokenBucket{Max: max, PerRequest: perRequest, PerRetry: perRetry}
	if err := b.Validate(); err != nil {
		return nil, err
	}
	return b, nil
}

// Validate rejects negative fields, MinToRetry below PerRetry (which would
// drive the reserve negative) and an Initial reserve above Max.
func (b *TokenBucket) Validate() error {
	for _, f := range []struct {
		name string
		v    int64
	}{{"Max", b.Max}, {"PerRequest", b.PerRequest}, {"PerRetry", b.PerRetry}, {"MinToRetry", b.MinToRetry}, {"Initial", b.Initial}} {
		if f.v < 0 {
			return fmt.Errorf("%w: TokenBucket.%s must be >= 0, got %d", ErrInvalid, f.name, f.v)
		}
	}
	if b.MinToRetry != 0 && b.MinToRetry < b.cost() {
		return fmt.Errorf("%w: TokenBucket.MinToRetry (%d) must be >= PerRetry (%d)", ErrInvalid, b.MinToRetry, b.cost())
	}
	if b.Empty && b.Initial != 0 {
		return fmt.Errorf("%w: TokenBucket.Initial (%d) must be 0 when Empty is set", ErrInvalid, b.Initial)
	}
	if b.Initial > b.max() {
		return fmt.Errorf("%w: TokenBucket.Initial (%d) must be <= Max (%d)", ErrInvalid, b.Initial, b.max())
	}
	if b.cost() > b.max() {
		return fmt.Errorf("%w: TokenBucket.PerRetry (%d) must be <= Max (%d) or no retry is ever possible", ErrInvalid, b.cost(), b.max())
	}
	return nil
}

func (b *TokenBucket) max() int64 {
	if b.Max == 0 {
		return DefaultMax
	}
	return b.Max
}

func (b *TokenBucket) earn() int64 {
	if b.PerRequest == 0 {
		return DefaultPerRequest
	}
	return b.PerRequest
}

func (b *TokenBucket) cost() int64 {
	if b.PerRetry == 0 {
		return DefaultPerRetry
	}
	return b.PerRetry
}

func (b *TokenBucket) need() int64 {
	if b.MinToRetry == 0 {
		return b.cost()
	}
	return b.MinToRetry
}

// Credits returns the current reserve.
func (b *TokenBucket) Credits() int64 { return b.initial() + b.delta.Load() }

// initial is the reserve before the first request.
func (b *TokenBucket) initial() int64 {
	switch {
	case b.Empty:
		return 0
	case b.Initial == 0:
		return b.max()
	}
	return b.Initial
}

// Request earns credits for an original request and always allows it. When
// the reserve is full it only reads the counter, so a healthy service's
// requests never contend on a shared cache line.
func (b *TokenBucket) Request(time.Time) bool {
	b.Earn()
	return true
}

// Earn adds PerRequest credits, up to Max.
func (b *TokenBucket) Earn() {
	limit, earn := b.max()-b.initial(), b.earn()
	for {
		d := b.delta.Load()
		if d >= limit {
			return
		}
		if b.delta.CompareAndSwap(d, min(limit, d+earn)) {
			return
		}
	}
}

// Retry spends PerRetry credits if at least MinToRetry are held.
func (b *TokenBucket) Retry(time.Time) bool { return b.Spend() }

// Spend is Retry without a time argument.
func (b *TokenBucket) Spend() bool {
	need, cost := b.need()-b.initial(), b.cost()
	for {
		d := b.delta.Load()
		if d < need {
			return false
		}
		if b.delta.CompareAndSwap(d, d-cost) {
			return true
		}
	}
}

// Result is a no-op: this budget is earned by requests, not by outcomes.
func (b *TokenBucket) Result(time.Time, bool) {}
