package queue

import (
	"errors"
	"fmt"
	"time"
)

// Snooze is what a handler returns to put its job off for d without a
// failure: the job is pending again at now + d (a negative d counts as 0;
// rounded up to whole ms), with no error logged or reported, no dead
// reason, and LastError unchanged.
//
// A snooze is an attempt like any other for the two limits of the
// contract, so it can neither loop for ever nor outlive the job:
//
//   - the attempt the claim spent stays spent (attempts are counted at
//     claim and never given back), so a job runs at most MaxAttempts times
//     in all, snoozes included; a snooze on the last attempt makes the job
//     dead(exhausted), since it could never be claimed again;
//   - the deadline never moves: a snooze that would wake at or after the
//     deadline makes the job dead(deadline) at once.
//
// Budget for snoozes in MaxAttempts (a job that polls for a result every
// minute for an hour needs 60 attempts or more).
func Snooze(d time.Duration) error { return &snoozeError{d: max(d, 0)} }

type snoozeError struct{ d time.Duration }

func (e *snoozeError) Error() string { return fmt.Sprintf("queue: snoozed for %v", e.d) }

// snoozed reports whether err is (or wraps) a Snooze, and its delay.
func snoozed(err error) (time.Duration, bool) {
	if err == nil {
		return 0, false // and no allocation: s escapes to errors.As
	}
	var s *snoozeError
	if errors.As(err, &s) {
		return s.d, true
	}
	return 0, false
}

// snoozeOutcome is the outcome o of job j snoozed for d at t1.
func snoozeOutcome(o Outcome, j *Job, d time.Duration, t1 int64) Outcome {
	wake := addMs(t1, ceilMs(d))
	o.LastError = j.LastError
	switch {
	case j.Attempts >= j.MaxAttempts:
		o.State, o.DeadReason = Dead, Exhausted
		o.LastError = joinNote(j.LastError, fmt.Sprintf("snoozed for %v on its last attempt (%d of %d)", d, j.Attempts, j.MaxAttempts))
	case wake >= j.Deadline:
		o.State, o.DeadReason = Dead, DeadlineReached
		o.LastError = joinNote(j.LastError, fmt.Sprintf("snoozed for %v, waking at or after the deadline", d))
	default:
		o.State, o.AvailableAt = Pending, wake
	}
	return o
}

func joinNote(prev, note string) string {
	if prev == "" {
		return note
	}
	return truncateError(prev + "; then " + note)
}
