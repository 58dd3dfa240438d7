package simkit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/retry"
)

// BackoffForConfig is Marc Brooker's "What is Backoff For?" (2022), run on
// the simulator of his retry posts (mbrooker/simulator_example,
// retry_sim/client.py): a dependency fails each call with probability f,
// and Clients call it with up to Retries immediate retries per call, in
// two shapes:
//
//   - open: each client starts calls as a Poisson process at RatePer,
//     whatever happens to earlier calls (the paper's Client). Backing off
//     between retries moves each retry later but sends it all the same, so
//     the calls per request, 1 + f + … + f^Retries, and the calls per
//     second stay what they were;
//   - serial: each client has one call in flight and starts the next
//     Exp(1/RatePer) after the last one ends (the paper's SerialClient).
//     With backoff it also waits Backoff·2^(k−1) after its k-th failed
//     call in a row, reset by a success (the paper's
//     SerialClientWithBackoff, base 1/RatePer, uncapped, no jitter). Here
//     backoff does what it is for: the clients slow down, and a failing
//     dependency gets fewer calls per second.
//
// Open clients back off between retries with backoff.Exponential (full
// jitter, base Backoff). The table's closed form is Clients × RatePer ×
// (1 + f + … + f^Retries) calls per second for open clients, and for
// serial ones without backoff Clients × k / (1/RatePer + k·2·RTT) with
// k = 1 + f + … + f^Retries attempts per call. Network hops are Exp(RTT) each way, as in the
// budgets scenario. Defaults: 100 clients × 10 req/s, 3 retries, RTT
// 10 ms, 20 s, backoff base 100 ms (1/RatePer), f = 0, 0.2, …, 1.
type BackoffForConfig struct {
	Clients    int           // clients
	RatePer    float64       // open: Poisson calls per second per client; serial: 1/mean think time
	RTT        time.Duration // mean of one network hop (exponential); an attempt takes two
	Duration   time.Duration // calls start during this long
	Steps      int           // f = k/Steps for k = 0…Steps
	Retries    int           // immediate retries per call (open with backoff: jittered waits)
	Backoff    time.Duration // base of the backoff (open: between retries; serial: between failed calls)
	Modes      []string      // of "open", "serial"
	Strategies []string      // of "no-backoff", "backoff"
}

var (
	backoffForModes      = []string{"open", "serial"}
	backoffForStrategies = []string{"no-backoff", "backoff"}
)

// DefaultBackoffFor returns the paper's set-up (see [BackoffForConfig]).
func DefaultBackoffFor() BackoffForConfig {
	return BackoffForConfig{Clients: 100, RatePer: 10, RTT: 10 * time.Millisecond, Duration: 20 * time.Second,
		Steps: 5, Retries: 3, Backoff: 100 * time.Millisecond, Modes: backoffForModes, Strategies: backoffForStrategies}
}

// Params returns the scenario's parameters.
func (c *BackoffForConfig) Params() []*Param {
	return []*Param{
		intParam(&c.Clients, "clients", "clients", 1, 1_000_000),
		floatParam(&c.RatePer, "rate", "open: Poisson calls per second per client; serial: 1 / mean think time", 0.001, 1e6),
		durParam(&c.RTT, "rtt", "mean of one network hop, exponential (an attempt takes one there and one back)", 0, time.Minute),
		durParam(&c.Duration, "duration", "calls start during this long", time.Millisecond, 24*time.Hour),
		intParam(&c.Steps, "steps", "failure rates f = k/steps for k = 0…steps", 1, 1000),
		intParam(&c.Retries, "retries", "retries per call", 0, 100),
		durParam(&c.Backoff, "backoff", "backoff base: open, between retries (full jitter, doubling); serial, after failed calls (doubling)", time.Microsecond, time.Hour),
		listParam(&c.Modes, "mode", "client shapes", backoffForModes),
		listParam(&c.Strategies, "strategy", "strategies", backoffForStrategies),
	}
}

