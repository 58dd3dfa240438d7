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

// BudgetsConfig sweeps the failure rate f of a dependency that fails each
// call independently with probability f (Bernoulli) and compares retry
// strategies by the load they put on it and the success their callers
// see. Clients send open-loop Poisson traffic; each client owns its own
// budget, shared by all of that client's requests.
//
// The defaults and the first four strategies are the simulator of Marc
// Brooker's "Fixing retries with token buckets and circuit breakers"
// (2022; mbrooker/simulator_example, retry_sim): 100 clients × Poisson
// 10 req/s for 20 s, each network hop Exp(mean 10 ms) (one there, one
// back), retries sent at once (no backoff), and
//
//   - no-retries, 3-retries: at most 0 or Retries retries per request;
//   - token-bucket: the paper's adaptive retry bucket, per client: it
//     starts full at 5 tokens, every original call start adds 0.1 (up to
//     5), and a retry is allowed while more than 1 token is held and then
//     spends 1. It has no cap on retries per request. It is a
//     budget.TokenBucket in tenths {Max 50, PerRequest 1, PerRetry 10,
//     MinToRetry 11, Initial 50};
//   - breaker: the paper's circuit breaker, per client: cumulative counts
//     since the start (no window, no minimum), calls = original call
//     starts, failures = failed attempts; a failed attempt is retried
//     (up to Retries per request) while failures/calls <= BreakerRate.
//     budget.Breaker is windowed, so this one is [paperBreaker].
//
// stagger's own budgets run as further strategies, each with up to
// Retries retries: credits (budget.TokenBucket's defaults,
// starting empty), ratio-10% (budget.Ratio, the SRE book's per-client
// retry budget), breaker-window (budget.Breaker over WindowSpan, minimum
// 10 results), grpc (budget.GRPC, gRPC A6 retry throttling with its
// example maxTokens 10, tokenRatio 0.1) and adaptive (budget.Adaptive, the
// SRE book's client-side throttling, K = 2 over 2 minutes).
//
// Backoff > 0 waits an exponential backoff with full jitter (base
// Backoff, cap 100·Backoff) before each retry; with open-loop clients it
// delays retries but leaves the load amplification as it is (Brooker,
// "What is backoff for?", 2022).
type BudgetsConfig struct {
	Clients      int           // client processes, each with its own budget
	RatePer      float64       // requests per second per client
	RTT          time.Duration // mean of one network hop (exponential); an attempt takes two
	Duration     time.Duration // requests arrive in [0, Duration)
	Steps        int           // f = k/Steps for k = 0…Steps
	Retries      int           // retries after the first try (every strategy but no-retries and token-bucket)
	BreakerRate  float64       // breaker and breaker-window: failure rate above which retries stop
	RatioSpan    time.Duration // ratio-10% and breaker-window window
	AdaptiveSpan time.Duration // adaptive's window
	Backoff      time.Duration // base of the full-jitter backoff before a retry; 0 retries at once
	Strategies   []string      // of budgetStrategies

	probe *probe // the drivers' suite's one request, in place of the clients (tests only)
}

// probe replaces the budgets model's clients and server by one request
// whose attempts the drivers' suite scripts (conformance_test.go): the
// model's own event loop then runs the suite's policy on it.
type probe struct {
	policy *retry.Policy
	answer func() (time.Duration, error)                   // runs an attempt: how long it took, its error
	end    func(err error, r retry.Reason, attempts int32) // the request succeeded (NoReason) or gave up
	err    error                                           // the last attempt's error
}

var budgetStrategies = []string{"no-retries", "3-retries", "token-bucket", "breaker", "credits", "ratio-10%", "breaker-window", "grpc", "adaptive"}

// DefaultBudgets returns the paper's experiment (see [BudgetsConfig]) with
// f = 0, 0.1, …, 1 and every strategy.
func DefaultBudgets() BudgetsConfig {
	return BudgetsConfig{Clients: 100, RatePer: 10, RTT: 10 * time.Millisecond, Duration: 20 * time.Second,
		Steps: 10, Retries: 3, BreakerRate: 0.1, RatioSpan: 10 * time.Second, AdaptiveSpan: 2 * time.Minute,
		Strategies: budgetStrategies}
}

