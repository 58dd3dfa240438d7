package wire

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// DefaultMaxBudget is the largest attempt budget a client's max-attempts
// value can give the work on a server that sets no bound of its own: a
// larger budget counts as DefaultMaxBudget.
const DefaultMaxBudget = 10

// MaxBudget returns the server's bound on a client's attempt budget: max,
// or DefaultMaxBudget when max is 0 or negative.
func MaxBudget(max int) int {
	if max <= 0 {
		return DefaultMaxBudget
	}
	return min(max, MaxAttempt)
}

// ParseMaxAttempts reads an attempt budget (the ledger's max attempts): a
// decimal integer of at least 1, clamped to MaxBudget(max) — a huge value,
// even one beyond any integer type, is the server's bound, never more. ok
// is false when v is not a decimal integer, and for 0.
func ParseMaxAttempts(v string, max int) (int, bool) {
	n, over, ok := digits(v)
	if !ok || n == 0 {
		return 0, false
	}
	max = MaxBudget(max)
	if over || n > uint64(max) {
		return max, true
	}
	return int(n), true
}

// Repeats counts the re-sends of logical requests that no attempt number
// marks: a request whose ID was seen before, arriving without an attempt
// number or with one no higher than the highest seen for that ID. IDs
// are remembered as 64-bit hashes in a bounded table, oldest first out.
// The zero value is ready to use and safe for concurrent use.
type Repeats struct {
	mu      sync.Mutex
	seed    maphash.Seed
	last    map[uint64]int // hash → highest attempt seen (0: unmarked only)
	order   []uint64       // hashes in the order first seen (a ring)
	next    int            // the ring's oldest entry once it is full
	repeats atomic.Int64
	evicted atomic.Int64
}

// DefaultMaxIDs is the size of a Repeats table when the server sets none.
const DefaultMaxIDs = 16384

// Seen records a request for id with attempt (0: unmarked) and counts it
// as a repeat when the ID was seen with that attempt number or a higher
// one, or the request is unmarked. size bounds the table (0:
// DefaultMaxIDs).
func (t *Repeats) Seen(id string, attempt, size int) {
	if size <= 0 {
		size = DefaultMaxIDs
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.last == nil {
		t.seed = maphash.MakeSeed()
		t.last = make(map[uint64]int)
	}
	h := maphash.String(t.seed, id)
	if prev, ok := t.last[h]; ok {
		if attempt == 0 || attempt <= prev {
			t.repeats.Add(1)
		}
		if attempt > prev {
			t.last[h] = attempt
		}
		return
	}
	if len(t.order) < size {
		t.order = append(t.order, h)
	} else {
		delete(t.last, t.order[t.next])
		t.evicted.Add(1)
		t.order[t.next] = h
		t.next = (t.next + 1) % len(t.order)
	}
	t.last[h] = attempt
}

// Repeats is the number of repeats counted.
func (t *Repeats) Repeats() int64 { return t.repeats.Load() }

// Evicted is the number of IDs dropped from the full table; a repeat of
// one of them counts as new.
func (t *Repeats) Evicted() int64 { return t.evicted.Load() }
