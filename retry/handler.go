package retry

import (
	"context"
	"math"
	"sync/atomic"
	"time"
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

type deliveryKey struct{}

// deliveryCtx carries what a handler needs of a Delivery in one small
// allocation (64 bytes): Value hands out the context itself (no boxing),
// and every other key goes to the parent, so cancellation and deadlines
// propagate as for any derived context. First and Prev, the driver's own
// bookkeeping, are not carried.
type deliveryCtx struct {
	context.Context
	id, source   string
	attempt, max int32
	deadline     int64 // Unix ns; 0: none
}

func (c *deliveryCtx) Value(key any) any {
	if _, ok := key.(deliveryKey); ok {
		return c
	}
	return c.Context.Value(key)
}

func (c *deliveryCtx) String() string { return "retry.Delivery.NewContext" }

// NewContext returns a child of ctx carrying d's ID, Attempt, MaxAttempts,
// Source and Deadline, for DeliveryFrom (one allocation): what a driver
// hands its Handler. Counts beyond 2³¹−1 are clamped.
func (d Delivery) NewContext(ctx context.Context) context.Context {
	c := new(deliveryCtx)
	c.set(ctx, &d)
	return c
}

func (c *deliveryCtx) set(ctx context.Context, d *Delivery) {
	c.Context, c.id, c.source = ctx, d.ID, d.Source
	c.attempt, c.max = clamp32(d.Attempt), clamp32(d.MaxAttempts)
	if !d.Deadline.IsZero() {
		c.deadline = d.Deadline.UnixNano()
	}
}

// DeliveryContexts makes the contexts of Delivery.NewContext for a driver
// that hands out many, carving them from blocks allocated 63 at a time:
// one allocation per 63 contexts instead of one each. The zero value is
// ready to use, and it is safe for concurrent use; it must not be copied
// after first use.
//
// A context is never reused: each belongs to its handler for as long as
// the handler keeps it, also after the handler returned (a goroutine it
// started, a value it stored), and DeliveryFrom reads the same Delivery
// from it at any time. The price of keeping one is its block: a context
// still referenced keeps its whole block (4 KiB) and what the block's
// other contexts refer to (their parents and IDs) from being collected.
type DeliveryContexts struct {
	cur atomic.Pointer[ctxBlock]
}

// ctxBlock is 63 contexts and the count of those handed out: 4040 bytes,
// in the runtime's 4 KiB size class.
type ctxBlock struct {
	n atomic.Uint32
	c [63]deliveryCtx
}

// NewContext is d.NewContext(ctx), allocating once per block.
func (b *DeliveryContexts) NewContext(ctx context.Context, d *Delivery) context.Context {
	var c *deliveryCtx
	if blk := b.cur.Load(); blk != nil {
		// Each index is handed out once: a slot is its caller's alone.
		if i := blk.n.Add(1) - 1; i < uint32(len(blk.c)) {
			c = &blk.c[i]
		}
	}
	if c == nil {
		// The block is used up (or there is none): a new one. Callers
		// racing here each make one; the blocks lost are only space.
		blk := new(ctxBlock)
		blk.n.Store(1)
		b.cur.Store(blk)
		c = &blk.c[0]
	}
	c.set(ctx, d)
	return c
}

func clamp32(n int) int32 { return int32(min(max(n, 0), math.MaxInt32)) }

// DeliveryFrom returns the Delivery a driver put in ctx: its ID, Attempt,
// MaxAttempts, Source and Deadline (First and Prev stay with the driver).
func DeliveryFrom(ctx context.Context) (Delivery, bool) {
	c, ok := ctx.Value(deliveryKey{}).(*deliveryCtx)
	if !ok || c == nil {
		return Delivery{}, false
	}
	d := Delivery{ID: c.id, Source: c.source, Attempt: int(c.attempt), MaxAttempts: int(c.max)}
	if c.deadline != 0 {
		d.Deadline = time.Unix(0, c.deadline)
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
