// Package brokerwire is what the broker adapters (broker/rabbitmq,
// broker/kafka, broker/jetstream) share and adopters of package broker do
// not need: the codec of the one-header state (broker.HeaderState), the
// recognition of stagger's state headers, and the error text a header
// carries.
package brokerwire

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/internal/wire"
)

// compactVersion is the first field of broker.HeaderState; compactDeadline the
// one of a state with a deadline.
const (
	compactVersion  = '1'
	compactDeadline = '2'
	compactBudget   = '3'
)

// AppendCompact appends s as a broker.HeaderState value to buf: the five numbers,
// then extra (an adapter's own space-separated fields, no newline; empty
// for none), then s.Error after a newline. Reason and Origin are not
// written: a forwarded message has no reason, and an adapter that keeps the
// origin writes it in extra.
func AppendCompact(buf []byte, s broker.State, extra func([]byte) []byte) []byte {
	ms := func(t time.Time) int64 {
		if t.IsZero() {
			return 0
		}
		return t.UnixMilli()
	}
	version := byte(compactVersion)
	if !s.Deadline.IsZero() {
		version = compactDeadline
	}
	if s.MaxAttempts > 0 {
		version = compactBudget
	}
	buf = append(buf, version, ' ')
	buf = strconv.AppendInt(buf, int64(s.Attempts), 10)
	for _, n := range [...]int64{s.Prev.Milliseconds(), ms(s.Due), ms(s.FirstAttempt), ms(s.FirstFailure)} {
		buf = append(buf, ' ')
		buf = strconv.AppendInt(buf, n, 10)
	}
	if version >= compactDeadline {
		buf = append(buf, ' ')
		buf = strconv.AppendInt(buf, ms(s.Deadline), 10)
	}
	if version == compactBudget {
		buf = append(buf, ' ')
		buf = strconv.AppendInt(buf, int64(s.MaxAttempts), 10)
	}
	if extra != nil {
		buf = append(buf, ' ')
		buf = extra(buf)
	}
	if s.Error != "" {
		buf = append(buf, '\n')
		buf = append(buf, s.Error...)
	}
	return buf
}

// ParseCompact reads a broker.HeaderState value written by AppendCompact
// and returns the state and the adapter's fields (nil when there are none).
// An error names broker.HeaderState and the field that does not parse.
func ParseCompact(v []byte) (broker.State, []byte, error) {
	var s broker.State
	line, errText, _ := bytes.Cut(v, []byte{'\n'})
	if len(line) < 2 || line[0] < compactVersion || line[0] > compactBudget || line[1] != ' ' {
		return s, nil, CompactError(v, "the version (want 1, 2 or 3)")
	}
	rest := line[2:]
	var nums [7]int64
	names := [...]string{"attempts", "delay", "due", "first attempt", "first failure", "deadline", "max attempts"}
	count := 5 + int(line[0]-compactVersion)
	for i := range count {
		tok := rest
		sp := bytes.IndexByte(rest, ' ')
		if sp >= 0 {
			tok, rest = rest[:sp], rest[sp+1:]
		} else {
			rest = nil
		}
		n, ok := ParseDecimal(tok)
		switch {
		case !ok:
			return s, nil, CompactError(v, names[i])
		case sp < 0 && i < count-1:
			return s, nil, CompactError(v, names[i+1])
		}
		nums[i] = n
	}
	if nums[0] > math.MaxInt32 { // an int on every platform
		return s, nil, CompactError(v, "attempts")
	}
	s.Attempts = int(nums[0])
	if nums[6] > math.MaxInt32 {
		return s, nil, CompactError(v, "max attempts")
	}
	s.MaxAttempts = int(nums[6])
	s.Prev = time.Duration(min(nums[1], int64(backoff.MaxDelay/time.Millisecond))) * time.Millisecond
	var times [4]time.Time
	for i, n := range nums[2:6] {
		if n > 0 {
			times[i] = time.UnixMilli(n)
		}
	}
	s.Due, s.FirstAttempt, s.FirstFailure, s.Deadline = times[0], times[1], times[2], times[3]
	if len(errText) > 0 {
		s.Error = wire.Cut(string(errText), broker.MaxErrorLen)
	}
	return s, rest, nil
}

// CompactError is the error for a broker.HeaderState value v whose field
// does not parse.
func CompactError(v []byte, field string) error {
	return fmt.Errorf("broker: header %s: %s does not parse in %s", broker.HeaderState, field, wire.QuoteShort(string(v)))
}

// ParseDecimal parses a decimal int64 >= 0 without allocating.
func ParseDecimal(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var n int64
	for _, ch := range b {
		if ch < '0' || ch > '9' {
			return 0, false
		}
		n = n*10 + int64(ch-'0')
		if n < 0 {
			return 0, false
		}
	}
	return n, true
}

// IsStateHeader reports whether key is one of the headers State.Encode
// writes, or HeaderState. An adapter copying a message's headers onto a forward or a dead
// letter drops these and encodes the new State: a stale or malformed one
// must not survive the copy.
func IsStateHeader(key string) bool {
	switch key {
	case broker.HeaderAttempt, broker.HeaderDelay, broker.HeaderDue, broker.HeaderFirstAttempt, broker.HeaderFirstFailure,
		broker.HeaderError, broker.HeaderReason, broker.HeaderOrigin, broker.HeaderState, broker.HeaderDeadline, broker.HeaderMaxAttempts:
		return true
	}
	return false
}

// ErrorText is err's text cut to broker.MaxErrorLen bytes (on a rune
// boundary).
func ErrorText(err error) string {
	if err == nil {
		return ""
	}
	return wire.Cut(err.Error(), broker.MaxErrorLen)
}
