package simkit

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
// attempt arrives, itself included), clients that time out after Timeout
// and retry, and timeouts that do not cancel the server's work. Open-loop
// Poisson traffic; each way between client and server takes Exp(mean
// Network). Below 1/PerRequest attempts per second the server is stable; a
// burst that pushes latency past the timeout turns every request into
// several attempts, and with plain retries the extra load keeps it there
// after the burst ends.
//
// The defaults are Marc Brooker's simple_collapse_sim (2023;
// mbrooker/simulator_example, simple_collapse_sim/sim.py): latency 1.0 s +
// 0.01 s × concurrency, client timeout 3 s from the send, 3 tries, network
// Exp(0.1 s) each way, 80 s, 10 runs averaged, and two loads:
//
//   - spike (Load "spike"): 40 req/s, 80 req/s for 5 s from t = 20 s;
//   - ramp (Load "ramp"): the rate climbs linearly from Rate at t = 0 to
//     SpikeRate at RampPeak (25 s), then falls at the same slope to 0
//     (rate(t) = max(0, SpikeRate − slope·|t − RampPeak|)).
//
// Its backoff client waits uniform(0, 10 s·2^k) before retry k (it doubles
// its 10 s before drawing); the full-jitter strategy is that schedule,
// backoff.Exponential{Base: 2·Backoff, Jitter: Full}, with Backoff = 10 s.
type CollapseConfig struct {
	Load              string        // "spike" or "ramp"
	Rate, SpikeRate   float64       // Poisson requests per second: normal and spike rate (ramp: at t = 0 and at the peak)
	SpikeAt, SpikeLen time.Duration // spike: when it starts and how long it lasts
	RampPeak          time.Duration // ramp: when the rate peaks
	Duration          time.Duration // simulated time
	Latency           time.Duration // latency with nothing else in flight
	PerRequest        time.Duration // added latency per attempt in flight
	Network           time.Duration // mean of one network hop (exponential), each way
	Timeout           time.Duration // client timeout per attempt from its send; the server keeps working
	Attempts          int           // attempts per request, the first included
	Backoff           time.Duration // full-jitter: retry k waits uniform(0, Backoff·2^k)
	Runs              int           // independent runs per strategy
	Strategies        []string      // of "no-backoff", "full-jitter", "budget"; run in that order
}

var (
	collapseStrategies = []string{"no-backoff", "full-jitter", "budget"}
	collapseLoads      = []string{"spike", "ramp"}
)

// DefaultCollapse returns the paper's spike (see [CollapseConfig]).
func DefaultCollapse() CollapseConfig {
	return CollapseConfig{Load: "spike", Rate: 40, SpikeRate: 80, SpikeAt: 20 * time.Second, SpikeLen: 5 * time.Second,
		RampPeak: 25 * time.Second, Duration: 80 * time.Second, Latency: time.Second, PerRequest: 10 * time.Millisecond,
		Network: 100 * time.Millisecond, Timeout: 3 * time.Second, Attempts: 3, Backoff: 10 * time.Second,
		Runs: 10, Strategies: collapseStrategies}
}

