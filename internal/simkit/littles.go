package simkit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/staggerhq/stagger/limit"
	"github.com/staggerhq/stagger/retry"
)

// LittlesLawConfig is a slow dependency: Poisson requests at Rate
// call a dependency whose latency is exponential with the given mean, in
// three set-ups: no limit ("unbounded"), a pool of Pool connections with a
// queue in front ("pool": requests wait for a free connection), and a
// bulkhead of Pool slots that answers at once when full ("bulkhead", the
// real limit.Bulkhead). Little's law says in flight L = λ·W in steady
// state; at 2 s a pool of 50 cannot keep up with 100 req/s (50 / 2 s = 25
// req/s), so its queue grows without end and there is no steady state.
//
// A second run per set-up shows the change as it happens: the dependency
// answers in the first latency until SlowAt, then every call hangs for the
// last latency (the SRE book's thread pool with hanging requests) — in
// flight climbs from ~10 to ~200 without a pool, the pool's 50 threads are
// all taken and its queue grows, the bulkhead holds 50 and refuses the rest.
type LittlesLawConfig struct {
	Rate      float64         // Poisson requests per second
	Latencies []time.Duration // mean dependency latencies (exponential); the step run goes from the first to the last
	Pool      int             // connections of "pool", slots of "bulkhead"
	Duration  time.Duration   // requests arrive during this long, warm-up included
	Warmup    time.Duration   // measurements start after this; < Duration
	SlowAt    time.Duration   // the step run: latency changes here (0: no step run)
	StepLen   time.Duration   // the step run's length
	Modes     []string        // of "unbounded", "pool", "bulkhead"; run in that order
}

var littleModes = []string{"unbounded", "pool", "bulkhead"}

// DefaultLittlesLaw returns 100 req/s, latency 0.1 s and 2 s, a pool of
// 50, measured over 1000 s after 100 s of warm-up.
func DefaultLittlesLaw() LittlesLawConfig {
	return LittlesLawConfig{Rate: 100, Latencies: []time.Duration{100 * time.Millisecond, 2 * time.Second},
		Pool: 50, Duration: 1100 * time.Second, Warmup: 100 * time.Second,
		SlowAt: 30 * time.Second, StepLen: 90 * time.Second, Modes: littleModes}
}

// Params returns the scenario's parameters.
func (c *LittlesLawConfig) Params() []*Param {
	return []*Param{
		floatParam(&c.Rate, "rate", "Poisson requests per second", 0.001, 1e6),
		dursParam(&c.Latencies, "latency", "mean dependency latencies to compare (exponential), comma-separated"),
		intParam(&c.Pool, "pool", "connections in the pool / slots in the bulkhead", 1, 1_000_000),
		durParam(&c.Duration, "duration", "requests arrive during this long", time.Second, 30*24*time.Hour),
		durParam(&c.Warmup, "warmup", "measure after this much time", 0, 30*24*time.Hour),
		durParam(&c.SlowAt, "slow-at", "step run: the dependency slows from the first to the last latency here (0: no step run)", 0, 24*time.Hour),
		durParam(&c.StepLen, "step-len", "step run: simulated time", time.Second, 24*time.Hour),
		listParam(&c.Modes, "mode", "set-ups", littleModes),
	}
}

func dursParam(v *[]time.Duration, name, usage string) *Param {
	return &Param{
		Name: name, Usage: usage,
		get: func() string {
			parts := make([]string, len(*v))
			for i, d := range *v {
				parts[i] = d.String()
			}
			return strings.Join(parts, ",")
		},
		set: func(s string) error {
			*v = nil
			for _, f := range strings.Split(s, ",") {
				d, err := time.ParseDuration(strings.TrimSpace(f))
				if err != nil {
					return fmt.Errorf("want durations such as 100ms,2s, got %q", f)
				}
				*v = append(*v, d)
			}
			return nil
		},
		check: func() error {
			if len(*v) == 0 {
				return fmt.Errorf("needs at least one duration")
			}
			for _, d := range *v {
				if d <= 0 || d > time.Hour {
					return fmt.Errorf("each must be in (0s, 1h], got %v", d)
				}
			}
			return nil
		},
	}
}

func (c *LittlesLawConfig) validate() error {
	if err := checkParams(c.Params()); err != nil {
		return err
	}
	if c.Warmup >= c.Duration {
		return invalid("warmup", "must be shorter than duration (%v), got %v", c.Duration, c.Warmup)
	}
	if n := c.Rate * c.Duration.Seconds() * float64(len(c.Latencies)*len(c.Modes)); n > 1e9 {
		return invalid("duration", "rate × duration × cases must be <= 1e9 requests, got %.3g", n)
	}
	if c.SlowAt > 0 && c.SlowAt >= c.StepLen {
		return invalid("slow-at", "must be shorter than step-len (%v), got %v", c.StepLen, c.SlowAt)
	}
	if n := c.Rate * c.StepLen.Seconds() * float64(len(c.Modes)); n > 1e9 {
		return invalid("step-len", "rate × step-len × set-ups must be <= 1e9 requests, got %.3g", n)
	}
	return nil
}

