package simkit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/staggerhq/stagger/limit"
	"github.com/staggerhq/stagger/retry"
)

// BimodalConfig is the SRE book's bimodal latency ("Addressing Cascading
// Failures", Site Reliability Engineering, 2016): frontends with Threads
// worker threads in all serve Rate queries per second that take Latency
// each, so Rate·Latency threads are busy (1,000 QPS × 0.1 s = 100 of
// 1,000). When a fraction Hang of the queries never completes and each
// holds its thread until the 100 s deadline, the hanging queries alone
// would need Rate·Hang·Deadline threads (5,000), and the frontend accepts
// only
//
//	Threads / (Rate · ((1 − Hang)·Latency + Hang·Deadline))
//
// of the queries (19.6% at Hang = 5%; the book's 80.4% error rate). With a
// per-attempt Timeout in place of the deadline the hanging queries give
// their threads back after Timeout, and everything is accepted again.
//
// The threads are a limit.Bulkhead in the shipped retry.Policy (a query
// that finds no free thread is refused at once); the other queries take
// Exp(mean Latency). Arrivals are Poisson; the shares are measured after
// Warmup (twice the deadline, so the hanging queries reach their steady
// number first).
type BimodalConfig struct {
	Rate       float64       // queries per second (Poisson)
	Threads    int           // worker threads (a bulkhead of this size)
	Latency    time.Duration // mean latency of a query that completes (exponential)
	Hangs      []float64     // fractions of queries that never complete, swept
	Deadline   time.Duration // "deadline": how long a hanging query holds its thread
	Timeout    time.Duration // "timeout": the per-attempt timeout that frees it
	Warmup     time.Duration // measure after this
	Duration   time.Duration // simulated time
	Strategies []string      // of "deadline", "timeout"
}

var bimodalStrategies = []string{"deadline", "timeout"}

// DefaultBimodal returns the SRE book's numbers (see [BimodalConfig]) with
// a 1 s per-attempt timeout and Hang = 0, 1%, 2%, 5%, 10%.
func DefaultBimodal() BimodalConfig {
	return BimodalConfig{Rate: 1000, Threads: 1000, Latency: 100 * time.Millisecond,
		Hangs: []float64{0, 0.01, 0.02, 0.05, 0.1}, Deadline: 100 * time.Second, Timeout: time.Second,
		Warmup: 200 * time.Second, Duration: 400 * time.Second, Strategies: bimodalStrategies}
}

// Params returns the scenario's parameters.
func (c *BimodalConfig) Params() []*Param {
	return []*Param{
		floatParam(&c.Rate, "rate", "queries per second (Poisson)", 0.001, 1e6),
		intParam(&c.Threads, "threads", "worker threads in all", 1, 10_000_000),
		durParam(&c.Latency, "latency", "mean latency of a query that completes (exponential)", time.Microsecond, time.Hour),
		floatsParam(&c.Hangs, "hang", "fractions of queries that never complete, comma-separated", 0, 1),
		durParam(&c.Deadline, "deadline", "deadline: how long a hanging query holds its thread", time.Millisecond, 24*time.Hour),
		durParam(&c.Timeout, "timeout", "timeout: per-attempt timeout that frees a hanging query's thread", time.Millisecond, 24*time.Hour),
		durParam(&c.Warmup, "warmup", "measure after this", 0, 24*time.Hour),
		durParam(&c.Duration, "duration", "simulated time", time.Second, 30*24*time.Hour),
		listParam(&c.Strategies, "strategy", "strategies", bimodalStrategies),
	}
}

func (c *BimodalConfig) validate() error {
	if err := checkParams(c.Params()); err != nil {
		return err
	}
	if c.Warmup >= c.Duration {
		return invalid("warmup", "must be < duration (%v), got %v", c.Duration, c.Warmup)
	}
	if n := c.Rate * c.Duration.Seconds() * float64(len(c.Hangs)*len(c.Strategies)); n > 1e9 {
		return invalid("duration", "rate × duration × hangs × strategies must be <= 1e9 queries, got %.3g", n)
	}
	return nil
}

// hold is how long a hanging query holds its thread under a strategy.
func (c *BimodalConfig) hold(strategy string) time.Duration {
	if strategy == "timeout" {
		return c.Timeout
	}
	return c.Deadline
}

// accepted is the book's share: Threads / (Rate · E[thread time]), at most 1.
func (c *BimodalConfig) accepted(strategy string, hang float64) float64 {
	work := c.Rate * ((1-hang)*c.Latency.Seconds() + hang*c.hold(strategy).Seconds())
	return min(1, float64(c.Threads)/work)
}

