package rabbitmq

import (
	"slices"
	"sync"
)

// acker settles a consuming channel's deliveries, coalescing acks: a
// settled delivery whose lower tags are all settled too is acknowledged
// with the next multiple ack (basic.ack multiple=true), one frame for many
// deliveries. A multiple ack covers every tag up to its own, so it is sent
// only up to base, below which nothing is unsettled (to its highest
// waiting tag): a delivery still
// handled, held or waiting for its forward's confirm is never acknowledged
// early, and a nack is sent at once, so no multiple ack swallows it. A
// delivery settled above an unsettled one waits too, but at most limit
// acks wait at a time, and idle sends them (alone) whenever a handler
// goroutine has nothing to do, unless only forwards block them: the
// forward's confirm, which comes soon, sends them with its multiple ack.
// So the acks waiting never hold the prefetch window for long.
type acker struct {
	ch    acknowledger
	limit int
	batch batcher // nil: each ack its own write

	mu        sync.Mutex
	base      uint64          // every tag up to base is settled
	top       uint64          // the highest tag up to base whose ack waits
	loose     map[uint64]bool // settled tags above base+1: true once on the wire
	waitBase  int             // acks waiting for a multiple ack up to base
	waitLoose int             // acks in loose waiting (false entries)
	waiting   []uint64        // the tags of loose's waiting acks (and some absorbed since)
	fwd       map[uint64]bool // unsettled tags whose forward waits for its confirm
}

// acknowledger is the part of *amqp.Channel an acker uses.
type acknowledger interface {
	Ack(tag uint64, multiple bool) error
	Nack(tag uint64, multiple, requeue bool) error
}

// batcher gathers the frames written between cork and uncork into one
// write (a corkConn).
type batcher interface {
	cork()
	uncork() error
}

func newAcker(ch acknowledger, prefetch int, batch batcher) *acker {
	return &acker{ch: ch, limit: max(1, prefetch/4), batch: batch, loose: map[uint64]bool{}, fwd: map[uint64]bool{}}
}

// ack settles tag. Unless lazy, the multiple ack up to base goes out at
// once; a lazy ack waits for flush, a later ack or the limit.
func (a *acker) ack(tag uint64, lazy bool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.settle(tag, false)
	if a.waitBase+a.waitLoose >= a.limit {
		return a.flushLocked()
	}
	if !lazy && a.waitBase > 0 {
		return a.ackBase()
	}
	return nil
}

// ackAll settles tags (forwards whose confirms came) and sends the
// multiple ack up to base at once, one frame for them all.
func (a *acker) ackAll(tags []uint64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, tag := range tags {
		a.settle(tag, false)
	}
	if a.waitBase+a.waitLoose >= a.limit {
		return a.flushLocked()
	}
	if a.waitBase > 0 {
		return a.ackBase()
	}
	return nil
}

// nack rejects tag at once (requeued or not) and settles it.
func (a *acker) nack(tag uint64, requeue bool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.ch.Nack(tag, false, requeue); err != nil {
		return err
	}
	a.settle(tag, true)
	return nil
}

// forwarding records that tag's forward was published: its ack follows
// the confirm.
func (a *acker) forwarding(tag uint64) {
	a.mu.Lock()
	a.fwd[tag] = true
	a.mu.Unlock()
}

// idle sends the acks that wait, but leaves those that only forwards
// block to the forwards' acks.
func (a *acker) idle() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.waitBase > 0 {
		if err := a.ackBase(); err != nil {
			return err
		}
	}
	if a.waitLoose == 0 {
		return nil
	}
	// The tags between base and the highest waiting one that are not
	// settled block it; if each of them is a forward, leave it.
	var hi uint64
	for _, tag := range a.waiting {
		if w, ok := a.loose[tag]; ok && !w {
			hi = max(hi, tag)
		}
	}
	if hi-a.base > uint64(8*a.limit) {
		return a.flushLocked() // not worth the walk
	}
	for tag := a.base + 1; tag < hi; tag++ {
		if _, ok := a.loose[tag]; !ok && !a.fwd[tag] {
			return a.flushLocked()
		}
	}
	return nil
}

// flush sends every ack that waits.
func (a *acker) flush() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.flushLocked()
}

// settle records tag as settled; onWire when its ack or nack was sent.
func (a *acker) settle(tag uint64, onWire bool) {
	delete(a.fwd, tag)
	if tag != a.base+1 {
		a.loose[tag] = onWire
		if !onWire {
			a.waitLoose++
			if len(a.waiting) >= 2*a.limit {
				// Drop the tags absorbed into base since.
				a.waiting = slices.DeleteFunc(a.waiting, func(t uint64) bool { return t <= a.base })
			}
			a.waiting = append(a.waiting, tag)
		}
		return
	}
	a.base = tag
	if !onWire {
		a.waitBase++
		a.top = tag
	}
	for {
		w, ok := a.loose[a.base+1]
		if !ok {
			return
		}
		delete(a.loose, a.base+1)
		a.base++
		if !w {
			a.waitLoose--
			a.waitBase++
			a.top = a.base
		}
	}
}

// ackBase acknowledges every tag up to top. RabbitMQ requires the tag of
// a multiple ack to be unacknowledged itself (else the channel closes with
// PRECONDITION_FAILED, unknown delivery tag), so it is top, not base.
func (a *acker) ackBase() error {
	if err := a.ch.Ack(a.top, true); err != nil {
		return err
	}
	a.waitBase = 0
	return nil
}

// flushLocked sends every ack that waits, in one write when there are
// several and a batcher.
func (a *acker) flushLocked() (err error) {
	if a.batch != nil && a.waitLoose+min(a.waitBase, 1) > 1 {
		a.batch.cork()
		defer func() {
			if e := a.batch.uncork(); err == nil {
				err = e
			}
		}()
	}
	if a.waitBase > 0 {
		if err := a.ackBase(); err != nil {
			return err
		}
	}
	for _, tag := range a.waiting {
		if w, ok := a.loose[tag]; ok && !w {
			if err := a.ch.Ack(tag, false); err != nil {
				return err
			}
			a.loose[tag] = true
			a.waitLoose--
		}
	}
	a.waiting = a.waiting[:0]
	return nil
}
