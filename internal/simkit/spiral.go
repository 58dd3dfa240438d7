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

// SpiralConfig is the retry spiral of the SRE book ("Addressing Cascading
// Failures", Site Reliability Engineering, 2016): a backend that serves
// Capacity queries per second gets Rate > Capacity; the excess fails at
// once and every failed query is retried Wait later, so the next second
// carries the new queries and the retries. With retries that never stop
// the load grows by Rate − Capacity each second:
//
//	load in second k = Rate + k·(Rate − Capacity)   (k = 0, 1, …)
//
// which is the book's 10,100 QPS against 10,000 growing into an outage. A
// retry budget bounds it: the SRE book's per-client budget (retries at
// most 10% of requests, budget.Ratio) holds the load near 1.1 × Rate, as
// does budget.TokenBucket's one retry per ten requests.
//
// The backend admits a query when it has a token: tokens refill at
// Capacity per second up to Burst (10 ms of capacity), so the queries it
// refuses are spread over each second. Answers are immediate. Defaults:
// the book's 10,000 QPS capacity, 10,100 QPS offered, a retry every 1 s,
// 60 s. The formula is the mean: every excess query of a Poisson second
// stays in the loop, so one run's load is a random walk around it (its
// standard deviation after k seconds is about √(k·Rate)); the table
// averages Runs runs.
type SpiralConfig struct {
	Rate       float64       // queries per second offered (Poisson)
	Capacity   float64       // queries per second the backend serves
	Wait       time.Duration // between a failure and its retry
	Attempts   int           // attempts per query, the first included; 0: no limit
	Duration   time.Duration // simulated time
	Runs       int           // runs per strategy, averaged
	Strategies []string      // of "retries", "ratio-10%", "token-bucket"
}

var spiralStrategies = []string{"retries", "ratio-10%", "token-bucket"}

// DefaultSpiral returns the SRE book's numbers (see [SpiralConfig]).
func DefaultSpiral() SpiralConfig {
	return SpiralConfig{Rate: 10_100, Capacity: 10_000, Wait: time.Second, Duration: 60 * time.Second,
		Runs: 5, Strategies: spiralStrategies}
}

// Params returns the scenario's parameters.
func (c *SpiralConfig) Params() []*Param {
	return []*Param{
		floatParam(&c.Rate, "rate", "queries per second offered (Poisson)", 0.001, 1e6),
		floatParam(&c.Capacity, "capacity", "queries per second the backend serves", 0.001, 1e6),
		durParam(&c.Wait, "wait", "wait between a failure and its retry", time.Millisecond, time.Hour),
		intParam(&c.Attempts, "attempts", "attempts per query, the first included (0: no limit)", 0, 1_000_000),
		durParam(&c.Duration, "duration", "simulated time", 2*time.Second, 24*time.Hour),
		intParam(&c.Runs, "runs", "runs per strategy, averaged", 1, 10_000),
		listParam(&c.Strategies, "strategy", "strategies", spiralStrategies),
	}
}

func (c *SpiralConfig) validate() error {
	if err := checkParams(c.Params()); err != nil {
		return err
	}
	// the unbounded spiral's load: Rate + k·(Rate − Capacity) per second
	secs := c.Duration.Seconds()
	if n := float64(len(c.Strategies)*c.Runs) * secs * (c.Rate + max(0, c.Rate-c.Capacity)*secs/2); n > 1e9 {
		return invalid("duration", "the spiral would make %.3g attempts; keep strategies × runs × duration × load <= 1e9", n)
	}
	return nil
}

func (c *SpiralConfig) policy(name string) (*retry.Policy, error) {
	p := &retry.Policy{MaxAttempts: c.Attempts, Schedule: backoff.Constant(c.Wait)}
	if p.MaxAttempts == 0 {
		p.MaxAttempts = math.MaxInt
	}
	var err error
	switch name {
	case "ratio-10%":
		p.Budget, err = budget.NewRatio(0.1, time.Minute)
	case "token-bucket":
		p.Budget = &budget.TokenBucket{}
	}
	return p, err
}

type spiralRun struct {
	load, served      []int64 // per second: attempts, and the queries served
	requests, refused int64   // originals; retries the budget refused
	events            uint64
}

const (
	evSpiralNew   int32 = iota // a query arrives
	evSpiralRetry              // a retry reaches the backend (ID: query)
)

