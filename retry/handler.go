package retry

import "context"

// Handler processes one unit of work — a job's payload, a message's body —
// and answers in the retry vocabulary: nil (done), [Retryable] or [After]
// (try again later), [Permanent] (quarantine it), or any other error
// (unknown: handed back to the caller, neither success nor quarantine).
//
// The same Handler runs unchanged in-process ([Run]), in the durable queue
// and on every broker adapter; each driver puts a [Delivery] in the context.
type Handler func(ctx context.Context, payload []byte) error

// Delivery describes the attempt a Handler is running.
type Delivery struct {
	// ID identifies the unit of work across attempts and redeliveries
	// (job ID, message ID): the key an inbox deduplicates on.
	ID string
	// Attempt counts attempts of this unit of work, from 1.
	Attempt int
	// MaxAttempts is the attempt budget, 0 when the driver has none.
	MaxAttempts int
	// Source names the driver: "retry", "queue", "rabbitmq", "kafka",
	// "jetstream".
	Source string
}

type deliveryKey struct{}

// deliveryCtx carries a Delivery in one allocation: Value hands out a
// pointer to the field (no boxing), and every other key goes to the parent,
// so cancellation and deadlines propagate as for any derived context.
type deliveryCtx struct {
	context.Context
	d Delivery
}

func (c *deliveryCtx) Value(key any) any {
	if _, ok := key.(deliveryKey); ok {
		return &c.d
	}
	return c.Context.Value(key)
}

func (c *deliveryCtx) String() string { return "retry.WithDelivery" }

// WithDelivery returns a context carrying d (one allocation).
func WithDelivery(ctx context.Context, d Delivery) context.Context {
	return &deliveryCtx{Context: ctx, d: d}
}

// DeliveryFrom returns the Delivery a driver put in ctx.
func DeliveryFrom(ctx context.Context) (Delivery, bool) {
	if d, ok := ctx.Value(deliveryKey{}).(*Delivery); ok && d != nil {
		return *d, true
	}
	return Delivery{}, false
}

// Run is the in-process driver of a Handler: it runs h on payload under
// policy p (nil: the zero Policy) with Do, giving each attempt a Delivery
// with the given id and Source "retry".
func Run(ctx context.Context, p *Policy, id string, payload []byte, h Handler) error {
	if h == nil {
		return errNilFunc
	}
	max := DefaultMaxAttempts
	if p != nil {
		max = p.maxAttempts()
	}
	attempt := 0
	return Do(ctx, p, func(ctx context.Context) error {
		attempt++
		return h(WithDelivery(ctx, Delivery{ID: id, Attempt: attempt, MaxAttempts: max, Source: "retry"}), payload)
	})
}
