package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/staggerhq/stagger/internal/wait"
	"github.com/staggerhq/stagger/internal/wire"
	"github.com/staggerhq/stagger/retry"
)

// Redrive moves dead letters back to where they came from (HeaderOrigin),
// at a bounded rate, so that the dependency that just recovered sees a ramp
// and not the whole DLQ at once. Each adapter provides a RedriveSource over
// its DLQ (rabbitmq.RedriveSource, kafka.RedriveSource,
// jetstream.RedriveSource); Redrive does the rest the same way for all:
//
//   - a dead letter is moved only if it matches RedriveOptions (reasons,
//     age); the others stay in the DLQ untouched;
//   - a move is a republish the broker confirmed, then the removal from the
//     DLQ: a crash in between leaves the message in both places (a
//     duplicate, never a loss);
//   - republishes are paced by Rate and Burst, and a run stops after Limit
//     moves;
//   - DryRun reports what would move and moves nothing.
//
// A redrive reads the dead letters that were in the DLQ when it began;
// messages dead-lettered meanwhile (a redriven message that fails again)
// are left for the next run.
func Redrive(ctx context.Context, src RedriveSource, opts RedriveOptions) (RedriveResult, error) {
	var res RedriveResult
	if src == nil {
		return res, fmt.Errorf("%w: RedriveSource must not be nil", ErrInvalid)
	}
	if err := opts.Validate(); err != nil {
		return res, err
	}
	now := time.Now
	if opts.Clock != nil {
		now = opts.Clock.Now
	}
	burst := max(opts.Burst, 1)
	interval := time.Duration(float64(time.Second) / opts.Rate)
	var (
		w   wait.Waiter
		tat time.Time // GCRA's theoretical arrival time of the next move
	)
	defer w.Stop()
	for opts.Limit == 0 || res.Matched < opts.Limit {
		m, err := src.Next(ctx)
		if errors.Is(err, io.EOF) {
			return res, nil
		}
		if err != nil {
			return res, fmt.Errorf("broker: redrive: read the DLQ: %w", err)
		}
		res.Read++
		dl := m.DeadLetter()
		if !opts.matches(dl, now()) {
			continue
		}
		if m.Destination() == "" {
			res.NoOrigin++ // nowhere to go back to: left in the DLQ
			continue
		}
		res.Matched++
		ev := RedriveEvent{DeadLetter: dl, To: m.Destination()}
		if opts.DryRun {
			if opts.Report != nil {
				opts.Report(ev)
			}
			continue
		}
		// Pace (GCRA): at most burst moves at once, then one per interval.
		t := now()
		if tat.Before(t) {
			tat = t
		}
		if wait := tat.Sub(t) - time.Duration(burst-1)*interval; wait > 0 {
			if err := w.Wait(ctx, opts.Clock, wait); err != nil {
				return res, err
			}
		}
		tat = tat.Add(interval)
		if err := m.Republish(ctx, opts.state(dl.State)); err != nil {
			return res, fmt.Errorf("broker: redrive %s to %s: %w (left in the DLQ)", wire.QuoteShort(dl.ID), ev.To, err)
		}
		if opts.AfterRepublish != nil {
			if err := opts.AfterRepublish(dl); err != nil {
				return res, fmt.Errorf("broker: redrive %s: stopped after the republish, before the removal: %w", wire.QuoteShort(dl.ID), err)
			}
		}
		if err := m.Remove(ctx); err != nil {
			return res, fmt.Errorf("broker: redrive %s: republished to %s, but not removed from the DLQ (it will be moved again: a duplicate): %w", wire.QuoteShort(dl.ID), ev.To, err)
		}
		res.Moved++
		ev.Moved = true
		if opts.Report != nil {
			opts.Report(ev)
		}
	}
	return res, nil
}

// MaxRedriveRate bounds RedriveOptions.Rate and Burst.
const MaxRedriveRate = 1e6

