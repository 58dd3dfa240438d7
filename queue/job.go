package queue

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// State is where a job is in its life.
type State string

// The four states of a job. A job moves pending → leased (a claim) and from
// leased to done, back to pending (a retry, or a release at shutdown), or to
// dead; an operator's Requeue moves a dead job back to pending. A leased job
// whose lease expired is claimable again.
const (
	Pending State = "pending" // waiting for its available_at
	Leased  State = "leased"  // claimed by a worker until lease_until
	Done    State = "done"    // its handler succeeded
	Dead    State = "dead"    // quarantined, see DeadReason
)

// DeadReason says why a job was quarantined.
type DeadReason string

// The reasons a job is dead.
const (
	// Exhausted: attempts reached max_attempts (the last attempt failed, or
	// its lease expired with its outcome unknown).
	Exhausted DeadReason = "exhausted"
	// DeadlineReached: the next attempt could not start before the deadline
	// (now + delay >= deadline; equality counts as past).
	DeadlineReached DeadReason = "deadline"
	// PermanentFailure: the handler returned a Permanent error.
	PermanentFailure DeadReason = "permanent"
)

// Job is one unit of durable work. Every time is an absolute Unix time in
// milliseconds, read from the queue's injected clock, never a process-relative
// duration, so every worker on every host reads it the same way.
type Job struct {
	// ID identifies the job; enqueueing an existing ID returns the stored
	// job. IDs are unique across the queues of a store.
	ID string
	// Queue is the named queue the job belongs to (DefaultQueue when
	// none was given): only workers of that queue claim it.
	Queue string
	// Payload is handed to the handler.
	Payload []byte
	// Attempts counts claims: an attempt is spent when a worker claims the
	// job, before its handler runs, and is never given back.
	Attempts int
	// MaxAttempts is this job's attempt budget.
	MaxAttempts int
	// AvailableAt is the reservation "may be claimed from this time": the
	// next retry's time for a pending job, the lease expiry for a leased one.
	AvailableAt int64
	// Deadline is the time by which an attempt must have started; a retry
	// never extends it (only an operator's Requeue sets a new one).
	Deadline int64
	// State is pending, leased, done or dead.
	State State
	// DeadReason is set when State is Dead.
	DeadReason DeadReason
	// LastError is the message of the last failed attempt ("" when none).
	LastError string
	// LeaseUntil is the lease expiry of a leased job, 0 otherwise.
	LeaseUntil int64
	// CreatedAt, UpdatedAt and FinishedAt (done or dead; 0 otherwise).
	CreatedAt, UpdatedAt, FinishedAt int64
	// Trace is the trace context of the code that enqueued the job, as
	// Config.Trace injected it: the W3C traceparent, then a newline and
	// the tracestate when there is one; "" when none. Every attempt's
	// handler runs in that trace (Config.Trace extracts it as the handler starts).
	// Stores keep it as opaque text.
	Trace string
}

// DefaultQueue is the queue of jobs enqueued without one.
const DefaultQueue = "default"

// Limits on a job's fields.
const (
	// MaxQueueLen is the longest queue name in bytes.
	MaxQueueLen = 64
	// MaxIDLen is the longest job ID in bytes.
	MaxIDLen = 255
	// MaxLastErrorLen is the longest stored error message in bytes; longer
	// messages are truncated. Invalid UTF-8 and NUL bytes in a message are
	// stored as U+FFFD (PostgreSQL's text refuses them).
	MaxLastErrorLen = 2048
	// MaxMaxAttempts is the largest attempt budget a job may have.
	MaxMaxAttempts = 1_000_000
	// MaxPayloadLimit is the largest Config.MaxPayload.
	MaxPayloadLimit = 64 << 20
	// MaxTraceLen is the longest Job.Trace in bytes: a traceparent (55
	// bytes in version 00) and the 512 bytes of tracestate the W3C Trace
	// Context recommendation asks to propagate, with room to spare. A
	// longer tracestate is dropped, the traceparent kept.
	MaxTraceLen = 1024
)

// ValidateID reports whether id is a usable job ID: 1 to MaxIDLen bytes of
// valid UTF-8 without control characters.
func ValidateID(id string) error { return validText("id", id, MaxIDLen) }

// validText checks a text field: 1 to max bytes of valid UTF-8 without
// control characters; the error names the field.
func validText(field, s string, max int) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: %s must not be empty", ErrInvalid, field)
	case len(s) > max:
		return fmt.Errorf("%w: %s must be at most %d bytes, got %d", ErrInvalid, field, max, len(s))
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s must be valid UTF-8", ErrInvalid, field)
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%w: %s must not contain control characters", ErrInvalid, field)
		}
	}
	return nil
}

// ValidateQueue reports whether name is a usable queue name: 1 to
// MaxQueueLen bytes of ASCII letters, digits, '_', '-', '.' and ':'.
func ValidateQueue(name string) error {
	if name == "" || len(name) > MaxQueueLen {
		return fmt.Errorf("%w: queue name must be 1 to %d bytes, got %d", ErrInvalid, MaxQueueLen, len(name))
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-.:", r)) {
			return fmt.Errorf("%w: queue name %q: only ASCII letters, digits, '_', '-', '.' and ':' are allowed", ErrInvalid, name)
		}
	}
	return nil
}

// encodeTrace makes the Job.Trace of an injected trace context: "" when
// the traceparent is empty or not one line of printable ASCII (a broken
// propagator must not fail an enqueue), the tracestate dropped when it is
// not or makes the whole longer than MaxTraceLen.
func encodeTrace(parent, state string) string {
	if parent == "" || !printable(parent) || len(parent) > MaxTraceLen {
		return ""
	}
	if state == "" || !printable(state) || len(parent)+1+len(state) > MaxTraceLen {
		return parent
	}
	return parent + "\n" + state
}

// decodeTrace splits a Job.Trace into traceparent and tracestate.
func decodeTrace(t string) (parent, state string) {
	parent, state, _ = strings.Cut(t, "\n")
	return parent, state
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

// truncateError makes an error message storable: invalid UTF-8 and NUL
// bytes become U+FFFD (a text column of PostgreSQL refuses them, which
// would fail the whole commit the outcome is part of), and the result is
// bounded to MaxLastErrorLen bytes on a rune boundary.
func truncateError(s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	}
	if len(s) <= MaxLastErrorLen {
		return s
	}
	n := MaxLastErrorLen
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
