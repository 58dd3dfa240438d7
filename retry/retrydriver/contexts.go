package retrydriver

import (
	"context"

	"github.com/staggerhq/stagger/internal/stepcore"
	"github.com/staggerhq/stagger/retry"
)

// DeliveryContexts makes the contexts a driver hands its handlers —
// d.NewContext(ctx), which retry.DeliveryFrom reads — carving them from
// blocks allocated 63 at a time: one allocation per 63 contexts instead of
// one each, for a driver that runs many short attempts (a broker
// consumer). The zero value is ready to use; it is safe for concurrent use
// and must not be copied after first use.
//
// A context is never reused: each belongs to its handler for as long as
// the handler keeps it, also after the handler returned (a goroutine it
// started, a value it stored), and retry.DeliveryFrom reads the same
// Delivery from it at any time. The price of keeping one is its block: a
// context still referenced keeps its whole block (4 KiB) and what the
// block's other contexts refer to (their parents and IDs) from being
// collected. A driver whose handlers' contexts live long (a streaming
// server) should use retry.Delivery.NewContext.
type DeliveryContexts struct {
	b stepcore.DeliveryBlocks
}

// NewContext is d.NewContext(ctx), allocating once per 63 calls.
func (c *DeliveryContexts) NewContext(ctx context.Context, d *retry.Delivery) context.Context {
	x := c.b.Next()
	x.Set(ctx, d.ID, d.Source, d.Attempt, d.MaxAttempts, d.Deadline)
	return x
}
