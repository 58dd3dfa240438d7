// Package retry runs an operation again when it fails in a way worth
// retrying — and stops, saying why, when it should not.
//
// Errors carry one of three classes: [Permanent] stops at once, [Retryable]
// and [After] may be retried, and an error of no class is returned to the
// caller without a retry (unless Policy.Classify says otherwise). The same
// vocabulary is used by every stagger driver: the durable queue, the HTTP
// transport and the broker adapters, so a handler written for [Do] works
// unchanged in all of them.
//
// One decision function, [Policy.Decide], holds every rule (attempt count,
// schedule, pushback cap, deadline, budget); [Do] is the in-process driver
// that waits with a reused timer.
package retry

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/budget"
	"github.com/staggerhq/stagger/limit"
)

// Defaults used for zero fields of a Policy.
const (
	// DefaultMaxAttempts is the attempt count (the first try included).
	DefaultMaxAttempts = 3
	// DefaultMaxAfter caps a dependency's requested wait (Retry-After).
	DefaultMaxAfter = time.Minute
)

// defaultSchedule is the schedule of a Policy without one.
var defaultSchedule backoff.Schedule = backoff.Exponential{
	Base:   100 * time.Millisecond,
	Cap:    10 * time.Second,
	Jitter: backoff.Full,
}

// Policy says how to retry. The zero value is usable: 3 attempts,
// exponential backoff from 100ms capped at 10s with full jitter, no timeouts, no budget, no limiter, pushback capped at one
// minute, the real clock and the runtime's random generator. A Policy may be
// shared by many goroutines; do not modify it while in use.
type Policy struct {
	// MaxAttempts counts attempts, the first one included (1 = never
	// retry); 0 means DefaultMaxAttempts.
	MaxAttempts int
	// Schedule gives the wait after each failure; nil means
	// backoff.Exponential{Base: 100ms, Cap: 10s, Jitter: backoff.Full}.
	Schedule backoff.Schedule
	// AttemptTimeout bounds each attempt; each attempt gets
	// min(AttemptTimeout, time left before the deadline). 0: none.
	AttemptTimeout time.Duration
	// Timeout bounds the whole operation, measured from the start of Do,
	// in addition to the context's deadline. 0: none.
	Timeout time.Duration
	// MaxAfter caps the wait an After error may ask for; 0 means
	// DefaultMaxAfter. A longer request gives up with ErrPushback unless
	// ClampAfter is set. Use backoff.MaxDelay to honour any request (the
	// deadline still applies).
	MaxAfter time.Duration
	// ClampAfter waits MaxAfter instead of giving up when a dependency asks
	// for longer.
	ClampAfter bool
	// Budget, if set, must allow every retry (and may throttle originals).
	// Share one Budget per dependency.
	Budget budget.Budget
	// Limiter, if set, must grant a slot before every attempt; the slot is
	// released when the attempt ends, before any wait.
	Limiter limit.Limiter
	// Classify decides the class of errors that carry none. nil leaves them
	// unknown: returned to the caller without a retry.
	Classify func(error) Class
	// Hooks observe attempts, retries and give-ups.
	Hooks Hooks
	// Clock supplies the time for decisions and the timers for waits;
	// nil means the real clock.
	Clock Clock
	// Rand is the random source for jitter; nil means the runtime's
	// lock-free generator.
	Rand rand.Source
}

var defaultPolicy Policy

func (p *Policy) maxAttempts() int {
	if p.MaxAttempts == 0 {
		return DefaultMaxAttempts
	}
	return p.MaxAttempts
}

func (p *Policy) schedule() backoff.Schedule {
	if p.Schedule == nil {
		return defaultSchedule
	}
	return p.Schedule
}

func (p *Policy) maxAfter() time.Duration {
	if p.MaxAfter == 0 {
		return DefaultMaxAfter
	}
	return p.MaxAfter
}

// Validate checks every field and names the first one that is wrong.
func (p *Policy) Validate() error {
	if p.MaxAttempts|int(p.AttemptTimeout)|int(p.Timeout)|int(p.MaxAfter) < 0 {
		return p.invalid()
	}
	if p.Schedule == nil {
		return nil
	}
	if c, ok := p.Schedule.(backoff.Constant); ok && c >= 0 {
		return nil // a valid constant, without a call
	}
	return p.validSchedule()
}

// invalid names the first numeric field that is out of range.
func (p *Policy) invalid() error {
	switch {
	case p.MaxAttempts < 0:
		return fmt.Errorf("%w: MaxAttempts must be >= 0 (0 means %d), got %d", ErrInvalid, DefaultMaxAttempts, p.MaxAttempts)
	case p.AttemptTimeout < 0:
		return fmt.Errorf("%w: AttemptTimeout must be >= 0 (0 means none), got %v", ErrInvalid, p.AttemptTimeout)
	case p.Timeout < 0:
		return fmt.Errorf("%w: Timeout must be >= 0 (0 means none), got %v", ErrInvalid, p.Timeout)
	case p.MaxAfter < 0:
		return fmt.Errorf("%w: MaxAfter must be >= 0 (0 means %v), got %v", ErrInvalid, DefaultMaxAfter, p.MaxAfter)
	}
	return nil
}

// validSchedule checks the Schedule, when it can say what is wrong.
func (p *Policy) validSchedule() error {
	var err error
	switch sc := p.Schedule.(type) { // the stock schedules first: no interface lookup
	case nil:
	case backoff.Constant:
		err = sc.Validate()
	case backoff.Exponential:
		err = sc.Validate()
	case interface{ Validate() error }:
		err = sc.Validate()
	}
	if err != nil {
		return fmt.Errorf("%w: Schedule: %w", ErrInvalid, err)
	}
	return nil
}
