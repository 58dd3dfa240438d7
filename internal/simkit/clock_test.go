package simkit

import (
	"time"

	"github.com/staggerhq/stagger/retry"
)

// fakeClock lets retry.Do run without waiting: timers fire at once.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }
func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.now = c.now.Add(d)
	ch := make(chan time.Time, 1)
	ch <- c.now
	return ch
}

func withFakeClock(p *retry.Policy) *retry.Policy {
	p.Clock = &fakeClock{now: Epoch}
	return p
}
