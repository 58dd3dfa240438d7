package simkit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/staggerhq/stagger/budget"
	"github.com/staggerhq/stagger/retry"
)

// HedgeConfig is hedged requests under a latency tail (Dean & Barroso,
// "The Tail at Scale", CACM 2013): callers send requests (Poisson) to a
// receiver with Workers workers and one FIFO queue; an attempt takes
// Exp(mean Service), and with probability Tail its worker first hiccups
// for Hiccup (a pause, a slow disk), so the caller's p99 is set by the
// hiccups. A hedge is a second attempt sent when the first has not
// answered after a delay; the first answer wins and the other attempt is
// canceled — taken out of the queue, or its worker freed at once.
//
// Each request is retry.Policy{MaxAttempts: 2} through the shipped Step
// (Begin for the original and the hedge, End for the winner; a canceled
// loser tells nothing, as retry.Hedge does), and the delay comes from a
// shipped retry.Hedge. Strategies:
//
//   - none: no hedge;
//   - hedge: a hedge after the fixed Delay;
//   - hedge+budget: the same, each hedge needing a budget.TokenBucket's
//     Retry (full at the start; 1 credit per request, 10 per hedge), so
//     at most about one request in ten is hedged however slow the
//     receiver gets (gRPC A6 counts hedges toward throttling);
//   - hedge-q: a hedge after the Quantile of the latency the retry.Hedge
//     learns (Delay until it has 100 samples), no budget.
//
// The load swept is that of the originals, as a fraction of the capacity
// Workers / (Service + Tail·Hiccup). Hedging adds attempts in proportion
// to the requests slower than the delay, and at high load queueing makes
// more of them slow: without a budget a fixed delay feeds on itself.
// Requests are measured after Warmup; one still unanswered at the end
// counts with the time it has waited (a lower bound).
type HedgeConfig struct {
	Workers    int           // the receiver's workers (one FIFO queue in front)
	Service    time.Duration // mean service time of an attempt (exponential)
	Tail       float64       // probability that an attempt's worker hiccups first
	Hiccup     time.Duration // how long a hiccup holds the worker
	Loads      []float64     // load of the originals, as a fraction of the capacity, swept
	Delay      time.Duration // hedge, hedge+budget: the fixed delay; hedge-q: the delay until it has learned
	Quantile   float64       // hedge-q: the latency quantile hedged after
	Cancel     string        // what a cancellation stops: "none", "queued" or "all"
	Warmup     time.Duration // measure requests sent after this
	Duration   time.Duration // simulated time
	Strategies []string      // of "none", "hedge", "hedge+budget", "hedge-q"
}

var (
	hedgeStrategies = []string{"none", "hedge", "hedge+budget", "hedge-q"}
	hedgeCancels    = []string{"none", "queued", "all"}
)

// DefaultHedge returns 20 workers, attempts of Exp(10 ms) of which 2%
// hiccup for 100 ms first (capacity 1,667 requests/s), loads 0.2 to 0.95,
// a 30 ms delay (about the 95th percentile of an attempt), the 0.95
// quantile, cancellations that reach the queue only, 60 s after a 5 s
// warm-up.
func DefaultHedge() HedgeConfig {
	return HedgeConfig{Workers: 20, Service: 10 * time.Millisecond, Tail: 0.02, Hiccup: 100 * time.Millisecond,
		Loads: []float64{0.2, 0.5, 0.7, 0.8, 0.85, 0.9, 0.95}, Delay: 30 * time.Millisecond, Quantile: 0.95,
		Cancel: "queued", Warmup: 5 * time.Second, Duration: 65 * time.Second, Strategies: hedgeStrategies}
}

// Params returns the scenario's parameters.
func (c *HedgeConfig) Params() []*Param {
	return []*Param{
		intParam(&c.Workers, "workers", "the receiver's workers (one FIFO queue in front)", 1, 100_000),
		durParam(&c.Service, "service", "mean service time of an attempt (exponential)", time.Microsecond, time.Hour),
		floatParam(&c.Tail, "tail", "probability that an attempt's worker hiccups first", 0, 1),
		durParam(&c.Hiccup, "hiccup", "how long a hiccup holds the worker", 0, time.Hour),
		floatsParam(&c.Loads, "load", "loads of the originals as fractions of the capacity, comma-separated", 0.001, 2),
		durParam(&c.Delay, "delay", "hedge: the fixed delay before the hedge (hedge-q: until it has learned)", time.Microsecond, time.Hour),
		floatParam(&c.Quantile, "quantile", "hedge-q: the latency quantile hedged after, in (0, 1)", 0.01, 0.999),
		choiceParam(&c.Cancel, "cancel", "what the receiver stops of a canceled attempt: none, the queued ones, or all (frees the worker)", hedgeCancels),
		durParam(&c.Warmup, "warmup", "measure requests sent after this", 0, 24*time.Hour),
		durParam(&c.Duration, "duration", "simulated time", time.Second, 24*time.Hour),
		listParam(&c.Strategies, "strategy", "strategies", hedgeStrategies),
	}
}