// Params returns the scenario's parameters.
func (c *CollapseConfig) Params() []*Param {
	return []*Param{
		choiceParam(&c.Load, "load", "offered load: spike (rate, spike-rate from spike-at for spike-len) or ramp (rate at 0 to spike-rate at ramp-peak, then down to 0 at the same slope)", collapseLoads),
		floatParam(&c.Rate, "rate", "Poisson requests per second (ramp: at t = 0)", 0, 1e6),
		floatParam(&c.SpikeRate, "spike-rate", "requests per second during the spike (ramp: at its peak)", 0, 1e6),
		durParam(&c.SpikeAt, "spike-at", "spike: when it starts", 0, 24*time.Hour),
		durParam(&c.SpikeLen, "spike-len", "spike: how long it lasts", 0, 24*time.Hour),
		durParam(&c.RampPeak, "ramp-peak", "ramp: when the rate peaks", time.Millisecond, 24*time.Hour),
		durParam(&c.Duration, "duration", "simulated time", time.Second, 24*time.Hour),
		durParam(&c.Latency, "latency", "server latency with nothing else in flight", 0, time.Hour),
		durParam(&c.PerRequest, "per-request", "latency added per attempt in flight at arrival", 0, time.Hour),
		durParam(&c.Network, "network", "mean network delay each way (exponential)", 0, time.Hour),
		durParam(&c.Timeout, "timeout", "client timeout per attempt, from its send (the server keeps working)", time.Millisecond, time.Hour),
		intParam(&c.Attempts, "attempts", "attempts per request, the first included", 1, 100),
		durParam(&c.Backoff, "backoff", "full-jitter: retry k waits uniform(0, backoff·2^k)", time.Millisecond, 24*time.Hour),
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
	if c.Load == "ramp" && c.SpikeRate < c.Rate {
		return invalid("spike-rate", "must be >= rate (%g) for a ramp, got %g", c.Rate, c.SpikeRate)
	}
	return nil
}

func (c *CollapseConfig) policy(name string) *retry.Policy {
	p := &retry.Policy{MaxAttempts: c.Attempts, Schedule: backoff.Constant(0)}
	switch name {
	case "full-jitter":
		p.Schedule = backoff.Exponential{Base: 2 * c.Backoff, Jitter: backoff.Full}
	case "budget":
		p.Budget = &budget.TokenBucket{Empty: true} // budget.TokenBucket's defaults, starting empty; one budget for the client fleet
	}
	return p
}

// rate returns the arrival rate at t.
func (c *CollapseConfig) rate(t time.Duration) float64 {
	if c.Load == "ramp" {
		slope := (c.SpikeRate - c.Rate) / c.RampPeak.Seconds()
		return max(0, c.SpikeRate-slope*math.Abs((t-c.RampPeak).Seconds()))
	}
	if t >= c.SpikeAt && t < c.SpikeAt+c.SpikeLen {
		return c.SpikeRate
	}
	return c.Rate
}

// phases returns the whole seconds of the three goodput columns: before
// the burst, during it, and the 10 s over which a run is judged collapsed
// or not. For a spike: [0, SpikeAt), the spike, and the last 10 s. For a
// ramp: the first 10 s, the 10 s around its peak, and the 10 s from the
// instant the falling rate is back to Rate (2·RampPeak), loads the server
// carried before the ramp.
func (c *CollapseConfig) phases() (before, during, judged [2]int) {
	secs := int(c.Duration / time.Second)
	clip := func(a, b int) [2]int { return [2]int{min(max(a, 0), secs), min(max(b, 0), secs)} }
	if c.Load == "ramp" {
		peak := int(c.RampPeak / time.Second)
		return clip(0, 10), clip(peak-5, peak+5), clip(2*peak, 2*peak+10)
	}
	at, end := int(c.SpikeAt/time.Second), int((c.SpikeAt+c.SpikeLen)/time.Second)
	return clip(0, at), clip(at, end), clip(secs-10, secs)
}

// offered is the mean arrival rate over the whole seconds [from, to).
func (c *CollapseConfig) offered(from, to int) float64 {
	if to <= from {
		return 0
	}
	sum := 0.0
	const steps = 100
	for i := range (to - from) * steps {
		sum += c.rate(time.Duration(from)*time.Second + time.Duration(i)*time.Second/steps + time.Second/(2*steps))
	}
	return sum / float64((to-from)*steps)
}

// nextArrival returns the next Poisson arrival after t (or -1 when none
// comes before the end). For a spike the rate is piecewise constant and an
// Exp(1) amount of "rate × time" is spent across its segments; a ramp is
// thinned from Poisson arrivals at its peak rate.
func (c *CollapseConfig) nextArrival(t time.Duration, rng *rand.Rand) time.Duration {
	if c.Load == "ramp" {
		top := max(c.Rate, c.SpikeRate)
		if top <= 0 {
			return -1
		}
		for {
			t += time.Duration(math.Ceil(rng.ExpFloat64() / top * float64(time.Second)))
			if t >= c.Duration {
				return -1
			}
			if rng.Float64()*top < c.rate(t) {
				return t
			}
		}
	}
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
	l       ledger
}

type cAttempt struct {
	req      int32
	timedOut bool // the client stopped waiting
	answered bool // the client has the server's answer
}

const (
	evNew       int32 = iota // a request arrives at the client
	evAtServer               // an attempt reaches the server (ID: attempt)
	evFinish                 // the server finishes an attempt (ID: attempt)
	evAtClient               // the answer reaches the client (ID: attempt)
	evGiveUpC                // the client's timeout fires (ID: attempt)
	evRetrySend              // a retry's wait ended (ID: request)
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
	hop := func() time.Duration { return time.Duration(rng.ExpFloat64() * float64(c.Network)) }
	send := func(id int32) { // request id sends an attempt now
		reqs[id].attempt++
		atts = append(atts, cAttempt{req: id})
		aid := int32(len(atts) - 1)
		e.After(hop(), evAtServer, aid)
		e.After(c.Timeout, evGiveUpC, aid)
	}
	fail := func(id int32) { // request id's attempt timed out now
		r := &reqs[id]
		dec := d.end(&r.l, e.Time(), int(r.attempt), ErrTimeout)
		switch {
		case !dec.Retry:
			m.GiveUp(e.Now(), dec.Reason)
		case dec.Delay == 0 && !d.needsSendEvent(): // a limiter acts in evRetrySend
			send(id)
		default:
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
			var l ledger
			if r := d.begin(&l, e.Time()); r != retry.NoReason {
				out.refused++
				m.GiveUp(now, r)
				continue
			}
			m.Original()
			reqs = append(reqs, cReq{l: l})
			send(int32(len(reqs) - 1))
		case evAtServer:
			m.Call(now)
			conc++
			out.peakConc = max(out.peakConc, conc)
			e.After(c.Latency+time.Duration(conc)*c.PerRequest, evFinish, ev.ID)
		case evFinish:
			conc--
			if atts[ev.ID].timedOut {
				out.wasted++
				continue
			}
			e.After(hop(), evAtClient, ev.ID)
		case evAtClient:
			a := &atts[ev.ID]
			if a.timedOut { // the client stopped waiting while the answer travelled
				out.wasted++
				continue
			}
			a.answered = true
			r := &reqs[a.req]
			d.end(&r.l, e.Time(), int(r.attempt), nil)
			m.Success(now)
		case evGiveUpC:
			a := &atts[ev.ID]
			if a.answered {
				continue
			}
			a.timedOut = true
			out.timeouts++
			fail(a.req)
		case evRetrySend:
			if r := d.again(&reqs[ev.ID].l, e.Time()); r != retry.NoReason {
				m.GiveUp(now, r)
				continue
			}
			send(ev.ID)
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
		Title: fmt.Sprintf("%s; latency %v + %v × in flight, network Exp(%v) each way; timeout %v does not cancel the work; %d runs per strategy",
			c.loadTitle(), c.Latency, c.PerRequest, c.Network, c.Timeout, c.Runs),
		Settings: settings(c.Params(), o),
		Table: Table{Columns: []Column{
			{Key: "strategy", Title: "strategy"},
			{Key: "requests", Title: "requests", Prec: 0},
			{Key: "calls", Title: "calls", Prec: 0},
			{Key: "timeouts", Title: "timeouts", Prec: 0},
			{Key: "wasted", Title: "wasted work", Prec: 0},
			{Key: "goodput_before", Title: "goodput before", Prec: 1},
			{Key: "goodput_during", Title: "during", Prec: 1},
			{Key: "goodput_after", Title: "judged 10 s", Prec: 1},
			{Key: "offered_after", Title: "offered then", Prec: 1},
			{Key: "peak_in_flight", Title: "peak in flight", Prec: 0},
			{Key: "collapsed_runs", Title: "collapsed runs"},
		}},
	}
	secs := int(c.Duration / time.Second)
	pBefore, pDuring, pJudged := c.phases()
	offered := c.offered(pJudged[0], pJudged[1])
	shade := Shade{From: c.SpikeAt.Seconds(), To: (c.SpikeAt + c.SpikeLen).Seconds(), Label: "spike"}
	if c.Load == "ramp" {
		shade = Shade{From: float64(pDuring[0]), To: float64(pDuring[1]), Label: "peak"}
	}
	good := Chart{Title: "goodput per second (mean of runs)", XLabel: "time (s)", YLabel: "successful requests/s",
		Shades: []Shade{shade}}
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
			e := meanRange(full, pJudged[0], pJudged[1])
			before += meanRange(full, pBefore[0], pBefore[1])
			spike += meanRange(full, pDuring[0], pDuring[1])
			end += e
			if e < 0.5*offered {
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
			float64(timeouts) / n, float64(wasted) / n, before / n, spike / n, end / n, offered, float64(peak) / n,
			fmt.Sprintf("%d/%d", collapsed, c.Runs)})
		good.Series = append(good.Series, Series{Name: name, Points: bucketPoints(gpSum, time.Second, 1/n)})
		inflight.Series = append(inflight.Series, Series{Name: name, Points: bucketPoints(inSum, time.Second, 1/n)})
	}
	res.Charts = []Chart{good, inflight}
	res.Notes = append(res.Notes, fmt.Sprintf(
		"Means per run. The server is stable below %.0f attempts/s (1 / per-request latency). A timed-out attempt still holds the server until it finishes (wasted work). A run counts as collapsed when its goodput over the judged 10 s (%d–%d s) is below half the rate offered then.",
		1/c.PerRequest.Seconds(), pJudged[0], pJudged[1]))
	return res, nil
}

// loadTitle describes the offered load.
func (c *CollapseConfig) loadTitle() string {
	if c.Load == "ramp" {
		return fmt.Sprintf("%g req/s ramping to %g req/s at %v, then down to 0 at the same slope", c.Rate, c.SpikeRate, c.RampPeak)
	}
	return fmt.Sprintf("%g req/s, spike to %g req/s for %v at %v", c.Rate, c.SpikeRate, c.SpikeLen, c.SpikeAt)
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
