package sim

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/budget"
	"github.com/staggerhq/stagger/retry"
)

// CollapseConfig is a metastable failure: a server whose latency grows
// with the work it holds (Latency + PerRequest × concurrency, fixed when an
// attempt arrives), clients that time out after Timeout and retry, and
// timeouts that do not cancel the server's work. Open-loop Poisson traffic
// at Rate, raised to SpikeRate for SpikeLen at SpikeAt. Below 1/PerRequest
// attempts per second the server is stable; a spike that pushes latency
// past the timeout turns every request into several attempts, and with
// plain retries the extra load can keep it there after the spike ends.
type CollapseConfig struct {
	Rate, SpikeRate   float64       // Poisson requests per second, normally and during the spike
	SpikeAt, SpikeLen time.Duration // when the spike starts and how long it lasts
	Duration          time.Duration // simulated time
	Latency           time.Duration // latency with nothing else in flight
	PerRequest        time.Duration // added latency per attempt in flight
	Timeout           time.Duration // client timeout per attempt; the server keeps working
	Attempts          int           // attempts per request, the first included
	Runs              int           // independent runs per strategy
	Strategies        []string      // of "no-backoff", "full-jitter", "budget"; run in that order
}

var collapseStrategies = []string{"no-backoff", "full-jitter", "budget"}

// DefaultCollapse returns 40 req/s, a spike to 80 req/s for 5 s at 20 s,
// 80 s, latency 1 s + 10 ms × concurrency, timeout 3 s, 3 attempts.
func DefaultCollapse() CollapseConfig {
	return CollapseConfig{Rate: 40, SpikeRate: 80, SpikeAt: 20 * time.Second, SpikeLen: 5 * time.Second,
		Duration: 80 * time.Second, Latency: time.Second, PerRequest: 10 * time.Millisecond,
		Timeout: 3 * time.Second, Attempts: 3, Runs: 20, Strategies: collapseStrategies}
}

// Params returns the scenario's parameters.
func (c *CollapseConfig) Params() []*Param {
	return []*Param{
		floatParam(&c.Rate, "rate", "Poisson requests per second", 0, 1e6),
		floatParam(&c.SpikeRate, "spike-rate", "requests per second during the spike", 0, 1e6),
		durParam(&c.SpikeAt, "spike-at", "when the spike starts", 0, 24*time.Hour),
		durParam(&c.SpikeLen, "spike-len", "how long the spike lasts", 0, 24*time.Hour),
		durParam(&c.Duration, "duration", "simulated time", time.Second, 24*time.Hour),
		durParam(&c.Latency, "latency", "server latency with nothing else in flight", 0, time.Hour),
		durParam(&c.PerRequest, "per-request", "latency added per attempt in flight at arrival", 0, time.Hour),
		durParam(&c.Timeout, "timeout", "client timeout per attempt (the server keeps working)", time.Millisecond, time.Hour),
		intParam(&c.Attempts, "attempts", "attempts per request, the first included", 1, 100),
		intParam(&c.Runs, "runs", "independent runs per strategy (the collapse is a matter of chance near the edge)", 1, 100_000),
		listParam(&c.Strategies, "strategy", "strategies", collapseStrategies),
	}
}

func (c *CollapseConfig) validate() error {
	if err := checkParams(c.Params()); err != nil {
		return err
	}
	if n := max(c.Rate, c.SpikeRate) * c.Duration.Seconds() * float64(c.Runs); n > 1e9 {
		return invalid("runs", "rate × duration × runs must be <= 1e9 requests, got %.3g", n)
	}
	return nil
}

func (c *CollapseConfig) policy(name string) *retry.Policy {
	p := &retry.Policy{MaxAttempts: c.Attempts, Schedule: retry.DefaultSchedule}
	switch name {
	case "no-backoff":
		p.Schedule = backoff.Constant(0)
	case "budget":
		p.Budget = &budget.TokenBucket{Empty: true} // one budget for the client fleet, earned from the start
	}
	return p
}

// rate returns the arrival rate at t.
func (c *CollapseConfig) rate(t time.Duration) float64 {
	if t >= c.SpikeAt && t < c.SpikeAt+c.SpikeLen {
		return c.SpikeRate
	}
	return c.Rate
}

