package simkit

import (
	"time"

	"github.com/staggerhq/stagger/retry"
)

// fakeClock lets retry.Do run without waiting: timers fire at once.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }
func (c *fakeClock) NewTimer(d time.Duration) retry.Timer {
	c.now = c.now.Add(d)
	t := &fakeTimer{c: make(chan time.Time, 1), clock: c}
	t.c <- c.now
	return t
}

type fakeTimer struct {
	c     chan time.Time
	clock *fakeClock
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }
func (t *fakeTimer) Reset(d time.Duration) bool {
	t.clock.now = t.clock.now.Add(d)
	t.c <- t.clock.now
	return false
}
func (t *fakeTimer) Stop() bool { return false }

func withFakeClock(p *retry.Policy) *retry.Policy {
	p.Clock = &fakeClock{now: Epoch}
	return p
}
