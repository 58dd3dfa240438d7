// Package wait is the timer every in-process stagger driver sleeps on
// between attempts (retry.Do, the HTTP transport, the gRPC interceptors,
// the broker adapters' reconnect pauses).
package wait

import (
	"context"
	"time"
)

// Clock makes waits; retry.Clock is one.
type Clock interface {
	After(d time.Duration) <-chan time.Time
}

// Waiter sleeps with one runtime timer reused across the waits of a loop,
// or on a Clock. The zero value is ready to use; call Stop when the loop
// ends.
type Waiter struct {
	timer *time.Timer
}

// Wait sleeps d on clk and returns nil, or ctx's error as soon as ctx ends.
func (w *Waiter) Wait(ctx context.Context, clk Clock, d time.Duration) error {
	var c <-chan time.Time
	if clk == nil {
		if w.timer == nil {
			w.timer = time.NewTimer(d)
		} else {
			w.timer.Reset(d)
		}
		c = w.timer.C
	} else {
		c = clk.After(d)
	}
	select {
	case <-c:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stop releases the timer.
func (w *Waiter) Stop() {
	if w.timer != nil {
		w.timer.Stop()
	}
}