// nextArrival returns the next Poisson arrival after t for the piecewise
// constant rate (or -1 when none comes before the end): an Exp(1) amount of
// "rate × time" is spent across the rate's segments.
func (c *CollapseConfig) nextArrival(t time.Duration, rng *rand.Rand) time.Duration {
	need := rng.ExpFloat64()
	for t < c.Duration {
		end := c.Duration
		switch {
		case t < c.SpikeAt:
			end = min(end, c.SpikeAt)
		case t < c.SpikeAt+c.SpikeLen:
			end = min(end, c.SpikeAt+c.SpikeLen)
		}
		r := c.rate(t)
		if r > 0 {
			if dt := need / r; t+time.Duration(dt*float64(time.Second)) < end {
				return t + time.Duration(math.Ceil(dt*float64(time.Second)))
			}
			need -= r * (end - t).Seconds()
		}
		t = end
	}
	return -1
}

type collapseRun struct {
	m                  *Meter
	timeouts, wasted   int64 // attempts the client gave up on; of those, the server finished after it
	peakConc           int64
	conc               []int64 // concurrency at the end of each second
	events             uint64
	originals, refused int64
}

type cReq struct {
	attempt int32
	prev    time.Duration
	start   time.Duration
}

type cAttempt struct {
	req      int32
	timedOut bool // the client stopped waiting
}

const (
	evNew       int32 = iota // a request arrives
	evFinish                 // the server finishes an attempt (ID: attempt)
	evGiveUpC                // the client's timeout fires (ID: attempt)
	evRetrySend              // a retry's wait ended, with a limiter (ID: request)
)

func (c *CollapseConfig) runOne(name string, seed uint64) collapseRun {
	p := c.policy(name)
	p.Rand = pcg(seed, 1)
	d := driver{p}
	rng := rand.New(pcg(seed, 2))
	e := NewEngine(1024)
	m := NewMeter(DefaultWindow, time.Second)
	out := collapseRun{m: m}
	var reqs []cReq
	var atts []cAttempt
	var conc int64
	arrive := func(id int32) { // an attempt of request id reaches the server now
		r := &reqs[id]
		r.attempt++
		m.Call(e.Now())
		conc++
		out.peakConc = max(out.peakConc, conc)
		lat := c.Latency + time.Duration(conc)*c.PerRequest
		atts = append(atts, cAttempt{req: id})
		aid := int32(len(atts) - 1)
		e.After(lat, evFinish, aid)
		if lat > c.Timeout {
			e.After(c.Timeout, evGiveUpC, aid)
		}
	}
	fail := func(id int32) { // request id's attempt timed out now
		r := &reqs[id]
		dec := d.end(e.Time(), int(r.attempt), ErrTimeout, time.Time{}, r.prev)
		switch {
		case !dec.Retry:
			m.GiveUp(e.Now(), dec.Reason)
		case dec.Delay == 0 && !d.needsSendEvent(): // a limiter acts in evRetrySend
			r.prev = 0
			arrive(id)
		default:
			r.prev = dec.Delay
			e.After(dec.Delay, evRetrySend, id)
		}
	}
	sample := func(upTo time.Duration) {
		for time.Duration(len(out.conc))*time.Second < upTo && time.Duration(len(out.conc)) < c.Duration/time.Second {
			out.conc = append(out.conc, conc)
		}
	}
	if t := c.nextArrival(0, rng); t >= 0 {
		e.At(t, evNew, 0)
	}
	for {
		ev, ok := e.Next()
		if !ok || ev.At >= c.Duration {
			break
		}
		now := e.Now()
		sample(now)
		switch ev.Kind {
		case evNew:
			if t := c.nextArrival(now, rng); t >= 0 {
				e.At(t, evNew, 0)
			}
			out.originals++
			if r := d.begin(e.Time()); r != retry.NoReason {
				out.refused++
				m.GiveUp(now, r)
				continue
			}
			m.Original()
			reqs = append(reqs, cReq{start: now})
			arrive(int32(len(reqs) - 1))
		case evFinish:
			conc--
			a := &atts[ev.ID]
			if a.timedOut {
				out.wasted++
				continue
			}
			r := &reqs[a.req]
			d.end(e.Time(), int(r.attempt), nil, time.Time{}, r.prev)
			m.Success(now)
		case evGiveUpC:
			atts[ev.ID].timedOut = true
			out.timeouts++
			fail(atts[ev.ID].req)
		case evRetrySend:
			if r := d.again(); r != retry.NoReason {
				m.GiveUp(now, r)
				continue
			}
			arrive(ev.ID)
		}
	}
	sample(c.Duration)
	out.events = e.Processed()
	return out
}

