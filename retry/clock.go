package retry

import (
	"time"

	"github.com/staggerhq/stagger/internal/wait"
)

// Clock is the source of time for a retry loop: Now for decisions (deadline,
// budgets) and NewTimer for waits. Inject one to drive a loop in tests; the
// per-attempt context deadlines still use the runtime's timers, which
// testing/synctest makes virtual as well.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer a retry loop uses: C, Reset and Stop.
type Timer = wait.Timer
