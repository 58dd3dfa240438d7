package stepcore

import (
	"context"
	"math"
	"sync/atomic"
	"time"
)

// DeliveryKey is the context key of a DeliveryCtx.
type DeliveryKey struct{}

// DeliveryCtx carries what a handler needs of a retry.Delivery in one
// small allocation (64 bytes): Value hands out the context itself (no
// boxing), and every other key goes to the parent, so cancellation and
// deadlines propagate as for any derived context. First and Prev, the
// driver's own bookkeeping, are not carried. retry.Delivery.NewContext
// makes one, retry.DeliveryFrom reads it.
type DeliveryCtx struct {
	context.Context
	ID, Source   string
	Attempt, Max int32
	DeadlineNs   int64 // Unix ns; 0: none
}

// Value implements context.Context.
func (c *DeliveryCtx) Value(key any) any {
	if _, ok := key.(DeliveryKey); ok {
		return c
	}
	return c.Context.Value(key)
}

func (c *DeliveryCtx) String() string { return "retry.Delivery.NewContext" }

// Set fills c as a child of ctx; counts beyond 2³¹−1 are clamped.
func (c *DeliveryCtx) Set(ctx context.Context, id, source string, attempt, maxAttempts int, deadline time.Time) {
	c.Context, c.ID, c.Source = ctx, id, source
	c.Attempt, c.Max = clamp32(attempt), clamp32(maxAttempts)
	c.DeadlineNs = 0
	if !deadline.IsZero() {
		c.DeadlineNs = deadline.UnixNano()
	}
}

func clamp32(n int) int32 { return int32(min(max(n, 0), math.MaxInt32)) }

// DeliveryBlocks hands out DeliveryCtx values carved from blocks
// allocated 63 at a time (4040 bytes, the runtime's 4 KiB size class):
// one allocation per 63. A value is never handed out twice, so a context
// kept after its handler returned still reads its own delivery; keeping
// one keeps its whole block. The zero value is ready; it is safe for
// concurrent use and must not be copied after first use.
type DeliveryBlocks struct {
	cur atomic.Pointer[deliveryBlock]
}

type deliveryBlock struct {
	n atomic.Uint32
	c [63]DeliveryCtx
}

// Next returns a DeliveryCtx of its caller's alone.
func (b *DeliveryBlocks) Next() *DeliveryCtx {
	if blk := b.cur.Load(); blk != nil {
		// Each index is handed out once.
		if i := blk.n.Add(1) - 1; i < uint32(len(blk.c)) {
			return &blk.c[i]
		}
	}
	// The block is used up (or there is none): a new one. Callers racing
	// here each make one; the blocks lost are only space.
	blk := new(deliveryBlock)
	blk.n.Store(1)
	b.cur.Store(blk)
	return &blk.c[0]
}
