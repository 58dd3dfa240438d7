package queue

import (
	"context"
	"sync"
	"time"
)

// heart extends the leases of a Queue's running attempts: every Lease/3
// while any runs, one beat extends all of them with one Extend call per
// heartChunk leases (and per context the Workers were run with: each call
// carries its Worker's context values), instead of a timer and a
// transaction per attempt. So
// N handlers that run for minutes cost one transaction per Lease/3, not
// N, and a short handler costs a slice append and a swap-remove, not a
// timer (about 9 % of the Worker's own CPU in a PostgreSQL drain, where
// the runtime's timer locks were shared by every runner).
//
// Every running attempt's lease is extended at most Lease/3 after it
// started or after its previous extension — as with a timer per attempt —
// except while its handler's context has ended (see Config.Lease). An
// attempt that starts just before a beat is extended at once: an early
// extension moves its lease later, never earlier.
//
// The beat's timer is made once and reset, and it is not stopped when the
// last running handler returns: short handlers would otherwise set and
// stop a timer each (a drain of no-op jobs empties the running set
// between most jobs). A beat that finds nothing running arms no next one,
// so an idle queue wakes at most once after its last handler.
type heart struct {
	mu      sync.Mutex
	running []*attempt // attempt.beatIdx is its index
	// timer fires the next beat (beat); armed says it is set to, which it
	// is from arm until that beat starts. None is set while a beat is in
	// progress: it arms the next when it ends, if anything runs.
	timer   *time.Timer
	armed   bool
	beating bool
	batch   []*attempt // the attempts of the beat in progress
	leases  []Lease
}

// heartChunk bounds the leases of one Extend call.
const heartChunk = 1000

// add registers a, whose handler is about to start, for the beats.
func (h *heart) add(a *attempt) {
	h.mu.Lock()
	a.beatIdx = len(h.running)
	h.running = append(h.running, a)
	if !h.armed && !h.beating {
		h.arm(a.q)
	}
	h.mu.Unlock()
}

// remove unregisters a, whose handler returned: a beat that starts after
// remove returns skips it (one already under way may still extend it,
// which the outcome's fencing makes harmless).
func (h *heart) remove(a *attempt) {
	h.mu.Lock()
	a.mu.Lock()
	a.stopped = true
	a.mu.Unlock()
	last := len(h.running) - 1
	if i := a.beatIdx; i != last {
		h.running[i] = h.running[last]
		h.running[i].beatIdx = i
	}
	h.running[last] = nil
	h.running = h.running[:last]
	h.mu.Unlock()
}

// arm sets the timer of the next beat, Lease/3 from now. h.mu is held,
// and no beat is set or in progress: the timer's last beat, if any, has
// started, so the timer is reset, not set twice. A heart serves one Queue.
func (h *heart) arm(q *Queue) {
	h.armed = true
	if h.timer == nil {
		h.timer = time.AfterFunc(q.cfg.Lease/3, func() { h.beat(q) })
		return
	}
	h.timer.Reset(q.cfg.Lease / 3)
}

// beat extends the lease of every running attempt whose handler's context
// has not ended, and cancels, with ErrLeaseLost, the handlers whose lease
// another claim took over. A failed Extend changes nothing: the next beat
// tries again, and the leases run out if none succeeds.
func (h *heart) beat(q *Queue) {
	h.mu.Lock()
	h.armed, h.beating = false, true
	h.batch = append(h.batch[:0], h.running...)
	h.mu.Unlock()

	batch := h.batch[:0]
	for _, a := range h.batch {
		a.mu.Lock()
		if !a.stopped && !a.lost && (a.actx == nil || a.actx.Err() == nil) {
			batch = append(batch, a)
		}
		a.mu.Unlock()
	}
	// The leases of the attempts whose Worker is the first one's, then the
	// next Worker's, and so on: each Extend runs with its Worker's context
	// values (a store's tracer reads them), without its cancellation.
	leases := h.leases[:0]
	for len(batch) > 0 {
		vals := batch[0].vals
		n := 0
		for i, a := range batch {
			if a.vals == vals {
				batch[n], batch[i] = batch[i], batch[n]
				n++
			}
		}
		group := batch[:n]
		leases = leases[:0]
		for _, a := range group {
			leases = append(leases, Lease{ID: a.job.ID, Attempt: a.job.Attempts})
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(vals), q.cfg.Lease/3)
		for i := 0; i < len(leases); i += heartChunk {
			now := q.now()
			chunk := leases[i:min(i+heartChunk, len(leases))]
			if err := q.store.Extend(ctx, chunk, now, addMs(now, q.leaseMs)); err != nil {
				continue
			}
			for k, l := range chunk {
				if !l.Held {
					group[i+k].loseLease()
				}
			}
		}
		cancel()
		batch = batch[n:]
	}
	clear(h.batch) // batch was a prefix of it

	h.mu.Lock()
	h.batch, h.leases = h.batch[:0], leases[:0]
	h.beating = false
	if len(h.running) > 0 {
		h.arm(q)
	}
	h.mu.Unlock()
}

// loseLease marks a's lease lost to another claim and cancels its
// handler's context with ErrLeaseLost.
func (a *attempt) loseLease() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.lost = true
	if a.cancel != nil {
		a.cancel(ErrLeaseLost)
	}
}
