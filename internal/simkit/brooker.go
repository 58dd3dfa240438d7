package simkit

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/retry"
)

// Brooker2015Config is the optimistic-concurrency experiment of Marc
// Brooker's "Exponential Backoff And Jitter" (AWS Architecture Blog,
// 2015): N clients each update one shared row once; an update reads the
// row, then writes it conditionally, and the write fails if another write
// landed since the read. A failed client backs off and tries again (read
// and write) until its write lands.
//
// The model: an attempt is four network hops, each an independent
// |Normal(Delay, SD)|: request to the read, the read's answer, the write
// request, the write's answer. The read happens when its request reaches
// the row, the write when its request does; the write succeeds iff no
// write succeeded after the read (a write at the very instant of the read
// counts as seen by it). Writes reaching the row at the same instant are
// applied in schedule order. The client decides (retry.Policy.Decide) when
// the write's answer reaches it.
//
// With SD = 0 every surviving client moves in lockstep: round k is N−k+1
// attempts, of which one wins, so the calls are N(N+1)/2; round k takes
// 4·Delay, and the k-th wait is the schedule's b(k), so the last client
// finishes at 4·Delay·N + Σ_{k=1}^{N−1} b(k) for a deterministic schedule.
//
// The defaults follow the blog's simulator (aws-samples/
// aws-arch-backoff-simulator, backoff_simulator.py): hops of
// |Normal(10 ms, 2 ms)|, base 5 ms, cap 2 s, N = 10…190 step 10, 100 runs
// per point, and calls counted as writes. That simulator increments its
// attempt counter before it computes the wait, so its k-th wait is drawn
// from the window min(cap, base·2^k): the first retry's window is 2·base.
// With Counter "paper" (the default) expo, full and equal run
// backoff.Exponential with Base 2·base (min(cap, 2·base·2^(k−1)) is the
// same window), so at SD = 0 expo finishes at
// 40 ms·N + Σ_{k=1}^{N−1} min(2 s, 5 ms·2^k); with Counter "stagger" they
// run backoff.Exponential's own convention, whose first window is base.
// Decorrelated starts from sleep = base in both (backoff.Decorrelated
// raises a zero prev to Base).
type Brooker2015Config struct {
	NFrom, NTo, NStep int           // client counts N swept: NFrom, NFrom+NStep, … up to NTo
	Runs              int           // runs per N and strategy, averaged
	Delay, SD         time.Duration // one network hop: |Normal(Delay, SD)|
	Base, Cap         time.Duration // backoff base and cap of every strategy but "none"; Cap >= Base
	Strategies        []string      // of "none", "expo", "full", "equal", "decorrelated"; run in that order
	Counter           string        // "paper": the k-th window is min(cap, base·2^k); "stagger": min(cap, base·2^(k−1))
}

var brookerCounters = []string{"paper", "stagger"}

var brookerStrategies = []string{"none", "expo", "full", "equal", "decorrelated"}

// DefaultBrooker2015 returns the blog's numbers: N = 10…190 step 10, 100
// runs per point, hops of |Normal(10 ms, 2 ms)|, base 5 ms, cap 2 s.
func DefaultBrooker2015() Brooker2015Config {
	return Brooker2015Config{NFrom: 10, NTo: 190, NStep: 10, Runs: 100,
		Delay: 10 * time.Millisecond, SD: 2 * time.Millisecond, Base: 5 * time.Millisecond, Cap: 2 * time.Second,
		Strategies: brookerStrategies, Counter: "paper"}
}