func (c *BackoffForConfig) validate() error {
	if err := checkParams(c.Params()); err != nil {
		return err
	}
	n := float64(c.Clients) * c.RatePer * c.Duration.Seconds() * float64((c.Steps+1)*len(c.Modes)*len(c.Strategies)*(c.Retries+1))
	if n > 1e9 {
		return invalid("duration", "clients × rate × duration × points × modes × strategies × attempts must be <= 1e9, got %.3g", n)
	}
	return nil
}

// open runs the open-loop clients through the budgets scenario's model.
func (c *BackoffForConfig) open(strategy string, f float64, seed uint64) (budgetsRun, error) {
	b := BudgetsConfig{Clients: c.Clients, RatePer: c.RatePer, RTT: c.RTT, Duration: c.Duration, Retries: max(c.Retries, 1)}
	if strategy == "backoff" {
		b.Backoff = c.Backoff
	}
	name := "3-retries" // Retries retries, no budget
	if c.Retries == 0 {
		name = "no-retries"
	}
	return b.runOne(name, f, seed)
}

type serialClient struct {
	attempt int32
	l       ledger
	failed  bool // the current attempt's outcome
	streak  int  // failed calls in a row
}

const (
	evSerialStart int32 = iota // a client starts a call (ID: client)
	evSerialDone               // an attempt's answer reaches the client (ID: client)
)

// serial runs the closed-loop clients.
func (c *BackoffForConfig) serial(strategy string, f float64, seed uint64) budgetsRun {
	p := &retry.Policy{MaxAttempts: c.Retries + 1, Schedule: backoff.Constant(0), Rand: pcg(seed, 1)}
	d := driver{p}
	between := backoff.Exponential{Base: c.Backoff} // uncapped, no jitter, as the paper's serial client
	rng := rand.New(pcg(seed, 2))
	e := NewEngine(2 * c.Clients)
	cs := make([]serialClient, c.Clients)
	var out budgetsRun
	mean := float64(c.RTT)
	think := func() time.Duration { return time.Duration(rng.ExpFloat64() * float64(time.Second) / c.RatePer) }
	send := func(id int32, at time.Duration) {
		cl := &cs[id]
		cl.attempt++
		var trip time.Duration
		trip, cl.failed = bernoulliTrip(rng, mean, f)
		e.At(at+trip, evSerialDone, id)
	}
	for id := range cs {
		e.At(think(), evSerialStart, int32(id))
	}
	for {
		ev, ok := e.Next()
		if !ok {
			break
		}
		id, now := ev.ID, e.Now()
		cl := &cs[id]
		switch ev.Kind {
		case evSerialStart:
			if now >= c.Duration {
				continue
			}
			out.originals++
			cl.l = ledger{}
			d.begin(&cl.l, e.Time()) // no budget or limiter: always starts
			cl.attempt = 0
			send(id, now)
		case evSerialDone:
			out.calls++
			var err error
			if cl.failed {
				err = ErrFailed
			}
			dec := d.end(&cl.l, e.Time(), int(cl.attempt), err)
			switch {
			case err == nil:
				out.successes++
				cl.streak = 0
				e.At(now+think(), evSerialStart, id)
			case dec.Retry:
				send(id, now+dec.Delay)
			default: // the call failed
				wait := time.Duration(0)
				if strategy == "backoff" {
					cl.streak++
					wait = between.Delay(cl.streak, 0, nil)
				}
				if now+wait < c.Duration { // past the end the client would only wait
					e.At(now+wait+think(), evSerialStart, id)
				}
			}
		}
	}
	out.events = e.Processed()
	return out
}

