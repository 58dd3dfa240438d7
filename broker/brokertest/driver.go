package brokertest

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retry/drivertest"
)

// Driver adapts a consumer built on a Processor to the suite: run
// delivers one message to the Processor it is given until the message is
// acknowledged, dead-lettered or left for redelivery, and returns the
// outcome (Outcome's, or a *drivertest.Kept with the attempts the message
// carries).
func Driver(name string, run func(ctx context.Context, pr *broker.Processor) error) drivertest.Driver {
	return drivertest.Driver{
		Name:      name,
		Keeps:     []retry.Reason{retry.Canceled},
		Uncounted: true, // an interrupted delivery goes back as it came
		Run: func(ctx context.Context, p *retry.Policy, attempt func(context.Context) error) error {
			pr := &broker.Processor{Policy: p, Source: "test",
				Handler: func(ctx context.Context, _ []byte) error { return attempt(ctx) }}
			return run(ctx, pr)
		},
	}
}

// Outcome is the suite's outcome of one Process result: done is false
// for a retry or a park (the message goes on); else err is nil for an
// ack, a *retry.Error for a dead letter and a *drivertest.Kept for a
// delivery left as it came.
func Outcome(o broker.Outcome) (err error, done bool) {
	switch {
	case o.Action == broker.Ack:
		return nil, true
	case o.Action == broker.Dead:
		if o.Reason == retry.UnknownError {
			return o.Err, true // as retry.Do returns it
		}
		return &retry.Error{Reason: o.Reason, Attempts: o.State.Attempts, Err: o.Err}, true
	case o.Interrupted:
		return &drivertest.Kept{Attempts: o.State.Attempts}, true
	}
	return nil, false
}

// consumerSkips are the drivers' suite's cases a consumer built by a
// Factory cannot run, and why.
var consumerSkips = map[string]string{
	"retry would start at the deadline": "its 30ms deadline is shorter than a real broker's round trips and delay tiers",
	"canceled during an attempt":        "the consumer runs on a context of its own, which the case cannot end; the Processor's run of the suite covers a consumer's shutdown",
	"own failure while canceled":        "the consumer runs on a context of its own, which the case cannot end; the Processor's run of the suite covers a consumer's shutdown",
	"canceled during a wait":            "the consumer runs on a context of its own, which the case cannot end; the Processor's run of the suite covers a consumer's shutdown",
	"panic frees the slot":              "a handler's panic on a consumer's goroutine ends the process; the Processor's run of the suite shows the slot freed before it goes on",
}

// Consumer adapts the consumer f builds — an adapter's own code, on a
// real broker — to the drivers' suite: each case publishes one message to
// a pipeline of its own whose handler runs the case's attempt under the
// case's policy, waits for the hooks to report a success or a give-up,
// and returns the outcome the broker holds: nil once the pipeline has
// settled after a success, else the dead letter's reason, attempts and
// error (a refusal's dead letter, which names only the reason's
// sentinel, carries no attempt's error). Cases run on real time, in
// parallel; those a consumer cannot run are skipped with the reason
// (consumerSkips).
func Consumer(name string, f Factory) drivertest.Driver {
	var n atomic.Int64
	prefix := uniquePrefix()
	return drivertest.Driver{
		Name:      name,
		RealTime:  true,
		ErrorText: true, // a dead letter carries the last error as text
		Skip:      consumerSkips,
		Run: func(ctx context.Context, p *retry.Policy, attempt func(context.Context) error) error {
			t, ok := drivertest.TB(ctx).(*testing.T)
			if !ok {
				return errors.New("brokertest: Consumer runs under drivertest.Run")
			}
			type end struct {
				ok bool
				e  retry.Event
			}
			ended := make(chan end, 1)
			report := func(ok bool) func(retry.Event) {
				return func(e retry.Event) {
					select {
					case ended <- end{ok, e}:
					default:
					}
				}
			}
			q := *p
			q.Hooks = p.Hooks.Join(retry.Hooks{OnSuccess: report(true), OnGiveUp: report(false)})
			id := fmt.Sprintf("%s-dt%d", prefix, n.Add(1))
			pl := f(t, Setup{Name: id, Policy: &q, Tiers: Tiers,
				Handler: func(ctx context.Context, _ []byte) error { return attempt(ctx) }})
			wctx, cancel := context.WithTimeout(ctx, waitLimit)
			defer cancel()
			if err := pl.Publish(wctx, id, []byte("case")); err != nil {
				return fmt.Errorf("publish: %w", err)
			}
			var got end
			select {
			case got = <-ended:
			case <-wctx.Done():
				return fmt.Errorf("no success or give-up reported: %w", wctx.Err())
			}
			if got.ok {
				if err := pl.Settle(wctx); err != nil {
					return fmt.Errorf("the broker did not settle after the success: %w", err)
				}
				return nil
			}
			dl, err := pl.NextDeadLetter(wctx)
			if err != nil {
				return fmt.Errorf("no dead letter after a %v give-up: %w", got.e.Reason, err)
			}
			var r retry.Reason
			if err := r.UnmarshalText([]byte(dl.Reason)); err != nil {
				return fmt.Errorf("dead letter: %w", err)
			}
			var last error
			if dl.Error != "" && (r.Err() == nil || dl.Error != r.Err().Error()) {
				last = errors.New(dl.Error)
			}
			if err := pl.Settle(wctx); err != nil {
				return fmt.Errorf("the broker did not settle after the dead letter: %w", err)
			}
			return &retry.Error{Reason: r, Attempts: dl.Attempts, Err: last}
		},
	}
}