// Params returns the scenario's parameters.
func (c *Brooker2015Config) Params() []*Param {
	return []*Param{
		intParam(&c.NFrom, "n-from", "smallest number of clients", 1, 100_000),
		intParam(&c.NTo, "n-to", "largest number of clients", 1, 100_000),
		intParam(&c.NStep, "n-step", "step between client counts", 1, 100_000),
		intParam(&c.Runs, "runs", "runs per point (averaged)", 1, 1_000_000),
		durParam(&c.Delay, "delay", "mean of one network hop", 0, time.Minute),
		durParam(&c.SD, "sd", "standard deviation of one network hop", 0, time.Minute),
		durParam(&c.Base, "base", "backoff base", time.Nanosecond, time.Hour),
		durParam(&c.Cap, "cap", "backoff cap", time.Nanosecond, 24*time.Hour),
		listParam(&c.Strategies, "strategy", "backoff strategies", brookerStrategies),
		choiceParam(&c.Counter, "counter", "attempt counter of expo, full and equal: paper (the k-th window is min(cap, base·2^k), as the blog's simulator) or stagger (backoff.Exponential: min(cap, base·2^(k−1)))", brookerCounters),
	}
}

func (c *Brooker2015Config) validate() error {
	if err := checkParams(c.Params()); err != nil {
		return err
	}
	switch {
	case c.NTo < c.NFrom:
		return invalid("n-to", "must be >= n-from (%d), got %d", c.NFrom, c.NTo)
	case c.Cap < c.Base:
		return invalid("cap", "must be >= base (%v), got %v", c.Base, c.Cap)
	case c.Delay == 0 && c.SD == 0:
		return invalid("delay", "must be > 0 when sd is 0: with instant hops every read and write coincide")
	}
	points := (c.NTo-c.NFrom)/c.NStep + 1
	if work := float64(points) * float64(c.Runs) * float64(len(c.Strategies)) * float64(c.NTo) * float64(c.NTo); work > 1e10 {
		return invalid("runs", "the sweep is too large: points × runs × strategies × n-to² = %.3g > 1e10 (the default is 3.4e8)", work)
	}
	return nil
}

// schedule returns the schedule of a strategy. With Counter "paper" the
// exponential strategies start from the window 2·base (capped), which is
// the blog simulator's min(cap, base·2^k) for the k-th wait.
func (c *Brooker2015Config) schedule(name string) backoff.Schedule {
	first := c.Base
	if c.Counter != "stagger" {
		first = min(c.Cap, 2*c.Base)
	}
	switch name {
	case "none":
		return backoff.Constant(0)
	case "expo":
		return backoff.Exponential{Base: first, Cap: c.Cap}
	case "full":
		return backoff.Exponential{Base: first, Cap: c.Cap, Jitter: backoff.Full}
	case "equal":
		return backoff.Exponential{Base: first, Cap: c.Cap, Jitter: backoff.Equal}
	}
	return backoff.Decorrelated{Base: c.Base, Cap: c.Cap}
}

// occRun is one run's outcome.
type occRun struct {
	calls      int64
	completion time.Duration
	events     uint64
}

type occClient struct {
	attempt int32
	prev    time.Duration
	read    time.Duration // when the current attempt's read reaches the row
}

const (
	evWrite  int32 = iota // a write request reaches the row
	evAnswer              // the write's answer reaches the client
	evRetry               // a retry's wait ended (only with a limiter)
)

// runOCC simulates n clients updating one row with policy p (whose Rand
// must be set); net draws the hop delays.
func runOCC(n int, delay, sd time.Duration, p *retry.Policy, net *rand.Rand, e *Engine) occRun {
	d := driver{p}
	e.Reset()
	cs := make([]occClient, n)
	mean, dev := float64(delay), float64(sd)
	hop := func() time.Duration {
		if dev == 0 {
			return delay
		}
		return time.Duration(math.Abs(mean + dev*net.NormFloat64()))
	}
	var res occRun
	attempt := func(id int32, at time.Duration) {
		c := &cs[id]
		c.attempt++
		c.read = at + hop()
		e.At(c.read+hop()+hop(), evWrite, id)
	}
	for id := range cs {
		attempt(int32(id), 0)
	}
	last := time.Duration(math.MinInt64) // when the last successful write landed
	won := make([]bool, n)
	for {
		ev, ok := e.Next()
		if !ok {
			break
		}
		id := ev.ID
		c := &cs[id]
		now := e.Now()
		switch ev.Kind {
		case evWrite:
			res.calls++
			won[id] = last <= c.read
			if won[id] {
				last = now
			}
			e.At(now+hop(), evAnswer, id)
		case evAnswer:
			var err error
			if !won[id] {
				err = ErrConflict
			}
			dec := d.end(e.Time(), int(c.attempt), err, time.Time{}, c.prev)
			switch {
			case err == nil, !dec.Retry:
				res.completion = max(res.completion, now)
			case d.needsSendEvent():
				c.prev = dec.Delay
				e.After(dec.Delay, evRetry, id)
			default:
				c.prev = dec.Delay
				attempt(id, now+dec.Delay)
			}
		case evRetry:
			if d.again() != retry.NoReason {
				res.completion = max(res.completion, now)
				continue
			}
			attempt(id, now)
		}
	}
	res.events = e.Processed()
	return res
}

