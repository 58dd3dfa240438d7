package retry

import (
	"context"
	"log/slog"
	"time"
)

// Event describes one step of a retry loop to a hook.
type Event struct {
	// Attempt is the attempt the event is about, counting from 1.
	Attempt int
	// Delay is the wait before the next attempt (OnRetry only).
	Delay time.Duration
	// Err is the attempt's error (OnRetry, OnGiveUp).
	Err error
	// Reason is why the loop stopped (OnGiveUp only).
	Reason Reason
}

// Hooks observe a retry loop. Each is optional and is called synchronously
// on the loop's goroutine, so keep them cheap.
type Hooks struct {
	// OnAttempt runs before each attempt starts (after its slot is taken).
	OnAttempt func(Event)
	// OnRetry runs when a failed attempt will be retried after Delay.
	OnRetry func(Event)
	// OnSuccess runs when an attempt succeeds.
	OnSuccess func(Event)
	// OnGiveUp runs when the loop stops without success. Attempt is the
	// number of attempts made (0 when none could start).
	OnGiveUp func(Event)
}

func (h *Hooks) attempt(n int) {
	if f := h.OnAttempt; f != nil {
		f(Event{Attempt: n})
	}
}

func (h *Hooks) success(n int) {
	if f := h.OnSuccess; f != nil {
		f(Event{Attempt: n})
	}
}

// Join returns hooks that call h's and then each of more's, in order
// (contrib/otel's metrics beside LogHooks, for example).
func (h Hooks) Join(more ...Hooks) Hooks {
	hs := append([]Hooks{h}, more...)
	var j Hooks
	pick := func(get func(Hooks) func(Event)) func(Event) {
		var fs []func(Event)
		for _, h := range hs {
			if f := get(h); f != nil {
				fs = append(fs, f)
			}
		}
		switch len(fs) {
		case 0:
			return nil
		case 1:
			return fs[0]
		}
		return func(e Event) {
			for _, f := range fs {
				f(e)
			}
		}
	}
	j.OnAttempt = pick(func(h Hooks) func(Event) { return h.OnAttempt })
	j.OnRetry = pick(func(h Hooks) func(Event) { return h.OnRetry })
	j.OnSuccess = pick(func(h Hooks) func(Event) { return h.OnSuccess })
	j.OnGiveUp = pick(func(h Hooks) func(Event) { return h.OnGiveUp })
	return j
}

// LogHooks logs retries at Debug level and give-ups at Warn level (Info for
// a canceled context) on l, with attributes attempt, delay, reason and
// error. name identifies the operation in every record.
func LogHooks(l *slog.Logger, name string) Hooks {
	return Hooks{
		OnRetry: func(e Event) {
			l.LogAttrs(context.Background(), slog.LevelDebug, "retry",
				slog.String("op", name), slog.Int("attempt", e.Attempt),
				slog.Duration("delay", e.Delay), slog.Any("error", e.Err))
		},
		OnGiveUp: func(e Event) {
			level := slog.LevelWarn
			if e.Reason == Canceled {
				level = slog.LevelInfo
			}
			l.LogAttrs(context.Background(), level, "retry gave up",
				slog.String("op", name), slog.Int("attempts", e.Attempt),
				slog.String("reason", e.Reason.String()), slog.Any("error", e.Err))
		},
	}
}
