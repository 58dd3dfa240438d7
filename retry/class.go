package retry

import (
	"time"
)

// Class is what an error says about trying again.
type Class uint8

const (
	// ClassUnknown errors carry no class. They are returned to the caller without
	// a retry, never turned into success or quarantine — unless the policy's
	// Classify says otherwise.
	ClassUnknown Class = iota
	// ClassRetryable errors are worth another try (Retryable, After).
	ClassRetryable
	// ClassPermanent errors need a person to fix the content; retrying cannot help
	// (Permanent).
	ClassPermanent
)

// String returns "unknown", "retryable" or "permanent".
func (c Class) String() string {
	switch c {
	case ClassRetryable:
		return "retryable"
	case ClassPermanent:
		return "permanent"
	}
	return "unknown"
}

// classed is what Classify looks for in an error tree: an error that knows
// its own class (see Classify).
type classed interface {
	RetryClass() (c Class, after time.Duration)
}

type classified struct {
	err   error
	class Class
	after time.Duration
}

func (c *classified) Error() string                      { return c.err.Error() }
func (c *classified) Unwrap() error                      { return c.err }
func (c *classified) RetryClass() (Class, time.Duration) { return c.class, c.after }

// Permanent marks err as not worth retrying: the operation stops, and the
// error Do returns then satisfies errors.Is(_, ErrPermanent) and
// errors.Is(_, err). (The marked error itself wraps err, and Classify
// reports ClassPermanent for it.)
// Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &classified{err: err, class: ClassPermanent}
}

// Retryable marks err as transient: the policy may try again.
// Retryable(nil) is nil.
func Retryable(err error) error {
	if err == nil {
		return nil
	}
	return &classified{err: err, class: ClassRetryable}
}

// After marks err as transient with a minimum wait: the next attempt starts
// no sooner than d after this one failed (a Retry-After header or gRPC
// pushback). The policy caps d (Policy.MaxAfter). After(nil, d) is nil; a
// negative d counts as 0.
func After(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &classified{err: err, class: ClassRetryable, after: max(d, 0)}
}

// Classify returns the class of err and its requested minimum wait. It walks
// the error tree (Unwrap() error and Unwrap() []error) depth-first and the
// first error that knows its own class decides, so the outermost mark wins:
// Permanent(Retryable(e)) is permanent. It does not allocate.
//
// An error knows its own class when it has the method
//
//	RetryClass() (c Class, after time.Duration)
//
// where after is the dependency's requested minimum wait (Retry-After,
// pushback), 0 when none. Permanent, Retryable and After return such
// errors; adapters implement the method on their own error types instead
// of wrapping (retryhttp.StatusError does).
func Classify(err error) (Class, time.Duration) {
	if c, ok := err.(*classified); ok { // Retryable, Permanent, After: no interface lookup
		return c.class, c.after
	}
	for depth := 0; err != nil && depth < 64; depth++ {
		if c, ok := err.(classed); ok {
			return c.RetryClass()
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if c, d := Classify(e); c != ClassUnknown {
					return c, d
				}
			}
			return ClassUnknown, 0
		default:
			return ClassUnknown, 0
		}
	}
	return ClassUnknown, 0
}
