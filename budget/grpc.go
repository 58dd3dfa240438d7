package budget

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// GRPC is gRPC's retry throttling (proposal A6). A token count starts at
// maxTokens; every failed attempt removes 1, every successful one adds
// tokenRatio, and retries are allowed only while tokens > maxTokens/2.
// Tokens are kept in thousandths, as gRPC specifies three decimal places.
type GRPC struct {
	delta atomic.Int64 // milli-tokens minus max (always <= 0)
	_     [56]byte
	max   int64 // milli-tokens
	ratio int64 // milli-tokens per success
}

// NewGRPC returns the A6 throttle. maxTokens must be in (0, 1000] and
// tokenRatio > 0 and finite, as in gRPC's service config.
func NewGRPC(maxTokens, tokenRatio float64) (*GRPC, error) {
	if math.IsNaN(maxTokens) || math.IsInf(maxTokens, 0) || maxTokens <= 0 || maxTokens > 1000 {
		return nil, fmt.Errorf("%w: GRPC.maxTokens must be in (0, 1000], got %v", ErrInvalid, maxTokens)
	}
	if math.IsNaN(tokenRatio) || math.IsInf(tokenRatio, 0) || tokenRatio <= 0 {
		return nil, fmt.Errorf("%w: GRPC.tokenRatio must be finite and > 0, got %v", ErrInvalid, tokenRatio)
	}
	return &GRPC{max: int64(math.Round(maxTokens * 1000)), ratio: max(1, int64(math.Round(tokenRatio*1000)))}, nil
}

// Tokens returns the current token count.
func (g *GRPC) Tokens() float64 { return float64(g.max+g.delta.Load()) / 1000 }

// Request always allows an original attempt.
func (g *GRPC) Request(time.Time) bool { return true }

// Retry allows a retry while tokens > maxTokens/2. It does not spend: the
// failure that caused the retry already did.
func (g *GRPC) Retry(time.Time) bool { return 2*(g.max+g.delta.Load()) > g.max }

// Result adds tokenRatio on success and removes one token on failure,
// within [0, maxTokens].
func (g *GRPC) Result(_ time.Time, ok bool) {
	for {
		d := g.delta.Load()
		var nd int64
		if ok {
			if d >= 0 {
				return
			}
			nd = min(0, d+g.ratio)
		} else {
			if d <= -g.max {
				return
			}
			nd = max(-g.max, d-1000)
		}
		if g.delta.CompareAndSwap(d, nd) {
			return
		}
	}
}
