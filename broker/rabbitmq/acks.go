package rabbitmq

import "sync"

// acker settles a consuming channel's deliveries, coalescing acks: a
// settled delivery whose lower tags are all settled too is acknowledged
// with the next multiple ack (basic.ack multiple=true), one frame for many
// deliveries. A multiple ack covers every tag up to its own, so it is sent
// only up to base, below which nothing is unsettled (to its highest
// waiting tag): a delivery still
// handled, held or waiting for its forward's confirm is never acknowledged
// early, and a nack is sent at once, so no multiple ack swallows it. A
// delivery settled above an unsettled one waits too, but at most limit
// acks wait at a time, and flush sends them (alone) whenever the
// Consumer's handler goroutines have nothing to do, so the acks waiting
// never hold the prefetch window for long.
type acker struct {
	ch    acknowledger
	limit int

	mu        sync.Mutex
	base      uint64          // every tag up to base is settled
	top       uint64          // the highest tag up to base whose ack waits
	loose     map[uint64]bool // settled tags above base+1: true once on the wire
	waitBase  int             // acks waiting for a multiple ack up to base
	waitLoose int             // acks in loose waiting (false entries)
}

// acknowledger is the part of *amqp.Channel an acker uses.
type acknowledger interface {
	Ack(tag uint64, multiple bool) error
	Nack(tag uint64, multiple, requeue bool) error
}

func newAcker(ch acknowledger, prefetch int) *acker {
	return &acker{ch: ch, limit: max(1, prefetch/4), loose: map[uint64]bool{}}
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

// flush sends every ack that waits.
func (a *acker) flush() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.flushLocked()
}

// settle records tag as settled; onWire when its ack or nack was sent.
func (a *acker) settle(tag uint64, onWire bool) {
	if tag != a.base+1 {
		a.loose[tag] = onWire
		if !onWire {
			a.waitLoose++
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

func (a *acker) flushLocked() error {
	if a.waitBase > 0 {
		if err := a.ackBase(); err != nil {
			return err
		}
	}
	if a.waitLoose == 0 {
		return nil
	}
	for tag, w := range a.loose {
		if !w {
			if err := a.ch.Ack(tag, false); err != nil {
				return err
			}
			a.loose[tag] = true
			a.waitLoose--
		}
	}
	return nil
}