type littleRun struct {
	l, lambda, w  float64
	rejected      int64
	queueAtEnd    int
	inSystemAtEnd int64
	inService     float64 // time-average connections in use over the span
	unfinished    int64
	perSecond     []float64 // time-average in system per second
	events        uint64
}

const (
	evArrival int32 = iota // a request arrives
	evServed               // a request's dependency call returns (ID: request)
)

// runOne simulates one set-up for duration, measuring from warmup; the
// dependency's mean latency is before until slowAt (0: never) and after
// from then on.
func (c *LittlesLawConfig) runOne(mode string, before, after, slowAt, duration, warmup time.Duration, seed uint64) littleRun {
	rng := rand.New(pcg(seed, 1))
	p := &retry.Policy{MaxAttempts: 1}
	if mode != "unbounded" {
		p.Limiter, _ = limit.NewBulkhead(c.Pool)
	}
	d := driver{p}
	e := NewEngine(1024)
	sys := NewMeter(DefaultWindow, time.Second) // requests in the system: queue + service
	sys.Measure(warmup, duration)
	svc := NewMeter(DefaultWindow, time.Second) // connections in use
	svc.Measure(warmup, duration)
	var starts []time.Duration
	var queue []int32
	head := 0
	out := littleRun{}
	// per-second time-average of the number in system
	var inSys int64
	var lastT time.Duration
	secs := int(duration / time.Second)
	area := make([]float64, secs)
	integrate := func(t time.Duration) {
		for lastT < t && int(lastT/time.Second) < secs {
			next := min(t, (lastT/time.Second+1)*time.Second)
			area[lastT/time.Second] += float64(inSys) * (next - lastT).Seconds()
			lastT = next
		}
		lastT = max(lastT, t)
	}
	serve := func(id int32) {
		svc.Enter(e.Now())
		latency := before
		if slowAt > 0 && e.Now() >= slowAt {
			latency = after
		}
		e.After(time.Duration(rng.ExpFloat64()*float64(latency)), evServed, id)
	}
	gap := func() time.Duration { return time.Duration(rng.ExpFloat64() * float64(time.Second) / c.Rate) }
	e.At(gap(), evArrival, 0)
	for {
		ev, ok := e.Next()
		if !ok {
			break
		}
		now := e.Now()
		integrate(now)
		switch ev.Kind {
		case evArrival:
			if now >= duration {
				continue
			}
			e.After(gap(), evArrival, 0)
			r := d.begin(nil, e.Time())
			if r != retry.NoReason && mode == "bulkhead" {
				out.rejected++ // a controlled answer at once; never enters
				continue
			}
			starts = append(starts, now)
			id := int32(len(starts) - 1)
			sys.Enter(now)
			inSys++
			if r != retry.NoReason { // pool: wait for a connection
				queue = append(queue, id)
				continue
			}
			serve(id)
		case evServed:
			svc.Leave(now, 0)
			sys.Leave(now, starts[ev.ID])
			inSys--
			d.end(nil, e.Time(), 1, nil) // releases the connection
			for head < len(queue) && d.begin(nil, e.Time()) == retry.NoReason {
				serve(queue[head])
				head++
			}
			if head > 4096 && head*2 > len(queue) {
				queue = queue[:copy(queue, queue[head:])]
				head = 0
			}
		}
		if now < duration {
			out.queueAtEnd = len(queue) - head
			out.inSystemAtEnd = inSys
		}
	}
	out.l, out.lambda, out.w = sys.Little(e.Now())
	out.inService, _, _ = svc.Little(e.Now())
	out.unfinished = sys.Unfinished()
	out.perSecond = area
	out.events = e.Processed()
	return out
}

