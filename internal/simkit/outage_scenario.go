package simkit

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/retry"
)

// OutageConfig is the four-caller 700 ms outage of the lab: callers each retry one
// logical request until a gateway that is down for Outage accepts it.
type OutageConfig struct {
	Callers    int           // callers, each retrying one request until accepted
	Outage     time.Duration // how long the gateway is down from t=0
	RTT        time.Duration // round trip of one attempt, spent at the gateway after arrival (as the lab's)
	Ramp       time.Duration // caller i (1..N) starts i·Ramp/N after the start
	Window     time.Duration // the receiving side's peak window
	Wait       time.Duration // "immediate": the wait before every retry
	Base       time.Duration // "expo-full": the first window (60, 120, 240 … ms)
	Strategies []string      // of "immediate", "expo-full"; run in that order
	Log        int           // print every attempt of the first Log callers
}

var outageStrategies = []string{"immediate", "expo-full"}

// DefaultOutage returns the lab's default outage (labkit.FourCallerOutage)
// in virtual time: 4 callers starting 12 ms apart over a 48 ms ramp, a
// gateway down for the first 700 ms that decides each attempt when it
// arrives and answers 26.2 ms later, peaks in 200 ms windows. "Retry
// immediately" then makes 64 attempts (16 per caller at 46.2 ms spacing)
// with a peak of 18, as the lab does; started together, the callers
// would peak at 20.
func DefaultOutage() OutageConfig {
	return OutageConfig{
		Callers: 4, Outage: 700 * time.Millisecond, RTT: 26200 * time.Microsecond, Ramp: 48 * time.Millisecond,
		Window: DefaultWindow, Wait: 20 * time.Millisecond, Base: 60 * time.Millisecond,
		Strategies: outageStrategies, Log: 1,
	}
}

// Params returns the scenario's parameters.
func (c *OutageConfig) Params() []*Param {
	return []*Param{
		intParam(&c.Callers, "callers", "callers, each retrying one request until accepted", 1, 1_000_000),
		durParam(&c.Outage, "outage", "how long the gateway is down from t=0", 0, time.Hour),
		durParam(&c.RTT, "rtt", "round trip of one attempt: the gateway decides it on arrival and answers this much later", time.Microsecond, time.Minute),
		durParam(&c.Ramp, "ramp", "callers start over this span: caller i of N sends its first attempt i·ramp/N after the start (0: all at once)", 0, time.Hour),
		durParam(&c.Window, "window", "width of the window the peak is counted in", time.Millisecond, time.Hour),
		durParam(&c.Wait, "wait", "immediate: wait before every retry", 0, time.Hour),
		durParam(&c.Base, "base", "expo-full: window after the first failure (doubles, full jitter, whole ms)", time.Millisecond, time.Hour),
		listParam(&c.Strategies, "strategy", "strategies to run", outageStrategies),
		intParam(&c.Log, "log", "print every attempt of the first N callers one line per attempt", 0, 1000),
	}
}

func (c *OutageConfig) policy(name string) *retry.Policy {
	p := &retry.Policy{MaxAttempts: math.MaxInt}
	switch name {
	case "immediate":
		p.Schedule = backoff.Constant(c.Wait)
	case "expo-full":
		p.Schedule = backoff.Exponential{Base: c.Base, Jitter: backoff.Full, Unit: time.Millisecond}
	}
	return p
}

// model is the outage model of c.
func (c *OutageConfig) model() outageModel {
	return outageModel{callers: c.Callers, jobs: 1, outage: c.Outage, rtt: c.RTT, atServer: true, ramp: c.Ramp,
		window: c.Window, bucket: c.Window, logCallers: c.Log, countWaits: true}
}

