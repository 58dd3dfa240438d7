// Package limit decides whether an attempt may start now.
//
// A concurrency limit ([Bulkhead], [AIMD]) caps the attempts in flight to
// one dependency; a rate limit ([Rate]) caps the attempts started per
// second. Either is checked before a connection is taken and, with no
// free slot, answers at once with [ErrLimited] — a controlled answer instead
// of a queue without end. Use one limiter per dependency that must fail
// independently (a bulkhead). Remember that a cap of 10 on 20 replicas is 200
// in flight fleet-wide.
package limit

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"
)

// ErrLimited is returned when no slot is free.
var ErrLimited = errors.New("limit: no free slot")

// ErrInvalid is wrapped by configuration errors; the message names the field.
var ErrInvalid = errors.New("limit: invalid configuration")

// Limiter admits attempts. TryAcquire never blocks: it takes a slot and
// returns true, or returns false at once. Every successful TryAcquire must be
// followed by exactly one Release; ok reports whether the attempt completed
// without a sign of overload (adaptive limiters shrink on !ok).
type Limiter interface {
	TryAcquire() bool
	Release(ok bool)
}

// Bulkhead is a fixed concurrency limit, lock-free and exact: it never admits
// more than its size and never refuses while a slot is free.
type Bulkhead struct {
	inflight atomic.Int64
	_        [56]byte
	size     int64
}

// NewBulkhead returns a bulkhead of size slots; size must be >= 1.
func NewBulkhead(size int) (*Bulkhead, error) {
	if size < 1 {
		return nil, fmt.Errorf("%w: Bulkhead size must be >= 1, got %d", ErrInvalid, size)
	}
	return &Bulkhead{size: int64(size)}, nil
}

// TryAcquire takes a slot if one is free.
func (b *Bulkhead) TryAcquire() bool {
	for {
		n := b.inflight.Load()
		if n >= b.size {
			return false
		}
		if b.inflight.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// Release frees a slot.
func (b *Bulkhead) Release(bool) {
	if b.inflight.Add(-1) < 0 {
		panic("limit: Bulkhead.Release without TryAcquire")
	}
}

// InFlight returns the slots in use.
func (b *Bulkhead) InFlight() int { return int(b.inflight.Load()) }

// Size returns the number of slots.
func (b *Bulkhead) Size() int { return int(b.size) }

// Do runs fn in a slot, or returns ErrLimited at once when none is free.
// The slot is released with ok = (fn's error == nil); if fn panics, it is
// released with ok = false before the panic goes on.
func Do(l Limiter, fn func() error) (err error) {
	if !l.TryAcquire() {
		return ErrLimited
	}
	ok := false
	defer func() { l.Release(ok) }()
	err = fn()
	ok = err == nil
	return err
}

// AIMD is an adaptive concurrency limit: the limit grows by one slot per
// limit's worth of successful releases (additive increase) and is multiplied
// by Backoff on every release that signals overload (multiplicative
// decrease), staying within [Min, Max]. The limit is kept in thousandths of
// a slot in one atomic word.
type AIMD struct {
	inflight atomic.Int64
	_        [56]byte
	limit    atomic.Int64 // milli-slots
	min, max int64        // milli-slots
	backoff  float64
}

// NewAIMD returns an adaptive limit starting at initial slots, within
// [minSlots, maxSlots], shrinking by factor backoff (in (0, 1)) on overload.
func NewAIMD(initial, minSlots, maxSlots int, backoff float64) (*AIMD, error) {
	switch {
	case minSlots < 1:
		return nil, fmt.Errorf("%w: AIMD min must be >= 1, got %d", ErrInvalid, minSlots)
	case maxSlots < minSlots:
		return nil, fmt.Errorf("%w: AIMD max (%d) must be >= min (%d)", ErrInvalid, maxSlots, minSlots)
	case maxSlots > math.MaxInt64/1000:
		return nil, fmt.Errorf("%w: AIMD max must be <= %d, got %d", ErrInvalid, int64(math.MaxInt64/1000), maxSlots)
	case initial < minSlots || initial > maxSlots:
		return nil, fmt.Errorf("%w: AIMD initial must be in [%d, %d], got %d", ErrInvalid, minSlots, maxSlots, initial)
	case math.IsNaN(backoff) || !(backoff > 0 && backoff < 1):
		return nil, fmt.Errorf("%w: AIMD backoff must be in (0, 1), got %v", ErrInvalid, backoff)
	}
	a := &AIMD{min: int64(minSlots) * 1000, max: int64(maxSlots) * 1000, backoff: backoff}
	a.limit.Store(int64(initial) * 1000)
	return a, nil
}

// Limit returns the current limit in whole slots.
func (a *AIMD) Limit() int { return int(a.limit.Load() / 1000) }

// InFlight returns the slots in use.
func (a *AIMD) InFlight() int { return int(a.inflight.Load()) }

// TryAcquire takes a slot if fewer than Limit are in use.
func (a *AIMD) TryAcquire() bool {
	for {
		n := a.inflight.Load()
		if n >= a.limit.Load()/1000 {
			return false
		}
		if a.inflight.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// Release frees a slot and adapts the limit.
func (a *AIMD) Release(ok bool) {
	if a.inflight.Add(-1) < 0 {
		panic("limit: AIMD.Release without TryAcquire")
	}
	for {
		l := a.limit.Load()
		var nl int64
		if ok {
			nl = min(a.max, l+max(1, 1000*1000/l))
		} else {
			nl = max(a.min, int64(float64(l)*a.backoff))
		}
		if nl == l || a.limit.CompareAndSwap(l, nl) {
			return
		}
	}
}

// Join returns a limiter that needs a slot of every one of ls, taken in
// order: a refusal gives back the slots already taken, so the limiters
// before it hold nothing. Release releases every one. Put the limiter
// whose slot is cheapest to give back first (a bulkhead before a rate,
// whose starts are spent). nil entries are skipped; with one limiter left
// Join returns it.
func Join(ls ...Limiter) Limiter {
	var j joined
	for _, l := range ls {
		if l != nil {
			j = append(j, l)
		}
	}
	switch len(j) {
	case 0:
		return nil
	case 1:
		return j[0]
	}
	return j
}

type joined []Limiter

func (j joined) TryAcquire() bool {
	for i, l := range j {
		if !l.TryAcquire() {
			for _, taken := range j[:i] {
				taken.Release(true) // nothing was started
			}
			return false
		}
	}
	return true
}

func (j joined) Release(ok bool) {
	for _, l := range j {
		l.Release(ok)
	}
}