// RedriveOptions choose the dead letters Redrive moves and pace it.
type RedriveOptions struct {
	// Reasons, when not empty, selects the dead letters whose HeaderReason
	// is one of them ("permanent", "exhausted", "unknown", …).
	Reasons []string
	// MinAge and MaxAge, when not 0, select by age: the time since the
	// message first failed (HeaderFirstFailure). A dead letter without that
	// header matches only when both are 0.
	MinAge, MaxAge time.Duration
	// Rate is the most republishes per second, in (0, MaxRedriveRate].
	Rate float64
	// Burst is how many republishes may go at once before Rate applies
	// (0: 1), at most MaxRedriveRate.
	Burst int
	// Limit stops the run after this many matching dead letters (0: no
	// limit; with DryRun, that many are reported).
	Limit int
	// DryRun reports the dead letters that match, and where they would go,
	// without moving any.
	DryRun bool
	// KeepState republishes a message with its attempt count, first-attempt
	// and first-failure times and last error, so it has only the attempts
	// its policy has left (none, for an exhausted one: it is dead-lettered
	// again on its next failure) and Policy.Timeout still counts from its
	// first attempt. The default resets them: the message starts over as if
	// new. JetStream counts attempts by delivery, so a redriven message
	// there always starts at attempt 1.
	KeepState bool
	// Report, if set, receives each matching dead letter once it moved (or,
	// with DryRun, would move).
	Report func(RedriveEvent)
	// Clock paces the run and measures ages (nil: the real clock).
	Clock retry.Clock
	// AfterRepublish, if set, runs after a message was republished and the
	// broker confirmed it, before it is removed from the DLQ; an error ends
	// the run there, the message left in both places, as a crash at that
	// point would. It is the seam tests kill a redrive at.
	AfterRepublish func(DeadLetter) error
}

// Validate checks the options: Rate in (0, MaxRedriveRate], Burst and
// Limit >= 0, ages >= 0 with MinAge below MaxAge, no empty reason.
func (o RedriveOptions) Validate() error {
	switch {
	case math.IsNaN(o.Rate) || o.Rate <= 0 || o.Rate > MaxRedriveRate:
		return fmt.Errorf("%w: Rate must be in (0, %g] messages per second, got %v", ErrInvalid, MaxRedriveRate, o.Rate)
	case o.Burst < 0 || o.Burst > MaxRedriveRate:
		return fmt.Errorf("%w: Burst must be in [0, %g], got %d", ErrInvalid, MaxRedriveRate, o.Burst)
	case o.Limit < 0:
		return fmt.Errorf("%w: Limit must be >= 0, got %d", ErrInvalid, o.Limit)
	case o.MinAge < 0:
		return fmt.Errorf("%w: MinAge must be >= 0, got %v", ErrInvalid, o.MinAge)
	case o.MaxAge < 0:
		return fmt.Errorf("%w: MaxAge must be >= 0, got %v", ErrInvalid, o.MaxAge)
	case o.MaxAge > 0 && o.MaxAge <= o.MinAge:
		return fmt.Errorf("%w: MaxAge must be above MinAge (%v), got %v", ErrInvalid, o.MinAge, o.MaxAge)
	case slices.Contains(o.Reasons, ""):
		return fmt.Errorf("%w: Reasons must not hold an empty reason", ErrInvalid)
	}
	return nil
}

func (o *RedriveOptions) matches(dl DeadLetter, now time.Time) bool {
	if len(o.Reasons) > 0 && !slices.Contains(o.Reasons, dl.Reason) {
		return false
	}
	if o.MinAge == 0 && o.MaxAge == 0 {
		return true
	}
	if dl.FirstFailure.IsZero() {
		return false
	}
	age := now.Sub(dl.FirstFailure)
	return age >= o.MinAge && (o.MaxAge == 0 || age < o.MaxAge)
}

// state is the state a redriven message carries: none, or with KeepState
// its attempts and history without the dead-letter reason, a due time or
// the producer's attempt budget (a redrive grants the consumer's again).
func (o *RedriveOptions) state(st State) State {
	if !o.KeepState {
		return State{}
	}
	st.Reason, st.Due, st.MaxAttempts = "", time.Time{}, 0
	return st
}

// RedriveSource is a DLQ as an adapter reads it for Redrive.
type RedriveSource interface {
	// Next returns the next dead letter, or io.EOF once every dead letter
	// that was in the DLQ when the source was opened has been read.
	Next(ctx context.Context) (RedriveMessage, error)
}

// RedriveMessage is one dead letter read by a RedriveSource.
type RedriveMessage interface {
	// DeadLetter is the message as it was dead-lettered.
	DeadLetter() DeadLetter
	// Destination names where Republish sends it (its origin), for
	// reports; "" when the message names none (Redrive leaves it).
	Destination() string
	// Republish publishes the original payload and headers, with st as
	// its stagger state, to the message's origin and returns once the
	// broker confirmed it.
	Republish(ctx context.Context, st State) error
	// Remove deletes the message from the DLQ (after its Republish).
	Remove(ctx context.Context) error
}

// RedriveEvent is one matching dead letter of a Redrive.
type RedriveEvent struct {
	DeadLetter
	To    string // where it went, or would go
	Moved bool   // false in a dry run
}

// RedriveResult counts a Redrive's dead letters.
type RedriveResult struct {
	Read    int // read from the DLQ
	Matched int // matched the options (moved, or would be with DryRun)
	Moved   int // republished and removed from the DLQ
	// NoOrigin counts matching dead letters left in the DLQ because they
	// name no origin (a foreign message, or a record of a message the
	// broker no longer held).
	NoOrigin int
}
