package simkit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/staggerhq/stagger/limit"
	"github.com/staggerhq/stagger/retry"
)

// LimitsConfig compares client-side concurrency limits under a latency
// step: a client sends Rate requests per second (Poisson) to a dependency
// with Workers workers and a FIFO queue, whose service time is
// Exp(mean Before) until StepAt and Exp(mean After) from then on, so its
// capacity drops from Workers/Before to Workers/After requests per second.
// The client times a request out after Timeout (the dependency still does
// the work), and holds it in one of:
//
//   - none: no limit; past the step the queue grows without end, every
//     request times out and the dependency works only on requests nobody
//     waits for;
//   - bulkhead: a fixed limit.Bulkhead of Bulkhead slots; with Bulkhead <=
//     Workers nothing queues, and by Little's law it carries
//     min(Rate, Bulkhead/After) requests per second after the step,
//     refusing the rest at once;
//   - aimd: limit.AIMD with the defaults of Netflix's concurrency-limits
//     AIMDLimit (initial 20, min 20, max 200, backoff 0.9): it grows by one
//     slot per limit's worth of successes and shrinks by 0.9 at every
//     timeout, so it finds the dependency's new capacity by itself.
//
// Every attempt goes through the shipped retry.Policy (Begin takes the
// limiter's slot, End gives it back with the outcome), without retries.
// Defaults: 1,000 req/s, 50 workers, 20 ms → 100 ms at 30 s (capacity
// 2,500 → 500 req/s), a 1 s timeout, a bulkhead of 50, 90 s.
type LimitsConfig struct {
	Rate          float64       // requests per second (Poisson)
	Workers       int           // the dependency's workers
	Before, After time.Duration // mean service time before and after the step (exponential)
	StepAt        time.Duration // when the service time steps
	Timeout       time.Duration // client timeout per request (the work is not cancelled)
	Bulkhead      int           // bulkhead: slots
	AIMDInitial   int           // aimd: initial limit
	AIMDMin       int           // aimd: smallest limit
	AIMDMax       int           // aimd: largest limit
	AIMDBackoff   float64       // aimd: factor applied on a timeout
	Duration      time.Duration // simulated time
	Modes         []string      // of "none", "bulkhead", "aimd"
}

var limitsModes = []string{"none", "bulkhead", "aimd"}

// DefaultLimits returns the set-up of [LimitsConfig].
func DefaultLimits() LimitsConfig {
	return LimitsConfig{Rate: 1000, Workers: 50, Before: 20 * time.Millisecond, After: 100 * time.Millisecond,
		StepAt: 30 * time.Second, Timeout: time.Second, Bulkhead: 50,
		AIMDInitial: 20, AIMDMin: 20, AIMDMax: 200, AIMDBackoff: 0.9,
		Duration: 90 * time.Second, Modes: limitsModes}
}

// Params returns the scenario's parameters.
func (c *LimitsConfig) Params() []*Param {
	return []*Param{
		floatParam(&c.Rate, "rate", "requests per second (Poisson)", 0.001, 1e6),
		intParam(&c.Workers, "workers", "the dependency's workers (a FIFO queue in front)", 1, 1_000_000),
		durParam(&c.Before, "before", "mean service time before the step (exponential)", time.Microsecond, time.Hour),
		durParam(&c.After, "after", "mean service time from the step on (exponential)", time.Microsecond, time.Hour),
		durParam(&c.StepAt, "step-at", "when the service time steps", 0, 24*time.Hour),
		durParam(&c.Timeout, "timeout", "client timeout per request (the dependency still does the work)", time.Millisecond, time.Hour),
		intParam(&c.Bulkhead, "bulkhead", "bulkhead: slots", 1, 1_000_000),
		intParam(&c.AIMDInitial, "aimd-initial", "aimd: initial limit", 1, 1_000_000),
		intParam(&c.AIMDMin, "aimd-min", "aimd: smallest limit", 1, 1_000_000),
		intParam(&c.AIMDMax, "aimd-max", "aimd: largest limit", 1, 1_000_000),
		floatParam(&c.AIMDBackoff, "aimd-backoff", "aimd: factor applied to the limit on a timeout, in (0, 1)", 0.001, 0.999),
		durParam(&c.Duration, "duration", "simulated time", 2*time.Second, 24*time.Hour),
		listParam(&c.Modes, "mode", "limits", limitsModes),
	}
}