// Run simulates each strategy once.
func (c *OutageConfig) Run(ctx context.Context, o Options) (*Result, error) {
	if err := checkParams(c.Params()); err != nil {
		return nil, err
	}
	if slices.Contains(c.Strategies, "immediate") {
		if n := outageAttempts(c.Callers, c.Outage, c.RTT+c.Wait, 0); n > maxAttempts {
			return nil, invalid("callers", "retrying immediately would make ~%.3g attempts (callers × outage / (rtt + wait)); keep it <= %.0g", n, maxAttempts)
		}
	}
	res := &Result{
		Scenario: "outage",
		Title:    fmt.Sprintf("%d callers, gateway down %v, each retries until accepted", c.Callers, c.Outage),
		Settings: settings(c.Params(), o),
		Table: Table{Columns: []Column{
			{Key: "strategy", Title: "strategy"},
			{Key: "callers", Title: "callers"},
			{Key: "attempts", Title: "attempts"},
			{Key: "accepted", Title: "accepted"},
			{Key: "peak", Title: "peak/" + shortDur(c.Window)},
			{Key: "distinct_waits", Title: "distinct waits"},
			{Key: "last_accept_ms", Title: "last accept ms", Prec: 0},
			{Key: "attempts_per_request", Title: "attempts/request", Prec: 2},
		}},
	}
	load := Chart{Title: "attempts per " + shortDur(c.Window) + " window", XLabel: "time (s)", YLabel: "attempts",
		Shades: []Shade{{From: 0, To: c.Outage.Seconds(), Label: "down"}}}
	for _, i := range selected(outageStrategies, c.Strategies) {
		name := outageStrategies[i]
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		p := c.policy(name)
		p.Rand = pcg(o.Seed, uint64(i))
		run := c.model().run(p)
		m := run.m
		peak, _ := m.Peak()
		waits := len(run.waits)
		res.Table.Rows = append(res.Table.Rows, []any{name, c.Callers, m.Calls(), m.Successes(), peak, waits,
			float64(run.lastAccept) / float64(time.Millisecond), m.Amplification()})
		res.Events += run.events
		load.Series = append(load.Series, Series{Name: name, Points: bucketPoints(m.Load(), c.Window, 1)})
		if c.Log > 0 {
			title := map[string]string{"immediate": "RETRY IMMEDIATELY", "expo-full": "EXPONENTIAL + JITTER"}[name]
			res.Log = append(res.Log, fmt.Sprintf("%s: %d callers, %d attempts total, %d accepted, peak %d",
				title, c.Callers, m.Calls(), m.Successes(), peak))
			res.Log = append(res.Log, logLines(run.log)...)
		}
	}
	res.Charts = []Chart{load}
	return res, nil
}

// logLines prints one line per attempt, as the lab does.
func logLines(log []attemptLog) []string {
	// the log is in time order; group it by caller
	var out []string
	for caller := 0; ; caller++ {
		n := 0
		for _, a := range log {
			if a.caller != caller {
				continue
			}
			n++
			wait := "straight away"
			if a.attempt > 1 {
				wait = "after " + ms(a.wait)
			}
			outcome := "DOWN"
			if a.ok {
				outcome = "ACCEPTED"
			}
			out = append(out, fmt.Sprintf("  caller %d attempt %d: %s -> %s at %s", caller+1, a.attempt, wait, outcome, ms(a.at)))
		}
		if n == 0 {
			return out
		}
	}
}

// ms formats a duration in whole milliseconds (fractions kept when below
// one millisecond's precision matters).
func ms(d time.Duration) string {
	if d%time.Millisecond == 0 {
		return fmt.Sprintf("%dms", d/time.Millisecond)
	}
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.3f", float64(d)/1e6), "0"), ".") + "ms"
}

func shortDur(d time.Duration) string {
	if d%time.Millisecond == 0 && d < time.Second {
		return fmt.Sprintf("%dms", d/time.Millisecond)
	}
	return d.String()
}

// bucketPoints turns per-bucket counts into points at bucket starts, in
// seconds, scaled by scale (e.g. to a per-second rate).
func bucketPoints(counts []int64, bucket time.Duration, scale float64) []Point {
	pts := make([]Point, len(counts))
	for i, n := range counts {
		pts[i] = Point{X: (time.Duration(i) * bucket).Seconds(), Y: float64(n) * scale}
	}
	return pts
}

// maxAttempts bounds the attempts a fixed-wait strategy may make in one
// run (about a minute of simulation).
const maxAttempts = 5e8

// outageAttempts estimates the attempts callers make during an outage when
// each retries every cycle, or at most rate per second when rate > 0.
func outageAttempts(callers int, outage, cycle time.Duration, rate float64) float64 {
	n := float64(callers) * (outage.Seconds()/cycle.Seconds() + 1)
	if rate > 0 {
		n = min(n, rate*outage.Seconds()+float64(callers))
	}
	return n
}

// selected returns the indexes in all of the names in chosen, in the order
// of all, so output order and per-strategy seeds never depend on the order
// the names were given in.
func selected(all, chosen []string) []int {
	var idx []int
	for i, name := range all {
		if slices.Contains(chosen, name) {
			idx = append(idx, i)
		}
	}
	return idx
}

// settings lists the parameters and the seed as used.
func settings(ps []*Param, o Options) []Setting {
	out := make([]Setting, 0, len(ps)+1)
	for _, p := range ps {
		out = append(out, Setting{Name: p.Name, Value: p.String()})
	}
	return append(out, Setting{Name: "seed", Value: fmt.Sprint(o.Seed)})
}
