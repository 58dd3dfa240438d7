// Package budget decides whether a retry may happen at all.
//
// A cap on attempts per request still multiplies load during an outage: with
// 3 attempts, every request becomes 3. A budget bounds retries across all
// requests to one dependency instead, so that a healthy service retries its
// rare failures and a failing one stops adding load. One Budget is meant to be
// shared by every request to the same dependency (a budget per request never
// allows a retry); all implementations here are safe for concurrent use and
// lock-free on the path an original request takes.
//
// Nothing here reads the clock: callers pass now, so the simulator can drive
// the same code in virtual time.
package budget

import (
	"errors"
	"time"
)

// ErrInvalid is wrapped by configuration errors; the message names the field.
var ErrInvalid = errors.New("budget: invalid configuration")

// Budget is the contract between a retry driver and a retry budget.
//
// A driver calls Request before each original attempt (it may be refused only
// by throttling budgets such as [Adaptive] and by an open [CircuitBreaker]), Retry before each retry (a true
// answer charges the budget), and Result after each attempt with ok reporting
// whether the dependency served it (false for overload-like failures:
// timeouts, 5xx, refused connections).
type Budget interface {
	Request(now time.Time) bool
	Retry(now time.Time) bool
	Result(now time.Time, ok bool)
}