// Run simulates every latency in every mode.
func (c *LittlesLawConfig) Run(ctx context.Context, o Options) (*Result, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	modes := selected(littleModes, c.Modes)
	type key struct{ lat, mode int }
	var keys []key
	for li := range c.Latencies {
		for _, m := range modes {
			keys = append(keys, key{li, m})
		}
	}
	runs := make([]littleRun, len(keys))
	err := parallel(ctx, o, len(keys), func(i int) {
		k := keys[i]
		lat := c.Latencies[k.lat]
		runs[i] = c.runOne(littleModes[k.mode], lat, lat, 0, c.Duration, c.Warmup, mix(o.Seed, uint64(k.lat), uint64(k.mode)))
	})
	if err != nil {
		return nil, err
	}
	res := &Result{
		Scenario: "littles-law",
		Title: fmt.Sprintf("Poisson %g req/s to a dependency of exponential latency; pool/bulkhead of %d; measured over [%v, %v)",
			c.Rate, c.Pool, c.Warmup, c.Duration),
		Settings: settings(c.Params(), o),
		Table: Table{Columns: []Column{
			{Key: "latency_s", Title: "latency s", Prec: 3},
			{Key: "mode", Title: "set-up"},
			{Key: "lambda", Title: "λ admitted/s", Prec: 2},
			{Key: "w_s", Title: "W s", Prec: 3},
			{Key: "in_flight", Title: "L in flight", Prec: 1},
			{Key: "lambda_w", Title: "λ·W", Prec: 1},
			{Key: "error_pct", Title: "L vs λ·W %", Prec: 2},
			{Key: "connections", Title: "connections in use", Prec: 1},
			{Key: "rejected", Title: "rejected"},
			{Key: "queue_at_end", Title: "queued at end"},
			{Key: "steady", Title: "steady state"},
		}},
	}
	chart := Chart{Title: "requests in the system over time", XLabel: "time (s)", YLabel: "in flight (queue + service, log scale)", LogY: true,
		Shades: []Shade{{From: 0, To: c.Warmup.Seconds(), Label: "warm-up"}}}
	for i, k := range keys {
		run := runs[i]
		lat := c.Latencies[k.lat]
		mode := littleModes[k.mode]
		lw := run.lambda * run.w
		errPct := 0.0
		if lw > 0 {
			errPct = 100 * (run.l - lw) / lw
		}
		// steady when the set-up can serve what it admits
		steady := "yes"
		if mode == "pool" && run.lambda*lat.Seconds() >= float64(c.Pool) {
			steady = "no: queue grows"
		}
		res.Table.Rows = append(res.Table.Rows, []any{lat.Seconds(), mode, run.lambda, run.w, run.l, lw, errPct,
			run.inService, run.rejected, run.queueAtEnd, steady})
		res.Events += run.events
		chart.Series = append(chart.Series, Series{Name: fmt.Sprintf("%v %s", lat, mode), Points: perSecondPoints(run.perSecond)})
	}
	res.Charts = []Chart{chart}
	if c.SlowAt > 0 {
		first, last := c.Latencies[0], c.Latencies[len(c.Latencies)-1]
		steps := make([]littleRun, len(modes))
		err := parallel(ctx, o, len(modes), func(i int) {
			steps[i] = c.runOne(littleModes[modes[i]], first, last, c.SlowAt, c.StepLen, 0, mix(o.Seed, 0x57e9, uint64(modes[i])))
		})
		if err != nil {
			return nil, err
		}
		step := Chart{Title: fmt.Sprintf("requests in the system when the dependency slows from %v to %v at %v", first, last, c.SlowAt),
			XLabel: "time (s)", YLabel: "in flight (queue + service, log scale)", LogY: true,
			Shades: []Shade{{From: c.SlowAt.Seconds(), To: c.StepLen.Seconds(), Label: "slow"}}}
		var parts []string
		for i, m := range modes {
			run := steps[i]
			res.Events += run.events
			part := fmt.Sprintf("%s %d", littleModes[m], run.inSystemAtEnd)
			switch {
			case run.queueAtEnd > 0:
				part += fmt.Sprintf(" (%d queued)", run.queueAtEnd)
			case run.rejected > 0:
				part += fmt.Sprintf(" (%d refused at once)", run.rejected)
			}
			parts = append(parts, part)
			step.Series = append(step.Series, Series{Name: littleModes[m], Points: perSecondPoints(run.perSecond)})
		}
		res.Notes = append(res.Notes, fmt.Sprintf("Step run: the dependency answers in %v, then from %v on every call hangs for %v; in the system after %v: %s.",
			first, c.SlowAt, last, c.StepLen, strings.Join(parts, ", ")))
		res.Charts = append([]Chart{step}, res.Charts...)
	}
	res.Notes = append(res.Notes,
		"L is the time-average number of requests in the system (waiting + being served) over the measured span; λ counts the requests admitted in it and W is their mean time in the system (each is followed until it leaves).",
		fmt.Sprintf("A pool of %d serves at most %d / latency requests per second; beyond that the queue grows without end and there is no steady state: L and λ·W then measure a ramp, not an equilibrium.", c.Pool, c.Pool))
	return res, nil
}

func perSecondPoints(area []float64) []Point {
	pts := make([]Point, len(area))
	for i, a := range area {
		pts[i] = Point{X: float64(i), Y: a}
	}
	return pts
}
