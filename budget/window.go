package budget

import (
	"sync/atomic"
	"time"
)

// window counts events over a sliding time window split into slots. Each
// slot is one atomic word holding the slot's epoch (upper 32 bits) and its
// count (lower 32 bits), so adding and reading are lock-free and a slot that
// fell out of the window is reset by the first writer that reaches it.
//
// Time is measured from the first instant the window sees (its origin), with
// now.Sub, so callers that pass time.Now values get monotonic arithmetic and
// a simulator can pass virtual times.
type window struct {
	origin origin
	width  time.Duration
	slots  []atomic.Uint64
}

func newWindow(span time.Duration, slots int) *window {
	if slots < 1 {
		slots = 1
	}
	w := &window{width: max(span/time.Duration(slots), 1), slots: make([]atomic.Uint64, slots)}
	return w
}

// epoch returns the slot number for now.
func (w *window) epoch(now time.Time) uint32 {
	d := w.origin.since(now)
	if d < 0 {
		return 0
	}
	return uint32(int64(d / w.width))
}

// add counts k events at now.
func (w *window) add(now time.Time, k uint32) {
	ep := w.epoch(now)
	s := &w.slots[int(ep)%len(w.slots)]
	for {
		v := s.Load()
		if e := uint32(v >> 32); e == ep || int32(e-ep) > 0 {
			// The same slot, or a newer one written by a caller whose
			// clock ran slightly ahead: count it there. An add, not a
			// compare-and-swap, so racing writers never retry; if the
			// slot moved on meanwhile, the event counts in the newer one.
			s.Add(uint64(k))
			return
		}
		if s.CompareAndSwap(v, uint64(ep)<<32|uint64(k)) {
			return
		}
	}
}

// sum returns the events counted in the window ending at now.
func (w *window) sum(now time.Time) uint64 {
	ep := w.epoch(now)
	n := uint32(len(w.slots))
	var total uint64
	for i := range w.slots {
		v := w.slots[i].Load()
		e := uint32(v >> 32)
		if ep-e < n || int32(e-ep) > 0 && e-ep < n {
			total += v & 0xffffffff
		}
	}
	return total
}

// origin is the first instant a shared clock reading was seen: times are
// measured from it with now.Sub (monotonic for time.Now values).
type origin struct{ p atomic.Pointer[time.Time] }

// since returns now minus the origin, setting the origin to now first if
// no time was seen yet.
func (o *origin) since(now time.Time) time.Duration {
	t := o.p.Load()
	if t == nil {
		n := now
		if !o.p.CompareAndSwap(nil, &n) {
			t = o.p.Load()
		} else {
			t = &n
		}
	}
	return now.Sub(*t)
}
