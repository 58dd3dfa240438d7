package simkit

import (
	"fmt"
	"math/bits"
	"time"
)

// Epoch is virtual time zero: the instant a run starts. Models turn the
// engine's offsets into the time.Time values the core's budgets and
// decisions take with Epoch.Add, so nothing here reads the wall clock.
var Epoch = time.Unix(0, 0).UTC()

// Event is one scheduled happening of a model: at virtual time At, do Kind
// to entity ID. Kind and ID mean whatever the model says; the engine only
// orders events. Events are plain values (no interface, no pointer), so a
// queue of millions costs 24 bytes each and scheduling allocates nothing
// once the queue has grown.
type Event struct {
	At   time.Duration // virtual time since Epoch
	Kind int32         // model-defined
	ID   int32         // model-defined, usually an entity index
	seq  uint64        // schedule order: breaks ties between equal At
}

// Engine is a discrete-event scheduler on a virtual clock. Events come out
// in order of time; events at the same instant come out in the order they
// were scheduled, so a run is a pure function of its inputs and seeds.
//
// The queue is a 4-ary min-heap in one slice: shallower than a binary heap
// (fewer cache misses at millions of entries) and with no per-event
// allocation. The event being handled stays at the root until the handler
// schedules its follow-up, which then replaces it with one sift instead of
// two, and the sift picks the least of four children without a branch, so
// random keys cost no mispredictions. An Engine is not safe for concurrent
// use; run independent simulations on separate engines.
type Engine struct {
	now       time.Duration
	seq       uint64
	processed uint64
	q         []Event
	// taken: q[0] is the event Next last returned, still in place. Most
	// handlers schedule one follow-up; At then overwrites the root and
	// sifts it down once, instead of a removal (one sift) and an insertion
	// (another). Keys (At, seq) are unique, so the order events come out
	// in does not depend on how the heap is laid out.
	taken bool
}

// NewEngine returns an engine with room for capacity pending events.
func NewEngine(capacity int) *Engine {
	return &Engine{q: make([]Event, 0, max(capacity, 0))}
}

// Now returns the virtual time of the event being handled (0 before the
// first): the offset since Epoch.
func (e *Engine) Now() time.Duration { return e.now }

// Time returns Now as a time.Time (Epoch + Now), the form budgets, windows
// and Policy.Decide take.
func (e *Engine) Time() time.Time { return Epoch.Add(e.now) }

// Pending returns the number of scheduled events not yet handled.
func (e *Engine) Pending() int {
	if e.taken {
		return len(e.q) - 1
	}
	return len(e.q)
}

// Processed returns the number of events taken from the queue so far.
func (e *Engine) Processed() uint64 { return e.processed }

// Reset empties the queue and sets the clock back to zero, keeping the
// queue's memory for the next run.
func (e *Engine) Reset() {
	e.now, e.seq, e.processed = 0, 0, 0
	e.q, e.taken = e.q[:0], false
}

// At schedules kind for id at virtual time at. Scheduling in the past is a
// model bug and panics: time never runs backwards.
func (e *Engine) At(at time.Duration, kind, id int32) {
	if at < e.now {
		panic(fmt.Sprintf("sim: event scheduled at %v, before now (%v)", at, e.now))
	}
	e.seq++
	ev := Event{At: at, Kind: kind, ID: id, seq: e.seq}
	if e.taken { // replace the handled root
		e.taken = false
		e.down(ev)
		return
	}
	e.push(ev)
}

// After schedules kind for id d after now (a negative d counts as 0).
func (e *Engine) After(d time.Duration, kind, id int32) {
	e.At(e.now+max(d, 0), kind, id)
}

// Next removes the earliest event, advances the clock to its time and
// returns it; ok is false when nothing is pending.
func (e *Engine) Next() (ev Event, ok bool) {
	e.drop()
	if len(e.q) == 0 {
		return Event{}, false
	}
	ev = e.q[0]
	e.taken = true
	e.now = ev.At
	e.processed++
	return ev, true
}

// drop removes the handled root, if it is still in place.
func (e *Engine) drop() {
	if !e.taken {
		return
	}
	e.taken = false
	n := len(e.q)
	last := e.q[n-1]
	e.q = e.q[:n-1]
	if n > 1 {
		e.down(last)
	}
}

// Peek returns the earliest pending event without removing it.
func (e *Engine) Peek() (Event, bool) {
	e.drop()
	if len(e.q) == 0 {
		return Event{}, false
	}
	return e.q[0], true
}

func less(a, b *Event) bool {
	return a.At < b.At || a.At == b.At && a.seq < b.seq
}

// push sifts ev up from the end ("hole" method: one write per level).
func (e *Engine) push(ev Event) {
	e.q = append(e.q, ev)
	up(e.q, len(e.q)-1, ev)
}

// up places ev at the hole i or above it, moving larger parents down.
func up(q []Event, i int, ev Event) {
	for i > 0 {
		p := (i - 1) >> 2
		if !less(&ev, &q[p]) {
			break
		}
		q[i] = q[p]
		i = p
	}
	q[i] = ev
}

// down places ev in the root's place (the queue's former last element
// after a removal, or a new event replacing the handled root): Floyd's
// bottom-up deletion. The hole left by the root walks down to a leaf,
// always taking the least child (3 branch-free comparisons per level, none
// against ev), then ev sifts up from there. ev is usually late (a last
// element, or a follow-up scheduled after now), so it rises a level or two
// at most: fewer comparisons, and far fewer mispredicted branches, than
// comparing ev at every level on the way down.
func (e *Engine) down(ev Event) {
	q := e.q
	n := len(q)
	i := 0
	for {
		c := i<<2 + 1
		if c+3 < n {
			// the least of four children without a branch: each compare is a
			// borrow (0 or 1) turned into an index
			m0 := c + int(lessBit(&q[c+1], &q[c]))
			m1 := c + 2 + int(lessBit(&q[c+3], &q[c+2]))
			m := m0 ^ (m0^m1)&-int(lessBit(&q[m1], &q[m0]))
			q[i] = q[m]
			i = m
			continue
		}
		if c < n {
			m := c
			for j := c + 1; j < n; j++ {
				if less(&q[j], &q[m]) {
					m = j
				}
			}
			q[i] = q[m]
			i = m
		}
		break
	}
	up(q, i, ev)
}

// lessBit is less as 0 or 1, computed without a branch: (At, seq) compared
// as one 128-bit unsigned number (At is never negative).
func lessBit(a, b *Event) uint64 {
	_, borrow := bits.Sub64(a.seq, b.seq, 0)
	_, borrow = bits.Sub64(uint64(a.At), uint64(b.At), borrow)
	return borrow
}
