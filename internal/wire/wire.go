// Package wire is the one rule for values a client sends: attempt
// numbers, timeouts and request IDs read from HTTP headers, gRPC metadata
// and broker headers. Every server and consumer of stagger reads them
// through these functions, so they are parsed one way everywhere:
//
//   - a number is ASCII decimal digits only — no sign, no space, no
//     exponent, no "0x" — checked for overflow before it is used;
//   - an attempt number is in [1, MaxAttempt]; anything else is
//     unreadable and is not put in the handler's context;
//   - a timeout is clamped to the server's maximum (DefaultMaxTimeout
//     unless the server sets one), and can only shorten the server's own
//     deadline, never extend it; 0 gives no deadline of the client's (the
//     server's own applies) rather than an expired one;
//   - a request ID is 1 to MaxIDLen bytes of printable ASCII; anything
//     else is treated as no ID.
//
// A value that breaks the rule never fails the request: it is ignored (and
// counted, where the server counts), and the server's own limits apply.
package wire

import (
	"math"
	"time"
)

// MaxAttempt is the largest attempt number accepted from the wire.
const MaxAttempt = 1 << 20

// MaxIDLen is the longest request ID accepted from the wire, in bytes
// (a queue job ID's limit, so a wire ID is always a valid job ID).
const MaxIDLen = 255

// DefaultMaxTimeout is the longest deadline a client's timeout can give a
// handler when the server sets no maximum of its own.
const DefaultMaxTimeout = 5 * time.Minute

// maxDigits bounds the length of a number's text: longer text is not read
// at all, so a 1 MiB header costs nothing to refuse.
const maxDigits = 32

// digits reads v as a decimal integer of ASCII digits. It returns the
// value saturated at math.MaxUint64 (over reports the saturation), and
// ok false when v is empty, longer than maxDigits or holds anything but
// digits.
func digits(v string) (n uint64, over, ok bool) {
	if v == "" || len(v) > maxDigits {
		return 0, false, false
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, false, false
		}
		d := uint64(c - '0')
		if over || n > (math.MaxUint64-d)/10 {
			over = true
			continue
		}
		n = n*10 + d
	}
	return n, over, true
}

// ParseUint reads v as a decimal integer in [0, max]: ASCII digits only,
// checked for overflow. ok is false for anything else.
func ParseUint(v string, max uint64) (uint64, bool) {
	n, over, ok := digits(v)
	if !ok || over || n > max {
		return 0, false
	}
	return n, true
}

// ParseAttempt reads an attempt number (1, 2, …): a decimal integer in
// [1, MaxAttempt].
func ParseAttempt(v string) (int, bool) {
	n, ok := ParseUint(v, MaxAttempt)
	if !ok || n == 0 {
		return 0, false
	}
	return int(n), true
}

// ParsePreviousAttempts reads a count of attempts made before this one
// (gRPC's grpc-previous-rpc-attempts) and returns this attempt's number:
// the count plus one, in [1, MaxAttempt].
func ParsePreviousAttempts(v string) (int, bool) {
	n, ok := ParseUint(v, MaxAttempt-1)
	if !ok {
		return 0, false
	}
	return int(n) + 1, true
}

// MaxTimeout returns the server's bound on a client's timeout: max, or
// DefaultMaxTimeout when max is 0 or negative.
func MaxTimeout(max time.Duration) time.Duration {
	if max <= 0 {
		return DefaultMaxTimeout
	}
	return max
}

// ParseTimeoutMs reads a timeout in whole milliseconds and clamps it to
// MaxTimeout(max): a huge value — even one beyond any integer type — is the
// server's maximum, never longer. ok is false when v is not a decimal
// integer, and for 0: a caller with no time left gets no deadline of its
// own rather than an expired one (the server's own deadline applies).
func ParseTimeoutMs(v string, max time.Duration) (time.Duration, bool) {
	n, over, ok := digits(v)
	if !ok || n == 0 {
		return 0, false
	}
	max = MaxTimeout(max)
	if over || n >= uint64(max/time.Millisecond) {
		return max, true
	}
	return time.Duration(n) * time.Millisecond, true
}

// Deadline returns the deadline a handler gets from now: the earlier of
// own (the server's own deadline; ok false: none) and now plus timeout
// clamped to MaxTimeout(max). It reports false when own is already the
// earlier, so the context needs no new deadline.
func Deadline(now time.Time, timeout, max time.Duration, own time.Time, hasOwn bool) (time.Time, bool) {
	dl := now.Add(min(timeout, MaxTimeout(max)))
	if hasOwn && !dl.Before(own) {
		return own, false
	}
	return dl, true
}

// ValidID reports whether id can be used as a request ID: 1 to MaxIDLen
// bytes of printable ASCII (0x20 to 0x7e). Anything else — empty, too
// long, control characters, bytes above 0x7e (so invalid UTF-8 too) — is
// treated as no ID.
func ValidID(id string) bool {
	if id == "" || len(id) > MaxIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}