// Params returns the scenario's parameters.
func (c *BudgetsConfig) Params() []*Param {
	return []*Param{
		intParam(&c.Clients, "clients", "client processes, each with its own budget", 1, 1_000_000),
		floatParam(&c.RatePer, "rate", "Poisson requests per second per client", 0.001, 1e6),
		durParam(&c.RTT, "rtt", "mean of one network hop, exponential (an attempt takes one there and one back)", 0, time.Minute),
		durParam(&c.Duration, "duration", "requests arrive during this long", time.Millisecond, 24*time.Hour),
		intParam(&c.Steps, "steps", "failure rates f = k/steps for k = 0…steps", 1, 1000),
		intParam(&c.Retries, "retries", "retries after the first try (every strategy but no-retries and token-bucket)", 1, 100),
		floatParam(&c.BreakerRate, "breaker-threshold", "breaker and breaker-window: failure rate above which retries stop", 0.001, 1),
		durParam(&c.RatioSpan, "window-span", "sliding window of ratio-10% and breaker-window", time.Millisecond, time.Hour),
		durParam(&c.AdaptiveSpan, "adaptive-span", "sliding window of adaptive", time.Millisecond, time.Hour),
		durParam(&c.Backoff, "backoff", "base of the full-jitter backoff before each retry (cap 100×); 0 retries at once", 0, time.Hour),
		listParam(&c.Strategies, "strategy", "strategies", budgetStrategies),
	}
}

func (c *BudgetsConfig) validate() error {
	if err := checkParams(c.Params()); err != nil {
		return err
	}
	n := float64(c.Clients) * c.RatePer * c.Duration.Seconds() * float64(c.Steps+1) * float64(len(c.Strategies))
	if n > 1e9 {
		return invalid("duration", "clients × rate × duration × points × strategies must be <= 1e9 requests, got %.3g", n)
	}
	return nil
}

// policy returns one client's policy for a strategy (a fresh budget);
// src is the run's random stream.
func (c *BudgetsConfig) policy(name string, src rand.Source) (*retry.Policy, error) {
	p := &retry.Policy{MaxAttempts: c.Retries + 1, Schedule: backoff.Constant(0), Rand: src}
	if c.Backoff > 0 {
		p.Schedule = backoff.Exponential{Base: c.Backoff, Cap: 100 * c.Backoff, Jitter: backoff.Full}
	}
	var err error
	switch name {
	case "no-retries":
		p.MaxAttempts = 1
	case "token-bucket":
		// +0.1 per call start, cap 5, starts full, a retry needs more than
		// 1 token and spends 1 (in tenths); no cap on retries per request.
		p.MaxAttempts = math.MaxInt
		p.Budget = &budget.TokenBucket{Max: 50, PerRequest: 1, PerRetry: 10, MinToRetry: 11, Initial: 50}
	case "breaker":
		p.Budget = &paperBreaker{max: c.BreakerRate}
	case "credits":
		p.Budget = &budget.TokenBucket{Empty: true} // the defaults: +1 per call, cap 200, a retry costs 10; starts empty
	case "ratio-10%":
		p.Budget, err = budget.NewRatio(0.1, c.RatioSpan)
	case "breaker-window":
		p.Budget, err = budget.NewBreaker(c.BreakerRate, 10, c.RatioSpan)
	case "grpc":
		p.Budget, err = budget.NewGRPC(10, 0.1)
	case "adaptive":
		p.Budget, err = budget.NewAdaptive(2, c.AdaptiveSpan, src)
	}
	return p, err
}

