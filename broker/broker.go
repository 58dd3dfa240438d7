// Package broker holds what the broker adapters (broker/rabbitmq,
// broker/kafka, broker/jetstream) share: the headers a message carries
// between attempts, the delay tiers, and [Processor], which runs a
// [retry.Handler] on one delivery and turns its error into what the broker
// must do next — acknowledge, park the message in a delay tier for d, or
// dead-letter it — by calling the one retry decision, [retry.Policy.Decide].
//
// Nothing here waits: a broker adapter never sleeps in its consumer. The
// delay is the broker's job (a TTL queue, a paused retry topic,
// NakWithDelay), but for the RabbitMQ adapter's short retries: one due
// within its Options.WaitInPlace (10 ms by default, at most a second) is
// held in process, unacknowledged, and a timer hands it back to a handler
// goroutine when it is due, as a wait queue's round trip takes longer
// than so short a wait. Nothing here reads the wall clock either: the
// adapter passes a clock in.
//
// Error classes map to broker actions as follows:
//
//   - nil: acknowledge.
//   - [retry.Retryable], [retry.After](d): Decide; retry → park for the
//     decided delay (After raises it to at least d); give-up (exhausted,
//     deadline, budget, pushback) → dead letter with that reason.
//   - [retry.Permanent]: dead letter at once, reason "permanent".
//   - unknown (no class, and Policy.Classify gives none): dead letter at
//     once, reason "unknown", with the error text. A broker has no caller to
//     hand an unknown error back to; requeueing it would redeliver it at once
//     in a loop (a thundering herd) and leaving it unacknowledged
//     blocks a prefetch slot and loops the same way after a reconnect. The
//     dead-letter queue keeps it visible and replayable without pretending it
//     was retried. Set Policy.Classify to make unknown errors retryable.
package broker

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/internal/wire"
	"github.com/staggerhq/stagger/retry"
)

// Header names the adapters write on forwarded and dead-lettered messages.
// Times are absolute Unix milliseconds, durations whole milliseconds, both in
// decimal, so every consumer reads them the same way.
const (
	// HeaderAttempt is the number of attempts made so far (our own count:
	// RabbitMQ's x-death changed meaning in 3.13).
	HeaderAttempt = "x-stagger-attempt"
	// HeaderDelay is the delay decided after the last failure (the
	// schedule's prev).
	HeaderDelay = "x-stagger-delay"
	// HeaderDue is the time before which the message must not be handled.
	HeaderDue = "x-stagger-due"
	// HeaderFirstAttempt is when the first attempt started: the base of
	// Policy.Timeout's deadline.
	HeaderFirstAttempt = "x-stagger-first-attempt"
	// HeaderFirstFailure is when the first attempt failed.
	HeaderFirstFailure = "x-stagger-first-failure"
	// HeaderDeadline is when the work must be done by (Unix ms), carried
	// from the producer's ledger.
	HeaderDeadline = "x-stagger-deadline"
	// HeaderError is the last attempt's error text, at most MaxErrorLen bytes.
	HeaderError = "x-stagger-error"
	// HeaderReason is why the message was dead-lettered (retry.Reason's
	// name: "permanent", "exhausted", "unknown", "deadline", "budget",
	// "pushback"; "malformed" for stagger headers that do not parse or a
	// due time that fails State.CheckDue; or an adapter's own, such as
	// "max_deliveries").
	HeaderReason = "x-stagger-reason"
	// HeaderOrigin is the message's original destination (exchange and
	// routing key, topic/partition/offset, stream subject).
	HeaderOrigin = "x-stagger-origin"
	// HeaderID carries the message ID where the broker has no field for it.
	HeaderID = "x-stagger-id"
	// HeaderMaxAttempts is the work's attempt budget, carried from the
	// producer's ledger: the highest attempt number any consumer may make
	// for it. A consumer's Processor makes at most min(this, its Policy's
	// MaxAttempts).
	HeaderMaxAttempts = "x-stagger-max-attempts"
)