// capacity is the requests per second the workers serve without hedges.
func (c *HedgeConfig) capacity() float64 {
	return float64(c.Workers) / (c.Service.Seconds() + c.Tail*c.Hiccup.Seconds())
}

func (c *HedgeConfig) validate() error {
	if err := checkParams(c.Params()); err != nil {
		return err
	}
	if c.Warmup >= c.Duration {
		return invalid("warmup", "must be < duration (%v), got %v", c.Duration, c.Warmup)
	}
	if n := c.capacity() * slices.Max(c.Loads) * c.Duration.Seconds() * float64(len(c.Loads)*len(c.Strategies)); n > 2e8 {
		return invalid("duration", "capacity × load × duration × loads × strategies must be <= 2e8 requests, got %.3g", n)
	}
	return nil
}

type hedgeSimRun struct {
	requests, hedges, refused int64
	lat                       []time.Duration // of the measured requests
	busy                      time.Duration   // worker time spent after the warm-up
	delay                     time.Duration   // the hedge delay at the end
	events                    uint64
}

type hedgeCall struct {
	start time.Duration
	att   [2]int32 // attempt ids; -1: none
	done  bool
}

const (
	hedgeQueued uint8 = iota
	hedgeServing
	hedgeOver // served or canceled
)

type hedgeAttempt struct {
	call  int32
	n     int8 // attempt number: 1 or 2
	state uint8
	began time.Duration
}

const (
	evHedgeNew  int32 = iota // a request arrives
	evHedgeFire              // a request's hedge delay ends (ID: request)
	evHedgeDone              // a worker finishes an attempt (ID: attempt)
)

func (c *HedgeConfig) runOne(strategy string, load float64, seed uint64) hedgeSimRun {
	p := &retry.Policy{MaxAttempts: 2}
	if strategy == "hedge+budget" {
		p.Budget = &budget.TokenBucket{}
	}
	h := &retry.Hedge{Delay: c.Delay}
	if strategy == "hedge-q" {
		h.Quantile = c.Quantile
	}
	d := driver{p}
	rng := rand.New(pcg(seed, 1))
	rate := load * c.capacity()
	e := NewEngine(1 << 12)
	var (
		out   hedgeSimRun
		calls []hedgeCall
		atts  []hedgeAttempt
		queue []int32 // attempts waiting for a worker, FIFO; canceled ones are skipped
		busy  int
	)
	measure := func(from, to time.Duration) { // worker time inside the measured span
		out.busy += max(0, min(to, c.Duration)-max(from, c.Warmup))
	}
	serve := func(a int32, now time.Duration) {
		atts[a].state, atts[a].began = hedgeServing, now
		busy++
		s := time.Duration(rng.ExpFloat64() * float64(c.Service))
		if rng.Float64() < c.Tail {
			s += c.Hiccup
		}
		e.At(now+s, evHedgeDone, a)
	}
	send := func(call int32, n int8, now time.Duration) {
		atts = append(atts, hedgeAttempt{call: call, n: n})
		a := int32(len(atts) - 1)
		calls[call].att[n-1] = a
		if busy < c.Workers {
			serve(a, now)
		} else {
			queue = append(queue, a)
		}
	}
	next := func(now time.Duration) { // a worker is free: the next attempt still wanted
		for busy < c.Workers && len(queue) > 0 {
			a := queue[0]
			queue = queue[1:]
			if atts[a].state == hedgeQueued {
				serve(a, now)
			}
		}
	}
	e.At(poissonGap(rng, rate), evHedgeNew, 0)
	for {
		ev, ok := e.Next()
		if !ok || ev.At >= c.Duration {
			break
		}
		now := e.Now()
		switch ev.Kind {
		case evHedgeNew:
			e.After(poissonGap(rng, rate), evHedgeNew, 0)
			d.begin(nil, e.Time()) // the Budget's Request; nothing here refuses an original
			calls = append(calls, hedgeCall{start: now, att: [2]int32{-1, -1}})
			id := int32(len(calls) - 1)
			send(id, 1, now)
			if strategy != "none" {
				e.After(h.CurrentDelay(), evHedgeFire, id)
			}
		case evHedgeFire:
			cl := &calls[ev.ID]
			if cl.done {
				continue
			}
			if p.Budget != nil && !p.Budget.Retry(e.Time()) {
				if cl.start >= c.Warmup {
					out.refused++
				}
				continue
			}
			d.againN(nil, 2, e.Time())
			if cl.start >= c.Warmup {
				out.hedges++
			}
			send(ev.ID, 2, now)
		case evHedgeDone:
			at := &atts[ev.ID]
			if at.state != hedgeServing {
				continue // canceled while it ran: its worker was freed then
			}
			at.state = hedgeOver
			busy--
			measure(at.began, now)
			if cl := &calls[at.call]; !cl.done {
				cl.done = true
				d.end(nil, e.Time(), int(at.n), nil) // the winner
				h.Observe(now - cl.start)
				if cl.start >= c.Warmup {
					out.lat = append(out.lat, now-cl.start)
				}
				if o := cl.att[2-at.n]; o >= 0 && c.Cancel != "none" { // cancel the loser
					switch atts[o].state {
					case hedgeQueued:
						atts[o].state = hedgeOver
					case hedgeServing:
						if c.Cancel != "all" {
							break // its worker finishes it for nobody
						}
						atts[o].state = hedgeOver
						busy--
						measure(atts[o].began, now)
					}
				}
			}
			next(now)
		}
	}
	for i := range calls {
		if cl := &calls[i]; cl.start >= c.Warmup {
			out.requests++
			if !cl.done {
				out.lat = append(out.lat, c.Duration-cl.start)
			}
		}
	}
	for i := range atts {
		if atts[i].state == hedgeServing {
			measure(atts[i].began, c.Duration)
		}
	}
	slices.Sort(out.lat)
	out.delay = h.CurrentDelay()
	out.events = e.Processed()
	return out
}