// paperBreaker is the circuit breaker of Brooker's retry simulator
// (2022): per client, cumulative since the start, calls are original call
// starts, failures are failed attempts, and a retry is allowed while
// failures/calls <= max. It is the paper's model, kept here rather than
// in package budget: a breaker without a window never forgets an outage.
type paperBreaker struct {
	max             float64
	calls, failures float64
}

// Request counts a call start.
func (b *paperBreaker) Request(time.Time) bool { b.calls++; return true }

// Retry allows a retry while failures/calls <= max.
func (b *paperBreaker) Retry(time.Time) bool { return b.failures <= b.max*b.calls }

// Result counts a failed attempt.
func (b *paperBreaker) Result(_ time.Time, ok bool) {
	if !ok {
		b.failures++
	}
}

type budgetsRun struct {
	originals, calls, successes, refused int64
	events                               uint64
}

type bReq struct {
	client  int32
	attempt int32
	failed  bool
	l       ledger
}

const (
	evOriginal int32 = iota // a client's next request arrives (ID: client)
	evDone                  // an attempt's answer arrives (ID: request)
	evResend                // a retry's wait ended, with a limiter (ID: request)
)

// runBudgets simulates one point of the sweep.
func (c *BudgetsConfig) runOne(name string, f float64, seed uint64) (budgetsRun, error) {
	drivers := make([]driver, c.Clients)
	jitter := pcg(seed, 1) // one stream per run: the clients act one at a time
	for i := range drivers {
		p, err := c.policy(name, jitter)
		if err != nil {
			return budgetsRun{}, err
		}
		if c.probe != nil {
			p = c.probe.policy
		}
		drivers[i] = driver{p}
	}
	rng := rand.New(pcg(seed, 2))
	e := NewEngine(c.Clients * 2)
	var reqs []bReq
	var out budgetsRun
	mean := float64(c.RTT)
	gap := func() time.Duration { return time.Duration(rng.ExpFloat64() * float64(time.Second) / c.RatePer) }
	send := func(id int32, at time.Duration) {
		r := &reqs[id]
		r.attempt++
		var trip time.Duration
		if pr := c.probe; pr != nil {
			trip, pr.err = pr.answer()
			r.failed = pr.err != nil
		} else {
			trip, r.failed = bernoulliTrip(rng, mean, f)
		}
		e.At(at+trip, evDone, id)
	}
	for cl := range c.Clients {
		if c.probe != nil {
			e.At(0, evOriginal, int32(cl)) // the one request, at once
			continue
		}
		e.At(gap(), evOriginal, int32(cl))
	}
	for {
		ev, ok := e.Next()
		if !ok {
			break
		}
		now := e.Now()
		switch ev.Kind {
		case evOriginal:
			if now >= c.Duration {
				continue
			}
			pr := c.probe
			if pr == nil {
				e.After(gap(), evOriginal, ev.ID)
			}
			d := drivers[ev.ID]
			out.originals++
			var l ledger
			if r := d.begin(&l, e.Time()); r != retry.NoReason {
				if pr != nil {
					pr.end(nil, r, 0)
				}
				continue
			}
			reqs = append(reqs, bReq{client: ev.ID, l: l})
			send(int32(len(reqs)-1), now)
		case evDone:
			r := &reqs[ev.ID]
			out.calls++
			var err error
			if r.failed {
				err = ErrFailed
				if c.probe != nil {
					err = c.probe.err
				}
			}
			d := drivers[r.client]
			dec := d.end(&r.l, e.Time(), int(r.attempt), err)
			if pr := c.probe; pr != nil && (err == nil || !dec.Retry) {
				pr.end(err, dec.Reason, r.attempt)
			}
			switch {
			case err == nil:
				out.successes++
			case !dec.Retry:
				if dec.Reason == retry.Budget || dec.Reason == retry.CircuitOpen { // breaker-window's refusals are circuit-open
					out.refused++
				}
			case d.needsSendEvent():
				e.After(dec.Delay, evResend, ev.ID)
			default:
				send(ev.ID, now+dec.Delay)
			}
		case evResend:
			r := &reqs[ev.ID]
			reason := drivers[r.client].againN(&r.l, int(r.attempt)+1, e.Time())
			switch {
			case reason == retry.NoReason:
				send(ev.ID, now)
			case c.probe != nil:
				c.probe.end(c.probe.err, reason, r.attempt)
			}
		}
	}
	out.events = e.Processed()
	return out, nil
}