// The W3C Trace Context headers (W3C Recommendation "Trace Context"), as a
// producer's tracing writes them: not stagger's own, so every adapter copies
// them unchanged onto each retry, dead letter and redrive of a message, and
// Processor.WithTrace reads them for the handler.
const (
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
)

// HeaderState carries a retry's state in one header on the messages an
// adapter forwards between attempts (a RabbitMQ wait queue, a Kafka retry
// topic), in place of the separate headers Encode writes, which stay the
// form of dead letters. Headers are most of a small message and much of what
// a broker and its clients spend on it. The value is ASCII:
//
//	1 <attempts> <delay ms> <due ms> <first attempt ms> <first failure ms>[ <adapter's fields>][\n<last error>]
//	2 <attempts> <delay ms> <due ms> <first attempt ms> <first failure ms> <deadline ms>[ <adapter's fields>][\n<last error>]
//	3 <attempts> <delay ms> <due ms> <first attempt ms> <first failure ms> <deadline ms> <max attempts>[ <adapter's fields>][\n<last error>]
//
// times in Unix milliseconds, 0 for unset. Version 2 is written only for a
// state with a deadline and version 3 only for one with an attempt budget
// (State.MaxAttempts), so consumers that read only version 1 keep working
// for every other message. internal/brokerwire holds its codec.
const HeaderState = "x-stagger-state"

// MaxErrorLen bounds the error text copied into HeaderError.
const MaxErrorLen = 1024

// ErrInvalid is wrapped by every validation error of this package and of the
// adapters; the message names the field and the rule.
var ErrInvalid = errors.New("broker: invalid configuration")

// Tiers are the delays of a broker's retry stages, shortest first: one
// RabbitMQ wait queue or one Kafka retry topic per tier.
type Tiers []time.Duration

// DefaultTiers is the default cascade: 10 s, 1 min, 10 min (then the DLQ).
var DefaultTiers = Tiers{10 * time.Second, time.Minute, 10 * time.Minute}

// MaxTier is the longest tier accepted (RabbitMQ's x-message-ttl is a 32-bit
// millisecond count; a day is far inside it).
const MaxTier = 24 * time.Hour

// Validate requires at least one tier, each a whole number of milliseconds in
// [1ms, MaxTier], strictly increasing.
func (t Tiers) Validate() error {
	if len(t) == 0 {
		return fmt.Errorf("%w: Tiers must list at least one delay", ErrInvalid)
	}
	for i, d := range t {
		switch {
		case d < time.Millisecond || d > MaxTier:
			return fmt.Errorf("%w: Tiers[%d] must be in [1ms, %v], got %v", ErrInvalid, i, MaxTier, d)
		case d%time.Millisecond != 0:
			return fmt.Errorf("%w: Tiers[%d] must be whole milliseconds, got %v", ErrInvalid, i, d)
		case i > 0 && d <= t[i-1]:
			return fmt.Errorf("%w: Tiers must increase strictly, got Tiers[%d]=%v after %v", ErrInvalid, i, d, t[i-1])
		}
	}
	return nil
}

// For returns the index of the tier a message that must wait d goes to: the
// first tier at least d long, so the broker never delivers it early. When d
// exceeds every tier it returns the last one; the message carries
// HeaderDue and is parked again when it comes back too soon.
func (t Tiers) For(d time.Duration) int {
	for i, td := range t {
		if td >= d {
			return i
		}
	}
	return len(t) - 1
}

// Name returns a short name for tier i, used in queue and topic names:
// "10s", "1m", "10m", "1h", "200ms", "1500ms".
func (t Tiers) Name(i int) string {
	return durationName(t[i])
}