// Run sweeps N for each strategy, averaging Runs runs per point.
func (c *Brooker2015Config) Run(ctx context.Context, o Options) (*Result, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	strategies := selected(brookerStrategies, c.Strategies)
	var ns []int
	for n := c.NFrom; n <= c.NTo; n += c.NStep {
		ns = append(ns, n)
	}
	total := len(strategies) * len(ns) * c.Runs
	runs := make([]occRun, total)
	engines := make(chan *Engine, 64)
	err := parallel(ctx, o, total, func(i int) {
		si, rest := i/(len(ns)*c.Runs), i%(len(ns)*c.Runs)
		ni, r := rest/c.Runs, rest%c.Runs
		s := strategies[si]
		p := &retry.Policy{MaxAttempts: math.MaxInt, Schedule: c.schedule(brookerStrategies[s])}
		p.Rand = pcg(o.Seed, uint64(s), uint64(ns[ni]), uint64(r), 1)
		net := rand.New(pcg(o.Seed, uint64(s), uint64(ns[ni]), uint64(r), 2))
		var e *Engine
		select {
		case e = <-engines:
		default:
			e = NewEngine(ns[ni])
		}
		runs[i] = runOCC(ns[ni], c.Delay, c.SD, p, net, e)
		select {
		case engines <- e:
		default:
		}
	})
	if err != nil {
		return nil, err
	}
	res := &Result{
		Scenario: "brooker2015",
		Title:    fmt.Sprintf("N clients update one row with optimistic concurrency; mean of %d runs per point", c.Runs),
		Settings: settings(c.Params(), o),
		Table: Table{Columns: []Column{
			{Key: "strategy", Title: "strategy"},
			{Key: "clients", Title: "clients"},
			{Key: "calls", Title: "calls", Prec: 1},
			{Key: "calls_per_client", Title: "calls/client", Prec: 2},
			{Key: "completion_ms", Title: "completion ms", Prec: 1},
		}},
	}
	callsChart := Chart{Title: "calls vs clients", XLabel: "clients (N)", YLabel: "calls (mean)"}
	timeChart := Chart{Title: "completion time vs clients", XLabel: "clients (N)", YLabel: "completion (ms, mean, log scale)", LogY: true}
	for si, s := range strategies {
		name := brookerStrategies[s]
		cs, ts := Series{Name: name}, Series{Name: name}
		for ni, n := range ns {
			var calls int64
			var done time.Duration
			for r := range c.Runs {
				run := runs[(si*len(ns)+ni)*c.Runs+r]
				calls += run.calls
				done += run.completion
				res.Events += run.events
			}
			mc := float64(calls) / float64(c.Runs)
			mt := float64(done) / float64(c.Runs) / float64(time.Millisecond)
			res.Table.Rows = append(res.Table.Rows, []any{name, n, mc, mc / float64(n), mt})
			cs.Points = append(cs.Points, Point{float64(n), mc})
			ts.Points = append(ts.Points, Point{float64(n), mt})
		}
		callsChart.Series = append(callsChart.Series, cs)
		timeChart.Series = append(timeChart.Series, ts)
	}
	res.Charts = []Chart{callsChart, timeChart}
	return res, nil
}