func (c *LimitsConfig) validate() error {
	if err := checkParams(c.Params()); err != nil {
		return err
	}
	switch {
	case c.AIMDMax < c.AIMDMin:
		return invalid("aimd-max", "must be >= aimd-min (%d), got %d", c.AIMDMin, c.AIMDMax)
	case c.AIMDInitial < c.AIMDMin || c.AIMDInitial > c.AIMDMax:
		return invalid("aimd-initial", "must be in [aimd-min, aimd-max] = [%d, %d], got %d", c.AIMDMin, c.AIMDMax, c.AIMDInitial)
	}
	if _, err := limit.NewAIMD(c.AIMDInitial, c.AIMDMin, c.AIMDMax, c.AIMDBackoff); err != nil {
		return invalid("aimd-backoff", "%v", err)
	}
	if c.StepAt >= c.Duration {
		return invalid("step-at", "must be < duration (%v), got %v", c.Duration, c.StepAt)
	}
	if n := c.Rate * c.Duration.Seconds() * float64(len(c.Modes)); n > 1e9 {
		return invalid("duration", "rate × duration × modes must be <= 1e9 requests, got %.3g", n)
	}
	return nil
}

type limitsRun struct {
	goodput, timeouts, refused, limits []int64 // per second; limits: the limit (none: in flight) at each second's end
	requests, wasted                   int64
	latency                            time.Duration // summed over successes after the step
	lateOK                             int64         // successes after the step
	maxInFlight                        int64
	events                             uint64
}

type limitsReq struct {
	sent          time.Duration
	done, timeout bool
}

const (
	evLimitsNew     int32 = iota // a request arrives
	evLimitsServed               // a worker finishes a request (ID: request)
	evLimitsTimeout              // the client's timeout fires (ID: request)
)

func (c *LimitsConfig) runOne(mode string, seed uint64) limitsRun {
	p := &retry.Policy{MaxAttempts: 1}
	var aimd *limit.AIMD
	var pool *limit.Bulkhead
	switch mode {
	case "bulkhead":
		pool, _ = limit.NewBulkhead(c.Bulkhead) // checked: >= 1
		p.Limiter = pool
	case "aimd":
		aimd, _ = limit.NewAIMD(c.AIMDInitial, c.AIMDMin, c.AIMDMax, c.AIMDBackoff) // checked in validate
		p.Limiter = aimd
	}
	d := driver{p}
	rng := rand.New(pcg(seed, 1))
	secs := int(c.Duration / time.Second)
	out := limitsRun{goodput: make([]int64, secs), timeouts: make([]int64, secs), refused: make([]int64, secs), limits: make([]int64, secs)}
	e := NewEngine(1 << 12)
	var reqs []limitsReq
	var queue []int32 // FIFO of requests waiting for a worker
	busy, inFlight := 0, int64(0)
	serve := func(id int32, now time.Duration) {
		mean := c.Before
		if now >= c.StepAt {
			mean = c.After
		}
		busy++
		e.At(now+time.Duration(rng.ExpFloat64()*float64(mean)), evLimitsServed, id)
	}
	sampled := 0
	sample := func(upTo time.Duration) { // the limit at the end of each whole second before upTo
		for sampled < secs && time.Duration(sampled+1)*time.Second <= upTo {
			switch {
			case aimd != nil:
				out.limits[sampled] = int64(aimd.Limit())
			case pool != nil:
				out.limits[sampled] = int64(pool.Size())
			default:
				out.limits[sampled] = inFlight
			}
			sampled++
		}
	}
	e.At(poissonGap(rng, c.Rate), evLimitsNew, 0)
	for {
		ev, ok := e.Next()
		if !ok || ev.At >= c.Duration {
			break
		}
		now := e.Now()
		sample(now)
		k := int(now / time.Second)
		switch ev.Kind {
		case evLimitsNew:
			e.After(poissonGap(rng, c.Rate), evLimitsNew, 0)
			out.requests++
			if d.begin(nil, e.Time()) != retry.NoReason {
				out.refused[k]++
				continue
			}
			inFlight++
			out.maxInFlight = max(out.maxInFlight, inFlight)
			reqs = append(reqs, limitsReq{sent: now})
			id := int32(len(reqs) - 1)
			e.At(now+c.Timeout, evLimitsTimeout, id)
			if busy < c.Workers {
				serve(id, now)
			} else {
				queue = append(queue, id)
			}
		case evLimitsServed:
			busy--
			if len(queue) > 0 {
				next := queue[0]
				queue = queue[1:]
				serve(next, now)
			}
			r := &reqs[ev.ID]
			if r.timeout {
				out.wasted++
				continue
			}
			r.done = true
			inFlight--
			d.end(nil, e.Time(), 1, nil)
			out.goodput[k]++
			if r.sent >= c.StepAt {
				out.latency += now - r.sent
				out.lateOK++
			}
		case evLimitsTimeout:
			r := &reqs[ev.ID]
			if r.done {
				continue
			}
			r.timeout = true
			inFlight--
			d.end(nil, e.Time(), 1, ErrTimeout)
			out.timeouts[k]++
		}
	}
	sample(c.Duration)
	out.events = e.Processed()
	return out
}

