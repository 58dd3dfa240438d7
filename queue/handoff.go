package queue

import (
	"fmt"

	"github.com/staggerhq/stagger/retry"
)

// Handoff returns j made to carry on work whose ledger is d — a handler
// that gives up in process (under retry.Handler.Run, an HTTP call's Guard, a broker)
// and hands the work to the queue, with the attempts and the deadline that
// are left rather than a fresh budget:
//
//   - ID: j.ID, or d.ID when j has none (enqueueing is idempotent per ID,
//     so the logical request is enqueued once however often it is handed
//     over);
//   - MaxAttempts: at most d's attempts left after the current one
//     (d.MaxAttempts − d.Attempt), when d has an attempt budget;
//   - Deadline: at most d.Deadline, when d has one.
//
// It returns an error wrapping ErrInvalid when d has no attempt left.
func Handoff(d retry.Delivery, j NewJob) (NewJob, error) {
	if j.ID == "" {
		j.ID = d.ID
	}
	if d.MaxAttempts > 0 {
		left := d.MaxAttempts - d.Attempt
		if left < 1 {
			return j, fmt.Errorf("%w: the work has no attempt left (%d of %d made)", ErrInvalid, d.Attempt, d.MaxAttempts)
		}
		if j.MaxAttempts == 0 || j.MaxAttempts > left {
			j.MaxAttempts = left
		}
	}
	if !d.Deadline.IsZero() {
		if ms := d.Deadline.UnixMilli(); j.Deadline == 0 || ms < j.Deadline {
			j.Deadline = ms
		}
	}
	return j, nil
}
