package rabbitmq

import (
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/staggerhq/stagger/broker"
)

// held is a delivery the Consumer holds in place (unacknowledged) until its
// retry is due, with the state a wait queue's copy would have carried.
type held struct {
	d     *amqp.Delivery
	from  route
	st    broker.State
	timer *time.Timer
}

// holder keeps one session's held deliveries. A timer per delivery hands it,
// when due, to the session's workers through ready. ready never blocks a
// timer: every held delivery is unacknowledged, so there are at most
// Prefetch of them (RabbitMQ sends no more), and ready holds Prefetch (or
// nothing, in a session that never holds).
type holder struct {
	mu      sync.Mutex
	waiting map[*held]struct{} // timers running
	closed  bool
	ready   chan *held // due, or released by close; closed by close
}

func newHolder(prefetch int) *holder {
	return &holder{waiting: map[*held]struct{}{}, ready: make(chan *held, prefetch)}
}

// hold schedules x on ready after in. It reports false, and holds nothing,
// once the holder is closed: the caller forwards x instead.
func (h *holder) hold(x *held, in time.Duration) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	h.waiting[x] = struct{}{}
	x.timer = time.AfterFunc(in, func() { h.due(x) })
	return true
}

// due hands x to the workers, unless close took it first.
func (h *holder) due(x *held) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.waiting[x]; !ok {
		return
	}
	delete(h.waiting, x)
	h.ready <- x
}

// close stops every timer, puts what they held on ready at once and closes
// ready: the workers release what it still holds, and hold refuses new
// deliveries. It is idempotent.
func (h *holder) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.closed = true
	for x := range h.waiting {
		x.timer.Stop()
		h.ready <- x
	}
	clear(h.waiting)
	close(h.ready)
}
