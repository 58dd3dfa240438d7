package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/staggerhq/stagger/internal/labkit"
)

// ErrInvalid is wrapped by every validation error of Run; the message
// names the field and the rule it broke.
var ErrInvalid = labkit.ErrInvalid

// Options configure [Run]. The zero value is the lab's default experiment:
// 4 callers starting 12 ms apart, a gateway down for the first 700 ms,
// "retry immediately" against exponential backoff with full jitter, peaks
// counted in 200 ms windows, seed 1 — what `stagger lab` runs with no flags.
type Options struct {
	// Callers is the number of callers, each one logical request retried
	// until accepted, in [1, 10000]; 0 means 4. Their starts are spread
	// over 48 ms.
	Callers int
	// Strategies are the strategies to run, one run each, by their
	// command-line names: immediate, constant, expo, expo-full,
	// expo-equal or decorrelated, each optionally followed by +budget,
	// +bulkhead, +breaker, +rate and +hedge (see docs/lab.md). Empty means
	// immediate and expo-full. The backoff base is 60 ms.
	Strategies []string
	// Outage is how long the gateway answers 503 from the start; 0 means
	// 700 ms and a negative value no outage.
	Outage time.Duration
	// Latency is how long the gateway takes to answer. 0 measures what this
	// machine adds to a retry cycle and makes up a round trip of 26.2 ms,
	// so that the default experiment's numbers hold on any machine.
	Latency time.Duration
	// Window is the width of the peak window and of the timeline's
	// buckets; 0 means DefaultWindow.
	Window time.Duration
	// Seed makes the jitter reproducible: the same seed draws the same
	// waits. 0 means 1, the seed of `stagger lab`.
	Seed uint64
}

// Result is what Run measured: one StrategyResult per strategy.
type Result struct {
	Strategies []StrategyResult // in the order of Options.Strategies
	runs       []*labkit.Result
}

// StrategyResult is what one strategy did: the gateway's counts and the
// callers' side of the story.
type StrategyResult struct {
	// Strategy is the strategy's name, e.g. "expo-full".
	Strategy string
	// Gateway is what the receiving side counted.
	Gateway Stats
	// Callers is the number of callers, Accepted those whose request was
	// accepted.
	Callers, Accepted int
	// GaveUp counts the callers that gave up, by reason (e.g. "budget").
	GaveUp map[string]int
	// DistinctWaits counts the distinct whole-millisecond waits the policy
	// chose before retries.
	DistinctWaits int
	// Mismatches lists every way the callers' and the gateway's records of
	// the attempts disagree; empty when each attempt was counted once on
	// each side with the same outcome.
	Mismatches []string
	// Elapsed is the run's wall time.
	Elapsed time.Duration
}

// Run runs the experiment of o once per strategy: a fresh gateway on
// 127.0.0.1 with the outage, the callers each retrying one logical request
// with a real retry.Policy built from the strategy, and every attempt
// counted on both sides. It takes about a second per strategy with the
// defaults. It returns an error wrapping ErrInvalid for bad options, or the
// run's error (ctx ending it, the gateway unable to listen).
func Run(ctx context.Context, o Options) (*Result, error) {
	sc, strategies, err := o.scenario()
	if err != nil {
		return nil, err
	}
	res := &Result{}
	for _, st := range strategies {
		k, err := sc.Run(ctx, st)
		if err != nil {
			return nil, fmt.Errorf("lab: %s: %w", st.Name, err)
		}
		gaveUp := map[string]int{}
		for reason, n := range k.GaveUp() {
			gaveUp[reason.String()] = n
		}
		res.runs = append(res.runs, k)
		res.Strategies = append(res.Strategies, StrategyResult{
			Strategy: st.Name, Gateway: k.Gateway,
			Callers: len(k.Callers), Accepted: k.CallersAccepted(), GaveUp: gaveUp,
			DistinctWaits: k.DistinctWaits(), Mismatches: k.Mismatches, Elapsed: k.Elapsed,
		})
	}
	return res, nil
}

// scenario turns the options into the lab's scenario and strategies, as
// `stagger lab` does with its flags.
func (o Options) scenario() (labkit.Scenario, []labkit.Strategy, error) {
	names := o.Strategies
	if len(names) == 0 {
		names = []string{"immediate", "expo-full"}
	}
	var strategies []labkit.Strategy
	for i, n := range names {
		st, err := labkit.ParseStrategy(n, labkit.StrategyOptions{})
		if err != nil {
			msg := strings.TrimPrefix(err.Error(), ErrInvalid.Error()+": ")
			return labkit.Scenario{}, nil, fmt.Errorf("%w: Strategies[%d] %q: %s", ErrInvalid, i, n, msg)
		}
		strategies = append(strategies, st)
	}
	sc := labkit.FourCallerOutage()
	if o.Callers != 0 {
		sc.Callers = o.Callers
	}
	switch {
	case o.Outage < 0:
		sc.Faults = labkit.Outage(0, 0)
	case o.Outage > 0:
		sc.Faults = labkit.Outage(o.Outage, 0)
	}
	if o.Latency < 0 {
		return labkit.Scenario{}, nil, fmt.Errorf("%w: Latency must be >= 0 (0 means a 26.2ms round trip), got %v", ErrInvalid, o.Latency)
	}
	if o.Latency != 0 {
		sc.Faults.Latency, sc.RoundTrip = o.Latency, 0
	}
	if o.Window != 0 {
		sc.Window = o.Window
	}
	if o.Seed != 0 {
		sc.Seed = o.Seed
	}
	if err := sc.Validate(); err != nil {
		return labkit.Scenario{}, nil, err
	}
	return sc, strategies, nil
}

// Check applies the lab's two checks to every strategy: a jittered
// strategy's waits must take at least 2 distinct values, and the callers
// and the gateway must agree on every attempt. It returns nil when both
// hold, or an error per failure (joined), naming the strategy.
func (r *Result) Check() error {
	var errs []error
	for _, k := range r.runs {
		errs = append(errs, k.Check())
	}
	return errors.Join(errs...)
}

// WriteReport writes the lab's HTML report of r to w: one self-contained
// page (inline SVG, no scripts, no network) with a side-by-side table and,
// per strategy, the attempts the gateway received per window over time,
// the outage shaded and the peak marked. subtitle is printed under the
// title (for example how and when the run was made).
func (r *Result) WriteReport(w io.Writer, subtitle string) error {
	return labkit.WriteReport(w, subtitle, r.runs, labkit.ReportOptions{})
}