type bimodalRun struct {
	arrived, accepted, succeeded int64 // after the warm-up
	busy                         float64
	events                       uint64
}

const (
	evBimodalNew  int32 = iota // a query arrives
	evBimodalDone              // a query completes
	evBimodalHang              // a hanging query's thread is freed (deadline or timeout)
)

func (c *BimodalConfig) runOne(strategy string, hang float64, seed uint64) bimodalRun {
	pool, _ := limit.NewBulkhead(c.Threads) // Threads >= 1: checked
	p := &retry.Policy{MaxAttempts: 1, Limiter: pool}
	d := driver{p}
	rng := rand.New(pcg(seed, 1))
	e := NewEngine(c.Threads + 16)
	hold := c.hold(strategy)
	var out bimodalRun
	var busy int64
	e.At(poissonGap(rng, c.Rate), evBimodalNew, 0)
	for {
		ev, ok := e.Next()
		if !ok || ev.At >= c.Duration {
			break
		}
		now := e.Now()
		measured := now >= c.Warmup
		switch ev.Kind {
		case evBimodalNew:
			e.After(poissonGap(rng, c.Rate), evBimodalNew, 0)
			if measured {
				out.arrived++
				busy += int64(pool.InFlight()) // Poisson arrivals see time averages
			}
			if d.begin(nil, e.Time()) != retry.NoReason {
				continue // no free thread: refused at once
			}
			if measured {
				out.accepted++
			}
			if rng.Float64() < hang {
				e.After(hold, evBimodalHang, 0)
				continue
			}
			if measured {
				out.succeeded++
			}
			e.After(time.Duration(rng.ExpFloat64()*float64(c.Latency)), evBimodalDone, 0)
		case evBimodalDone:
			d.end(nil, e.Time(), 1, nil)
		case evBimodalHang:
			d.end(nil, e.Time(), 1, ErrTimeout)
		}
	}
	if out.arrived > 0 {
		out.busy = float64(busy) / float64(out.arrived)
	}
	out.events = e.Processed()
	return out
}

// Run sweeps the hanging fraction for each strategy.
func (c *BimodalConfig) Run(ctx context.Context, o Options) (*Result, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	strategies := selected(bimodalStrategies, c.Strategies)
	n := len(c.Hangs)
	runs, err := sweep(ctx, o, len(strategies)*n, func(i int) (bimodalRun, error) {
		s, k := strategies[i/n], i%n
		return c.runOne(bimodalStrategies[s], c.Hangs[k], mix(o.Seed, uint64(s), uint64(k))), nil
	})
	if err != nil {
		return nil, err
	}
	res := &Result{
		Scenario: "bimodal",
		Title: fmt.Sprintf("%g QPS, %d threads, queries take %v; a fraction hangs until the %v deadline or a %v timeout",
			c.Rate, c.Threads, c.Latency, c.Deadline, c.Timeout),
		Settings: settings(c.Params(), o),
		Table: Table{Columns: []Column{
			{Key: "strategy", Title: "strategy"},
			{Key: "hang", Title: "hang", Prec: 3},
			{Key: "queries", Title: "queries"},
			{Key: "accepted", Title: "accepted", Prec: 3},
			{Key: "book_accepted", Title: "Threads/(Rate·E[hold])", Prec: 3},
			{Key: "served", Title: "served", Prec: 3},
			{Key: "busy_threads", Title: "busy threads", Prec: 0},
		}},
	}
	chart := Chart{Title: "share of queries served vs share that hangs", XLabel: "hanging fraction", YLabel: "served"}
	for si, s := range strategies {
		name := bimodalStrategies[s]
		series := Series{Name: name}
		for k, h := range c.Hangs {
			run := runs[si*n+k]
			res.Events += run.events
			served := ratio(run.succeeded, run.arrived)
			res.Table.Rows = append(res.Table.Rows, []any{name, h, run.arrived, ratio(run.accepted, run.arrived),
				c.accepted(name, h), served, run.busy})
			series.Points = append(series.Points, Point{X: h, Y: served})
		}
		chart.Series = append(chart.Series, series)
	}
	res.Charts = []Chart{chart}
	res.Notes = append(res.Notes, fmt.Sprintf(
		"accepted: queries that found a free thread; served: those that completed. The book's share Threads / (Rate·E[hold]) is the limit of a pool refusing what it cannot hold (%.1f%% at 5%% hanging until the deadline).",
		100*c.accepted("deadline", 0.05)))
	return res, nil
}