// durationName writes d compactly for names: the largest of h, m, s, ms that
// divides it exactly.
func durationName(d time.Duration) string {
	switch {
	case d <= 0:
		return "0ms"
	case d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	case d%time.Second == 0:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
}

// CascadePolicy is the cascade policy over tiers: attempt n's failure waits
// tiers[n-1] (retry.10s → retry.1m → retry.10m), and the message is
// dead-lettered after len(tiers)+1 attempts. Adapters use it when no Policy
// is given.
func CascadePolicy(tiers Tiers) *retry.Policy {
	return &retry.Policy{
		MaxAttempts: len(tiers) + 1,
		Schedule:    backoff.Sequence(tiers),
		// A tier is the broker's wait, not a dependency's request: any
		// After(d) a handler returns is honoured up to the longest tier.
		MaxAfter:   tiers[len(tiers)-1],
		ClampAfter: true,
	}
}

// State is what travels with a message from one attempt to the next, in
// headers: see the Header constants.
type State struct {
	Attempts     int           // attempts made before this delivery
	Prev         time.Duration // delay decided after the last failure
	Due          time.Time     // not to be handled before (zero: now)
	FirstAttempt time.Time     // when attempt 1 started
	FirstFailure time.Time     // when attempt 1 failed
	Error        string        // last error text
	Reason       string        // dead letters only
	Origin       string        // original destination
	// MaxAttempts is the work's attempt budget (0: none), carried from the
	// producer's ledger (StateFrom) unchanged on every forward: the
	// Processor makes at most min(MaxAttempts, its Policy's) attempts,
	// counted on from Attempts.
	MaxAttempts int
	// Deadline is when the work must be done by (zero: none), carried from
	// the producer's ledger (StateFrom) unchanged on every forward; the
	// Processor also applies Policy.Timeout from FirstAttempt. A delivery
	// after it is dead-lettered with reason "deadline" unhandled.
	Deadline time.Time
}

// StateFrom is the state a producer writes (State.Encode) on a message
// that carries on work whose ledger is d — a handler that hands its work
// to a broker: the attempts made so far, the attempt budget and the
// deadline, so the consumer continues with what is left rather than a
// fresh budget. The adapters' publishers write it from a context in one
// call.
func StateFrom(d retry.Delivery) State {
	return State{Attempts: d.Attempt, MaxAttempts: d.MaxAttempts, FirstAttempt: d.First, Deadline: d.Deadline}
}

// Encode writes s as headers through set, leaving out zero fields.
func (s State) Encode(set func(key, value string)) {
	var buf [160]byte
	s.EncodeBytes(buf[:0], func(k string, v []byte) { set(k, string(v)) })
}

// EncodeBytes is Encode for adapters whose header values are byte slices
// (Kafka's): the values are appended to buf, and set receives each key and
// a slice of the returned buffer holding its value. With room in buf for
// every value, the headers cost no allocation beyond buf itself.
func (s State) EncodeBytes(buf []byte, set func(key string, value []byte)) []byte {
	put := func(k string, start int) {
		set(k, buf[start:len(buf):len(buf)])
	}
	if s.Attempts > 0 {
		n := len(buf)
		buf = strconv.AppendInt(buf, int64(s.Attempts), 10)
		put(HeaderAttempt, n)
	}
	if s.MaxAttempts > 0 {
		n := len(buf)
		buf = strconv.AppendInt(buf, int64(s.MaxAttempts), 10)
		put(HeaderMaxAttempts, n)
	}
	if s.Prev > 0 {
		n := len(buf)
		buf = strconv.AppendInt(buf, s.Prev.Milliseconds(), 10)
		put(HeaderDelay, n)
	}
	for _, h := range [...]struct {
		k string
		t time.Time
	}{{HeaderDue, s.Due}, {HeaderFirstAttempt, s.FirstAttempt}, {HeaderFirstFailure, s.FirstFailure}, {HeaderDeadline, s.Deadline}} {
		if !h.t.IsZero() {
			n := len(buf)
			buf = strconv.AppendInt(buf, h.t.UnixMilli(), 10)
			put(h.k, n)
		}
	}
	for _, h := range [...]struct{ k, v string }{{HeaderError, s.Error}, {HeaderReason, s.Reason}, {HeaderOrigin, s.Origin}} {
		if h.v != "" {
			n := len(buf)
			buf = append(buf, h.v...)
			put(h.k, n)
		}
	}
	return buf
}

// DecodeState reads the headers written by Encode through get. Missing
// headers leave fields zero; a malformed one is an error naming it (a
// message from a foreign producer must not be retried forever on a garbage
// count).
func DecodeState(get func(key string) (string, bool)) (State, error) {
	var s State
	num := func(k string, lo int64) (int64, bool, error) {
		v, ok := get(k)
		if !ok || v == "" {
			return 0, false, nil
		}
		// The rule for every number from the wire (internal/wire): ASCII
		// digits only, checked for overflow.
		u, ok := wire.ParseUint(v, math.MaxInt64)
		n := int64(u)
		if !ok || n < lo {
			return 0, false, fmt.Errorf("broker: header %s must be an integer >= %d, got %s", k, lo, wire.QuoteShort(v))
		}
		return n, true, nil
	}
	n, ok, err := num(HeaderAttempt, 0)
	if err != nil {
		return s, err
	}
	if ok {
		if n > math.MaxInt32 { // an int on every platform
			return s, fmt.Errorf("broker: header %s must be <= %d, got %d", HeaderAttempt, math.MaxInt32, n)
		}
		s.Attempts = int(n)
	}
	if n, ok, err = num(HeaderMaxAttempts, 1); err != nil {
		return s, err
	} else if ok {
		// A budget from the wire is clamped, never trusted beyond what an
		// attempt number can be; the Processor bounds it by its Policy.
		s.MaxAttempts = int(min(n, wire.MaxAttempt))
	}
	if n, ok, err = num(HeaderDelay, 0); err != nil {
		return s, err
	} else if ok {
		s.Prev = time.Duration(min(n, int64(backoff.MaxDelay/time.Millisecond))) * time.Millisecond
	}
	var times [4]time.Time
	for i, k := range [...]string{HeaderDue, HeaderFirstAttempt, HeaderFirstFailure, HeaderDeadline} {
		if n, ok, err = num(k, 0); err != nil {
			return s, err
		} else if ok {
			times[i] = time.UnixMilli(n)
		}
	}
	s.Due, s.FirstAttempt, s.FirstFailure, s.Deadline = times[0], times[1], times[2], times[3]
	s.Error, _ = get(HeaderError)
	s.Error = wire.Cut(s.Error, MaxErrorLen)
	s.Reason, _ = get(HeaderReason)
	s.Origin, _ = get(HeaderOrigin)
	return s, nil
}

// MaxClockSkew is how far the clocks of the consumers sharing a queue may
// disagree. See [State.CheckDue].
const MaxClockSkew = time.Hour

// CheckDue reports a due time no stagger consumer wrote: one further ahead
// of now than the delay decided with it (s.Prev, HeaderDelay) plus
// MaxClockSkew, such as a producer writing HeaderDue in nanoseconds. The
// error names HeaderDue. Such a message would otherwise wait out its due
// time — for ever, in practice — and in Kafka hold every retry behind it in
// its partition; the adapters dead-letter it with reason "malformed".
func (s State) CheckDue(now time.Time) error {
	if s.Due.IsZero() {
		return nil
	}
	if ahead := s.Due.Sub(now); ahead > MaxClockSkew && ahead-MaxClockSkew > s.Prev {
		return fmt.Errorf("broker: header %s is %v ahead, more than header %s (%v) plus MaxClockSkew (%v): not a due time in Unix milliseconds",
			HeaderDue, ahead, HeaderDelay, s.Prev, MaxClockSkew)
	}
	return nil
}

// DeadLetter is a dead-lettered message as an adapter reads it back from its
// DLQ.
type DeadLetter struct {
	ID      string // the message ID (HeaderID, or the broker's own field)
	Payload []byte // the original body, unchanged
	State          // Attempts, Error, Reason, Origin, FirstFailure …
}
