package queue

import (
	"fmt"
	"strconv"

	"github.com/staggerhq/stagger/retry"
)

// Handoff returns j made to carry on work whose ledger is d — a handler
// that gives up in process (under retry.Handler.Run, an HTTP call's Guard,
// a gRPC Server, a broker) and hands the work to the queue, with the
// attempts and the deadline that are left rather than a fresh budget:
//
//   - ID: j.ID, or d.ID when j has none and d's ID is the server's own
//     (d.Source "retry" or "queue": an ID chosen in process or a stored
//     job's). An ID that came from a client — over HTTP, gRPC or a broker
//     (any other Source) — is not taken as the job ID: enqueueing
//     deduplicates by ID, so a client that reused another caller's ID
//     would enqueue first and have the other's work dropped. Set j.ID
//     then: [ScopedID](caller, d.ID) keeps one job per caller's logical
//     request however often it is handed over, and callers cannot collide;
//     Handoff returns an error wrapping ErrInvalid when j.ID is empty;
//   - Attempts: d.Attempt, the attempts made so far (the current one
//     counts), so the job's attempts count on from them: its first claim
//     is attempt d.Attempt+1;
//   - MaxAttempts: the smaller of j.MaxAttempts (what the queue allows,
//     counted like d's attempts, from the work's first) and d.MaxAttempts
//     (the work's budget), when they are set — so the job never gets more
//     attempts than the work has left;
//   - Deadline: at most d.Deadline, when d has one.
//
// It returns an error wrapping ErrInvalid when d has no attempt left.
func Handoff(d retry.Delivery, j NewJob) (NewJob, error) {
	if d.MaxAttempts > 0 {
		if d.Attempt >= d.MaxAttempts {
			return j, fmt.Errorf("%w: the work has no attempt left (%d of %d made)", ErrInvalid, d.Attempt, d.MaxAttempts)
		}
		if j.MaxAttempts == 0 || j.MaxAttempts > d.MaxAttempts {
			j.MaxAttempts = d.MaxAttempts
		}
	}
	if d.Attempt > 0 {
		j.Attempts = max(j.Attempts, d.Attempt)
		if j.MaxAttempts > 0 && j.Attempts >= j.MaxAttempts {
			return j, fmt.Errorf("%w: the work has no attempt left under the job's max_attempts (%d of %d made)", ErrInvalid, j.Attempts, j.MaxAttempts)
		}
	}
	if j.ID == "" {
		if d.Source != "retry" && d.Source != "queue" {
			return j, fmt.Errorf("%w: the work's ID came from a client (source %q) and is not taken as a job ID; set NewJob.ID, e.g. to queue.ScopedID(caller, id)", ErrInvalid, d.Source)
		}
		j.ID = d.ID
	}
	if !d.Deadline.IsZero() {
		if ms := d.Deadline.UnixMilli(); j.Deadline == 0 || ms < j.Deadline {
			j.Deadline = ms
		}
	}
	return j, nil
}

// ScopedID returns a job ID for the logical request id within scope: a
// namespace the server controls and the client cannot choose, such as the
// authenticated caller or tenant. Two scopes never give the same job ID
// (the scope's length leads it: "<len(scope)>:<scope>:<id>"), so a client
// that sends another caller's request ID gets a job of its own. It returns
// an error wrapping ErrInvalid when scope or id is not a valid job ID
// (ValidateID) or the result is longer than MaxIDLen.
func ScopedID(scope, id string) (string, error) {
	if err := ValidateID(scope); err != nil {
		return "", fmt.Errorf("scope: %w", err)
	}
	if err := ValidateID(id); err != nil {
		return "", err
	}
	s := strconv.Itoa(len(scope)) + ":" + scope + ":" + id
	if len(s) > MaxIDLen {
		return "", fmt.Errorf("%w: the scoped id must be at most %d bytes, got %d", ErrInvalid, MaxIDLen, len(s))
	}
	return s, nil
}
