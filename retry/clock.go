package retry

import (
	"time"
)

// Clock is the source of time for a retry loop: Now for decisions (deadline,
// budgets) and After for waits (like time.After: the channel receives once,
// d from now on the clock's time). Inject one to drive a loop in tests; the
// per-attempt context deadlines still use the runtime's timers, which
// testing/synctest makes virtual as well (under synctest the nil Clock is
// usually all a test needs).
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}