// Run sweeps f for every strategy.
func (c *BudgetsConfig) Run(ctx context.Context, o Options) (*Result, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	strategies := selected(budgetStrategies, c.Strategies)
	points := c.Steps + 1
	runs, err := sweep(ctx, o, len(strategies)*points, func(i int) (budgetsRun, error) {
		s, k := strategies[i/points], i%points
		return c.runOne(budgetStrategies[s], float64(k)/float64(c.Steps), mix(o.Seed, uint64(s), uint64(k)))
	})
	if err != nil {
		return nil, err
	}
	res := &Result{
		Scenario: "budgets",
		Title: fmt.Sprintf("%d clients × Poisson %g req/s for %v, hops Exp(%v) each way, each call fails with probability f",
			c.Clients, c.RatePer, c.Duration, c.RTT),
		Settings: settings(c.Params(), o),
		Table: Table{Columns: []Column{
			{Key: "strategy", Title: "strategy"},
			{Key: "f", Title: "f", Prec: 2},
			{Key: "requests", Title: "requests"},
			{Key: "calls", Title: "calls"},
			{Key: "load", Title: "load (calls/request)", Prec: 3},
			{Key: "success", Title: "success", Prec: 3},
			{Key: "budget_refused", Title: "budget refused"},
		}},
	}
	loadChart := Chart{Title: "load amplification vs failure rate", XLabel: "failure rate f", YLabel: "calls per request"}
	okChart := Chart{Title: "success rate vs failure rate", XLabel: "failure rate f", YLabel: "requests that succeeded"}
	for si, s := range strategies {
		name := budgetStrategies[s]
		ls, ss := Series{Name: name}, Series{Name: name}
		for k := range points {
			run := runs[si*points+k]
			f := float64(k) / float64(c.Steps)
			load := ratio(run.calls, run.originals)
			succ := ratio(run.successes, run.originals)
			res.Table.Rows = append(res.Table.Rows, []any{name, f, run.originals, run.calls, load, succ, run.refused})
			ls.Points = append(ls.Points, Point{X: f, Y: load})
			ss.Points = append(ss.Points, Point{X: f, Y: succ})
			res.Events += run.events
		}
		loadChart.Series = append(loadChart.Series, ls)
		okChart.Series = append(okChart.Series, ss)
	}
	res.Charts = []Chart{loadChart, okChart}
	n := float64(c.Retries + 1)
	res.Notes = append(res.Notes, fmt.Sprintf(
		"%d retries without a budget: expected load 1+f+…+f^%d and success 1−f^%.0f; at f = 1 the dependency gets %.0f× its traffic.",
		c.Retries, c.Retries, n, n))
	return res, nil
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// bernoulliTrip draws one attempt of a dependency that fails with
// probability f, in this order: a hop there of Exp(mean), the outcome, a
// hop back of Exp(mean). It returns the round trip and whether it failed.
func bernoulliTrip(rng *rand.Rand, mean, f float64) (time.Duration, bool) {
	there := time.Duration(rng.ExpFloat64() * mean)
	failed := rng.Float64() < f
	return there + time.Duration(rng.ExpFloat64()*mean), failed
}

// expectedLoad is 1 + f + … + f^retries: the mean attempts of a request
// retried up to retries times when each attempt fails with probability f.
func expectedLoad(f float64, retries int) float64 {
	sum, term := 0.0, 1.0
	for range retries + 1 {
		sum += term
		term *= f
	}
	return sum
}

// expectedSuccess is 1 − f^(retries+1).
func expectedSuccess(f float64, retries int) float64 {
	return 1 - math.Pow(f, float64(retries+1))
}
