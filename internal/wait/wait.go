// Package wait is the timer every in-process stagger driver sleeps on
// between attempts (retry.Do, the HTTP transport, the gRPC interceptors,
// the broker adapters' reconnect pauses).
package wait

import (
	"context"
	"time"
)

// Timer is the part of *time.Timer a wait uses (retry.Timer).
type Timer interface {
	C() <-chan time.Time
	Reset(d time.Duration) bool
	Stop() bool
}

// Clock makes timers; retry.Clock is one.
type Clock interface {
	NewTimer(d time.Duration) Timer
}

// Waiter sleeps with one timer reused across the waits of a loop, on a
// Clock (nil: the runtime's timers). The zero value is ready to use; call
// Stop when the loop ends.
type Waiter struct {
	timer  *time.Timer
	ctimer Timer
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
		if w.ctimer == nil {
			w.ctimer = clk.NewTimer(d)
		} else {
			w.ctimer.Reset(d)
		}
		c = w.ctimer.C()
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
	if w.ctimer != nil {
		w.ctimer.Stop()
	}
}