func (c *SpiralConfig) runOne(name string, seed uint64) (spiralRun, error) {
	p, err := c.policy(name)
	if err != nil {
		return spiralRun{}, err
	}
	p.Rand = pcg(seed, 1)
	d := driver{p}
	rng := rand.New(pcg(seed, 2))
	secs := int(c.Duration / time.Second)
	out := spiralRun{load: make([]int64, secs), served: make([]int64, secs)}
	e := NewEngine(1 << 14)
	burst := max(1, c.Capacity/100)
	tokens, last := burst, time.Duration(0)
	var attempt []int32
	var ls []ledger // each request's, beside its attempt
	try := func(id int32, now time.Duration) {
		attempt[id]++
		k := int(now / time.Second)
		out.load[k]++
		tokens = min(burst, tokens+(now-last).Seconds()*c.Capacity)
		last = now
		var err error
		if tokens >= 1 {
			tokens--
			out.served[k]++
		} else {
			err = ErrFailed
		}
		dec := d.end(&ls[id], e.Time(), int(attempt[id]), err)
		if err != nil && dec.Retry && now+dec.Delay < c.Duration {
			e.At(now+dec.Delay, evSpiralRetry, id) // no limiter: the retry starts when it arrives
		}
		if dec.Reason == retry.Budget {
			out.refused++
		}
	}
	e.At(poissonGap(rng, c.Rate), evSpiralNew, 0)
	for {
		ev, ok := e.Next()
		if !ok || ev.At >= c.Duration {
			break
		}
		now := e.Now()
		switch ev.Kind {
		case evSpiralNew:
			e.After(poissonGap(rng, c.Rate), evSpiralNew, 0)
			out.requests++
			var l ledger
			if d.begin(&l, e.Time()) != retry.NoReason {
				continue
			}
			attempt, ls = append(attempt, 0), append(ls, l)
			try(int32(len(attempt)-1), now)
		case evSpiralRetry:
			try(ev.ID, now)
		}
	}
	out.events = e.Processed()
	return out, nil
}

// spiralLoad is the closed form of the unbounded spiral: the load in
// second k, Rate + k·(Rate − Capacity) while that exceeds Capacity.
func (c *SpiralConfig) spiralLoad(k int) float64 {
	return c.Rate + float64(k)*max(0, c.Rate-c.Capacity)
}

// Run simulates each strategy once.
func (c *SpiralConfig) Run(ctx context.Context, o Options) (*Result, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	strategies := selected(spiralStrategies, c.Strategies)
	runs, err := sweep(ctx, o, len(strategies)*c.Runs, func(i int) (spiralRun, error) {
		s, r := strategies[i/c.Runs], i%c.Runs
		return c.runOne(spiralStrategies[s], mix(o.Seed, uint64(s), uint64(r)))
	})
	if err != nil {
		return nil, err
	}
	secs := int(c.Duration / time.Second)
	marks := []int{1, secs / 4, secs / 2, secs - 1}
	res := &Result{
		Scenario: "spiral",
		Title: fmt.Sprintf("%.0f QPS offered to a backend that serves %.0f; every failure retried %v later; mean of %d runs",
			c.Rate, c.Capacity, c.Wait, c.Runs),
		Settings: settings(c.Params(), o),
	}
	cols := []Column{{Key: "strategy", Title: "strategy"}}
	for _, k := range marks {
		cols = append(cols, Column{Key: fmt.Sprintf("load_%ds", k), Title: fmt.Sprintf("load in s %d", k), Prec: 0})
	}
	cols = append(cols,
		Column{Key: "unbounded_end", Title: "Rate+k(Rate−Cap) at the end", Prec: 0},
		Column{Key: "served_per_s", Title: "served/s", Prec: 0},
		Column{Key: "amplification", Title: "attempts/query", Prec: 3},
		Column{Key: "budget_refused", Title: "budget refused", Prec: 0})
	res.Table.Columns = cols
	load := Chart{Title: "attempts per second at the backend", XLabel: "time (s)", YLabel: "attempts/s"}
	var formula Series
	formula.Name = "Rate + k·(Rate − Capacity)"
	for k := range secs {
		formula.Points = append(formula.Points, Point{X: float64(k), Y: c.spiralLoad(k)})
	}
	n := float64(c.Runs)
	for si, s := range strategies {
		perSec := make([]int64, secs)
		var total, served, requests, refused int64
		for r := range c.Runs {
			run := runs[si*c.Runs+r]
			res.Events += run.events
			for k := range secs {
				perSec[k] += run.load[k]
				total += run.load[k]
				served += run.served[k]
			}
			requests += run.requests
			refused += run.refused
		}
		row := []any{spiralStrategies[s]}
		for _, k := range marks {
			row = append(row, float64(perSec[k])/n)
		}
		row = append(row, c.spiralLoad(secs-1), float64(served)/float64(secs)/n, ratio(total, requests), float64(refused)/n)
		res.Table.Rows = append(res.Table.Rows, row)
		load.Series = append(load.Series, Series{Name: spiralStrategies[s], Points: bucketPoints(perSec, time.Second, 1/n)})
	}
	load.Series = append(load.Series, formula)
	res.Charts = []Chart{load}
	res.Notes = append(res.Notes, fmt.Sprintf(
		"Without a budget every failure comes back, so second k carries Rate + k·(Rate − Capacity) attempts (%.0f at %d s). A budget of one retry per ten queries holds the load near 1.1 × Rate = %.0f.",
		c.spiralLoad(secs-1), secs-1, 1.1*c.Rate))
	return res, nil
}