// Run simulates each mode once.
func (c *LimitsConfig) Run(ctx context.Context, o Options) (*Result, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	modes := selected(limitsModes, c.Modes)
	runs, err := sweep(ctx, o, len(modes), func(i int) (limitsRun, error) {
		return c.runOne(limitsModes[modes[i]], mix(o.Seed, uint64(modes[i]))), nil
	})
	if err != nil {
		return nil, err
	}
	secs := int(c.Duration / time.Second)
	step := int(c.StepAt / time.Second)
	late := (step + secs + 1) / 2 // judge the second half of the time after the step
	capAfter := float64(c.Workers) / c.After.Seconds()
	res := &Result{
		Scenario: "limits",
		Title: fmt.Sprintf("%g req/s to %d workers; service %v → %v at %v (capacity %.0f → %.0f req/s); timeout %v",
			c.Rate, c.Workers, c.Before, c.After, c.StepAt, float64(c.Workers)/c.Before.Seconds(), capAfter, c.Timeout),
		Settings: settings(c.Params(), o),
		Table: Table{Columns: []Column{
			{Key: "mode", Title: "limit"},
			{Key: "goodput_before", Title: "goodput before", Prec: 0},
			{Key: "goodput_after", Title: "goodput late", Prec: 0},
			{Key: "expected_after", Title: "min(rate, limit/after, capacity)", Prec: 0},
			{Key: "timeouts_after", Title: "timeouts/s late", Prec: 0},
			{Key: "refused_after", Title: "refused/s late", Prec: 0},
			{Key: "latency_ms", Title: "latency ms after", Prec: 1},
			{Key: "limit_end", Title: "limit at end"},
			{Key: "max_in_flight", Title: "max in flight"},
			{Key: "wasted", Title: "wasted work"},
		}},
	}
	shade := []Shade{{From: c.StepAt.Seconds(), To: c.Duration.Seconds(), Label: "slow"}}
	good := Chart{Title: "goodput per second", XLabel: "time (s)", YLabel: "requests/s served in time", Shades: shade}
	lim := Chart{Title: "limit (none: requests in flight) at each second", XLabel: "time (s)", YLabel: "slots", Shades: shade}
	for i, m := range modes {
		name := limitsModes[m]
		run := runs[i]
		res.Events += run.events
		var want any = "-"
		switch name {
		case "bulkhead":
			want = min(c.Rate, float64(c.Bulkhead)/c.After.Seconds(), capAfter)
		case "none":
			if c.Rate > capAfter {
				want = 0.0 // the queue grows past the timeout and stays there
			} else {
				want = c.Rate
			}
		}
		latency := 0.0
		if run.lateOK > 0 {
			latency = float64(run.latency) / float64(run.lateOK) / float64(time.Millisecond)
		}
		res.Table.Rows = append(res.Table.Rows, []any{name, meanRange(run.goodput, 0, step), meanRange(run.goodput, late, secs), want,
			meanRange(run.timeouts, late, secs), meanRange(run.refused, late, secs), latency, run.limits[secs-1], run.maxInFlight, run.wasted})
		good.Series = append(good.Series, Series{Name: name, Points: bucketPoints(run.goodput, time.Second, 1)})
		lim.Series = append(lim.Series, Series{Name: name, Points: bucketPoints(run.limits, time.Second, 1)})
	}
	res.Charts = []Chart{good, lim}
	res.Notes = append(res.Notes, fmt.Sprintf(
		"late: the second half of the time after the step (%d–%d s). A bulkhead of B slots carries at most B/after = %.0f req/s (Little's law); without a limit the queue grows past the timeout once the rate exceeds the capacity after the step (%.0f req/s).",
		late, secs, float64(c.Bulkhead)/c.After.Seconds(), capAfter))
	return res, nil
}