// quantileOf returns the q-quantile of sorted (nearest rank); 0 when empty.
func quantileOf(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// Run sweeps the load for each strategy.
func (c *HedgeConfig) Run(ctx context.Context, o Options) (*Result, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	strategies := selected(hedgeStrategies, c.Strategies)
	n := len(c.Loads)
	runs, err := sweep(ctx, o, len(strategies)*n, func(i int) (hedgeSimRun, error) {
		s, k := strategies[i/n], i%n
		return c.runOne(hedgeStrategies[s], c.Loads[k], mix(o.Seed, uint64(k))), nil
	})
	if err != nil {
		return nil, err
	}
	span := float64(c.Workers) * (c.Duration - c.Warmup).Seconds()
	res := &Result{
		Scenario: "hedge",
		Title: fmt.Sprintf("%d workers, attempts Exp(%v), %g%% hiccup %v first (capacity %.0f req/s); hedge after %v or the learned %g quantile; cancel %s",
			c.Workers, c.Service, 100*c.Tail, c.Hiccup, c.capacity(), c.Delay, c.Quantile, c.Cancel),
		Settings: settings(c.Params(), o),
		Table: Table{Columns: []Column{
			{Key: "strategy", Title: "strategy"},
			{Key: "load", Title: "load", Prec: 2},
			{Key: "requests", Title: "requests"},
			{Key: "hedge_rate", Title: "hedged", Prec: 3},
			{Key: "refused", Title: "refused by budget", Prec: 3},
			{Key: "attempts_per_request", Title: "attempts/request", Prec: 3},
			{Key: "utilization", Title: "receiver busy", Prec: 3},
			{Key: "p50_ms", Title: "p50 ms", Prec: 1},
			{Key: "p99_ms", Title: "p99 ms", Prec: 1},
			{Key: "p999_ms", Title: "p99.9 ms", Prec: 1},
			{Key: "delay_ms", Title: "delay ms at end", Prec: 1},
		}},
	}
	p99 := Chart{Title: "the caller's p99 latency vs the load of the originals", XLabel: "load (fraction of capacity)", YLabel: "p99 (ms)", LogY: true}
	busy := Chart{Title: "the receiver's load: share of worker time busy", XLabel: "load (fraction of capacity)", YLabel: "busy"}
	msf := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	for si, s := range strategies {
		name := hedgeStrategies[s]
		ps, bs := Series{Name: name}, Series{Name: name}
		for k, load := range c.Loads {
			run := runs[si*n+k]
			res.Events += run.events
			util := run.busy.Seconds() / span
			res.Table.Rows = append(res.Table.Rows, []any{name, load, run.requests, ratio(run.hedges, run.requests), ratio(run.refused, run.requests),
				1 + ratio(run.hedges, run.requests), util,
				msf(quantileOf(run.lat, 0.5)), msf(quantileOf(run.lat, 0.99)), msf(quantileOf(run.lat, 0.999)), msf(run.delay)})
			ps.Points = append(ps.Points, Point{X: load, Y: msf(quantileOf(run.lat, 0.99))})
			bs.Points = append(bs.Points, Point{X: load, Y: util})
		}
		p99.Series = append(p99.Series, ps)
		busy.Series = append(busy.Series, bs)
	}
	res.Charts = []Chart{p99, busy}
	res.Notes = append(res.Notes,
		"hedged: hedges sent per request; attempts/request: what the receiver is sent per request (1 + hedged); receiver busy: the workers' time spent, canceled work included, as a share of all of it.",
		"Dean & Barroso suggest hedging after the 95th-percentile latency (about 5% more load), and report a BigTable benchmark whose 99.9th percentile fell from 1,800 ms to 74 ms with a 10 ms hedge delay, for 2% more requests. Past the point where queueing makes more than a few requests slower than the delay, a fixed-delay hedge adds load that adds queueing; the budget caps hedges at about one request in ten, and a learned quantile moves the delay with the latency.")
	return res, nil
}
