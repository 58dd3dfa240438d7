package retry

import (
	"context"
	"time"

	"github.com/staggerhq/stagger/internal/stepcore"
)

// Handler processes one unit of work — a job's payload, a message's body —
// and answers in the retry vocabulary: nil (done), [Retryable] or [After]
// (try again later), [Permanent] (quarantine it), or any other error
// (unknown: handed back to the caller, neither success nor quarantine).
//
// The same Handler runs unchanged in-process ([Handler.Run]), in the durable queue
// and on every broker adapter; each driver puts a [Delivery] in the context.
type Handler func(ctx context.Context, payload []byte) error

// Delivery describes the attempt a Handler is running, and is the ledger
// of its unit of work: what a driver carries between attempts (a queue
// row, message headers, HTTP headers) so that the attempts and the
// deadline left travel with the work. A handler that hands its work on to
// another driver (enqueues it, publishes it) passes its Delivery along, so
// the work continues with what is left instead of a fresh budget.
type Delivery struct {
	// ID identifies the unit of work across attempts, redeliveries and
	// layers (job ID, message ID, Stagger-Request-Id): the key an inbox
	// deduplicates on.
	ID string
	// Attempt counts attempts of this unit of work, from 1 (between
	// attempts: the attempts made so far).
	Attempt int
	// MaxAttempts is the attempt budget; 0 means the Policy's.
	MaxAttempts int
	// Source names the driver: "retry", "queue", "rabbitmq", "kafka",
	// "jetstream", "http".
	Source string
	// Deadline is when the unit of work must be done by; zero: none. It
	// only ever moves earlier.
	Deadline time.Time
	// First is when the unit of work's first attempt started (the base of
	// Policy.Timeout); zero before it.
	First time.Time
	// Prev is the wait decided after the last failure (the schedule's
	// input for decorrelated jitter); 0 after none.
	Prev time.Duration
}

// NewContext returns a child of ctx carrying d's ID, Attempt, MaxAttempts,
// Source and Deadline, for DeliveryFrom (one allocation of 64 bytes): what
// a driver hands its Handler. Counts beyond 2³¹−1 are clamped. A driver
// that hands out many can take them from retrydriver.DeliveryContexts.
func (d Delivery) NewContext(ctx context.Context) context.Context {
	c := new(stepcore.DeliveryCtx)
	c.Set(ctx, d.ID, d.Source, d.Attempt, d.MaxAttempts, d.Deadline)
	return c
}

// DeliveryFrom returns the Delivery a driver put in ctx: its ID, Attempt,
// MaxAttempts, Source and Deadline (First and Prev stay with the driver).
func DeliveryFrom(ctx context.Context) (Delivery, bool) {
	c, ok := ctx.Value(stepcore.DeliveryKey{}).(*stepcore.DeliveryCtx)
	if !ok || c == nil {
		return Delivery{}, false
	}
	d := Delivery{ID: c.ID, Source: c.Source, Attempt: int(c.Attempt), MaxAttempts: int(c.Max)}
	if c.DeadlineNs != 0 {
		d.Deadline = time.Unix(0, c.DeadlineNs)
	}
	return d, true
}

// Run is the in-process driver of a Handler: it runs h on payload under
// policy p (nil: the zero Policy) as Do runs a function, giving each
// attempt a Delivery with the given id, Source "retry", the attempt number,
// the attempt budget and the deadline.
func (h Handler) Run(ctx context.Context, p *Policy, id string, payload []byte) error {
	if p == nil {
		p = &defaultPolicy
	}
	if err := p.Validate(); err != nil {
		return err
	}
	if h == nil {
		return errNilFunc
	}
	s := step{Policy: p, Delivery: Delivery{ID: id, MaxAttempts: p.maxAttempts(), Source: "retry"}}
	return s.loop(ctx, func(actx context.Context) error {
		return h(s.Delivery.NewContext(actx), payload)
	}, nil)
}