// Run sweeps f for every mode and strategy.
func (c *BackoffForConfig) Run(ctx context.Context, o Options) (*Result, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	modes := selected(backoffForModes, c.Modes)
	strategies := selected(backoffForStrategies, c.Strategies)
	points := c.Steps + 1
	per := len(strategies) * points
	runs, err := sweep(ctx, o, len(modes)*per, func(i int) (budgetsRun, error) {
		m, s, k := modes[i/per], strategies[i%per/points], i%points
		f := float64(k) / float64(c.Steps)
		seed := mix(o.Seed, uint64(m), uint64(s), uint64(k))
		if backoffForModes[m] == "open" {
			return c.open(backoffForStrategies[s], f, seed)
		}
		return c.serial(backoffForStrategies[s], f, seed), nil
	})
	if err != nil {
		return nil, err
	}
	res := &Result{
		Scenario: "backoff",
		Title: fmt.Sprintf("what backoff is for: %d clients, open (Poisson %g calls/s each) or serial (one call at a time), %d retries, each call fails with probability f",
			c.Clients, c.RatePer, c.Retries),
		Settings: settings(c.Params(), o),
		Table: Table{Columns: []Column{
			{Key: "mode", Title: "mode"},
			{Key: "strategy", Title: "strategy"},
			{Key: "f", Title: "f", Prec: 2},
			{Key: "requests", Title: "requests"},
			{Key: "calls", Title: "calls"},
			{Key: "calls_per_s", Title: "calls/s", Prec: 1},
			{Key: "expected_calls_per_s", Title: "closed form calls/s", Prec: 1},
			{Key: "load", Title: "calls/request", Prec: 3},
			{Key: "success", Title: "success", Prec: 3},
		}},
	}
	rate := Chart{Title: "calls per second at the dependency vs failure rate", XLabel: "failure rate f", YLabel: "calls/s"}
	amp := Chart{Title: "calls per request vs failure rate", XLabel: "failure rate f", YLabel: "calls per request"}
	secs := c.Duration.Seconds()
	for mi, m := range modes {
		for si, s := range strategies {
			name := backoffForModes[m] + " " + backoffForStrategies[s]
			rs, as := Series{Name: name}, Series{Name: name}
			for k := range points {
				run := runs[mi*per+si*points+k]
				res.Events += run.events
				f := float64(k) / float64(c.Steps)
				cps := float64(run.calls) / secs
				load := ratio(run.calls, run.originals)
				var want any = "-" // serial clients that back off have none
				switch {
				case backoffForModes[m] == "open":
					want = float64(c.Clients) * c.RatePer * expectedLoad(f, c.Retries)
				case backoffForStrategies[s] == "no-backoff":
					want = c.serialCallRate(f)
				}
				res.Table.Rows = append(res.Table.Rows, []any{backoffForModes[m], backoffForStrategies[s], f, run.originals,
					run.calls, cps, want, load, ratio(run.successes, run.originals)})
				rs.Points = append(rs.Points, Point{X: f, Y: cps})
				as.Points = append(as.Points, Point{X: f, Y: load})
			}
			rate.Series = append(rate.Series, rs)
			amp.Series = append(amp.Series, as)
		}
	}
	res.Charts = []Chart{rate, amp}
	res.Notes = append(res.Notes, fmt.Sprintf(
		"Open clients make 1 + f + … + f^%d calls per request (%.3f at f = 1/2) with or without backoff: backoff only moves retries later. Serial clients that back off send fewer calls per second as f grows: backoff slows the callers, which is what it is for.",
		c.Retries, expectedLoad(0.5, c.Retries)))
	return res, nil
}

// serialCallRate is the calls per second of serial clients without
// backoff: each cycle is a think time of mean 1/RatePer plus, per call,
// E[attempts] = 1 + f + … + f^Retries attempts of 2·RTT each.
func (c *BackoffForConfig) serialCallRate(f float64) float64 {
	k := expectedLoad(f, c.Retries)
	cycle := 1/c.RatePer + k*2*c.RTT.Seconds()
	return float64(c.Clients) * k / cycle
}