// Run simulates each strategy Runs times.
func (c *CollapseConfig) Run(ctx context.Context, o Options) (*Result, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	strategies := selected(collapseStrategies, c.Strategies)
	runs := make([]collapseRun, len(strategies)*c.Runs)
	err := parallel(ctx, o, len(runs), func(i int) {
		s, r := strategies[i/c.Runs], i%c.Runs
		runs[i] = c.runOne(collapseStrategies[s], mix(o.Seed, uint64(s), uint64(r)))
		runs[i].m.ring = nil // keep only the summaries of a large sweep
	})
	if err != nil {
		return nil, err
	}
	res := &Result{
		Scenario: "collapse",
		Title: fmt.Sprintf("%g req/s, spike to %g req/s for %v at %v; latency %v + %v × in flight; timeout %v does not cancel the work; %d runs per strategy",
			c.Rate, c.SpikeRate, c.SpikeLen, c.SpikeAt, c.Latency, c.PerRequest, c.Timeout, c.Runs),
		Settings: settings(c.Params(), o),
		Table: Table{Columns: []Column{
			{Key: "strategy", Title: "strategy"},
			{Key: "requests", Title: "requests", Prec: 0},
			{Key: "calls", Title: "calls", Prec: 0},
			{Key: "timeouts", Title: "timeouts", Prec: 0},
			{Key: "wasted", Title: "wasted work", Prec: 0},
			{Key: "goodput_before", Title: "goodput before", Prec: 1},
			{Key: "goodput_spike", Title: "during spike", Prec: 1},
			{Key: "goodput_end", Title: "last 10 s", Prec: 1},
			{Key: "peak_in_flight", Title: "peak in flight", Prec: 0},
			{Key: "collapsed_runs", Title: "collapsed runs"},
		}},
	}
	secs := int(c.Duration / time.Second)
	good := Chart{Title: "goodput per second (mean of runs)", XLabel: "time (s)", YLabel: "successful requests/s",
		Shades: []Shade{{From: c.SpikeAt.Seconds(), To: (c.SpikeAt + c.SpikeLen).Seconds(), Label: "spike"}}}
	inflight := Chart{Title: "attempts in flight at the server (mean of runs)", XLabel: "time (s)", YLabel: "in flight",
		Shades: good.Shades}
	n := float64(c.Runs)
	for si, s := range strategies {
		var reqs, calls, timeouts, wasted, peak int64
		var before, spike, end float64
		collapsed := 0
		gpSum := make([]int64, secs)
		inSum := make([]int64, secs)
		for r := range c.Runs {
			run := runs[si*c.Runs+r]
			res.Events += run.events
			gp := run.m.Goodput()
			for t := range secs {
				if t < len(gp) {
					gpSum[t] += gp[t]
				}
				if t < len(run.conc) {
					inSum[t] += run.conc[t]
				}
			}
			full := make([]int64, secs)
			copy(full, gp)
			e := meanRange(full, secs-10, secs)
			before += meanRange(full, 0, int(c.SpikeAt/time.Second))
			spike += meanRange(full, int(c.SpikeAt/time.Second), int((c.SpikeAt+c.SpikeLen)/time.Second))
			end += e
			if e < 0.5*c.Rate {
				collapsed++
			}
			reqs += run.originals
			calls += run.m.Calls()
			timeouts += run.timeouts
			wasted += run.wasted
			peak += run.peakConc
		}
		name := collapseStrategies[s]
		res.Table.Rows = append(res.Table.Rows, []any{name, float64(reqs) / n, float64(calls) / n,
			float64(timeouts) / n, float64(wasted) / n, before / n, spike / n, end / n, float64(peak) / n,
			fmt.Sprintf("%d/%d", collapsed, c.Runs)})
		good.Series = append(good.Series, Series{Name: name, Points: bucketPoints(gpSum, time.Second, 1/n)})
		inflight.Series = append(inflight.Series, Series{Name: name, Points: bucketPoints(inSum, time.Second, 1/n)})
	}
	res.Charts = []Chart{good, inflight}
	res.Notes = append(res.Notes, fmt.Sprintf(
		"Means per run. The server is stable below %.0f attempts/s (1 / per-request latency). A timed-out attempt still holds the server until it finishes (wasted work). A run counts as collapsed when its goodput over the last 10 s is below half the base rate.",
		1/c.PerRequest.Seconds()))
	return res, nil
}

// meanRange is the mean of xs[from:to] (clipped), 0 when empty.
func meanRange(xs []int64, from, to int) float64 {
	from, to = max(from, 0), min(to, len(xs))
	if to <= from {
		return 0
	}
	var s int64
	for _, x := range xs[from:to] {
		s += x
	}
	return float64(s) / float64(to-from)
}
