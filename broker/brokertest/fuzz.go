package brokertest

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/internal/brokerwire"
)

// StateOf maps arbitrary numbers, as a fuzzer produces them, onto a
// broker.State that the encoders (State.Encode, brokerwire.AppendCompact) must
// carry unchanged: attempts in [0, MaxInt32], a delay of whole
// milliseconds, times of whole milliseconds at or after the Unix epoch (a
// zero millisecond count is an unset time), and an error text of at most
// broker.MaxErrorLen bytes. Reason and Origin are left for the caller: not
// every encoding carries them.
func StateOf(attempts, prevMs, dueMs, firstAttemptMs, firstFailureMs, deadlineMs int64, errText string) broker.State {
	nonneg := func(n int64) int64 {
		if n < 0 {
			return -(n + 1)
		}
		return n
	}
	at := func(ms int64) time.Time {
		if ms = nonneg(ms); ms == 0 {
			return time.Time{}
		}
		return time.UnixMilli(ms)
	}
	st := broker.State{
		Attempts:     int(nonneg(attempts) % (math.MaxInt32 + 1)),
		Prev:         time.Duration(nonneg(prevMs)%(math.MaxInt64/int64(time.Millisecond)+1)) * time.Millisecond,
		Due:          at(dueMs),
		FirstAttempt: at(firstAttemptMs),
		FirstFailure: at(firstFailureMs),
		Deadline:     at(deadlineMs),
	}
	if errText != "" {
		st.Error = brokerwire.ErrorText(errors.New(errText))
	}
	return st
}

// DiffState describes how got differs from want, field by field ("" when
// they are the same state; times are compared as instants).
func DiffState(got, want broker.State) string {
	var d []string
	add := func(name string, g, w any) { d = append(d, fmt.Sprintf("%s %v, want %v", name, g, w)) }
	if got.Attempts != want.Attempts {
		add("Attempts", got.Attempts, want.Attempts)
	}
	if got.Prev != want.Prev {
		add("Prev", got.Prev, want.Prev)
	}
	for _, f := range [...]struct {
		name string
		g, w time.Time
	}{{"Due", got.Due, want.Due}, {"FirstAttempt", got.FirstAttempt, want.FirstAttempt},
		{"FirstFailure", got.FirstFailure, want.FirstFailure}, {"Deadline", got.Deadline, want.Deadline}} {
		if !f.g.Equal(f.w) {
			add(f.name, f.g, f.w)
		}
	}
	for _, f := range [...]struct{ name, g, w string }{
		{"Error", got.Error, want.Error}, {"Reason", got.Reason, want.Reason}, {"Origin", got.Origin, want.Origin}} {
		if f.g != f.w {
			add(f.name, fmt.Sprintf("%q", f.g), fmt.Sprintf("%q", f.w))
		}
	}
	return strings.Join(d, "; ")
}

// CheckDecoded reports a decoded state outside what a decoder may accept:
// attempts in [0, MaxInt32], a delay in [0, backoff.MaxDelay] of whole
// milliseconds, and an error text of at most broker.MaxErrorLen bytes.
func CheckDecoded(st broker.State) error {
	switch {
	case st.Attempts < 0 || st.Attempts > math.MaxInt32:
		return fmt.Errorf("attempts %d outside [0, %d]", st.Attempts, math.MaxInt32)
	case st.Prev < 0 || st.Prev%time.Millisecond != 0:
		return fmt.Errorf("delay %v is negative or not whole milliseconds", st.Prev)
	case len(st.Error) > broker.MaxErrorLen:
		return fmt.Errorf("error text of %d bytes, more than %d", len(st.Error), broker.MaxErrorLen)
	}
	for _, t := range [...]time.Time{st.Due, st.FirstAttempt, st.FirstFailure, st.Deadline} {
		if !t.IsZero() && t.Before(time.UnixMilli(0)) {
			return fmt.Errorf("time %v before the Unix epoch", t)
		}
	}
	return nil
}
