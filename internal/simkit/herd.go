package simkit

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/budget"
	"github.com/staggerhq/stagger/retry"
)

// HerdConfig is a thundering herd: workers consume an order queue
// and write to a database that reboots for Outage. Each worker holds Jobs
// orders in turn and retries each until it is written or the policy gives
// up (the order goes to the dead-letter queue).
type HerdConfig struct {
	Workers    int           // workers consuming the order queue
	Jobs       int           // orders per worker, one after another
	Outage     time.Duration // how long the database is down from t=0
	RTT        time.Duration // nack + requeue + redelivery + connection attempt
	Rate       float64       // connection attempts the database host handles per second; 0: unlimited
	Window     time.Duration // width of the window the peak is counted in
	Base, Cap  time.Duration // expo-full: wait = uniform(0, min(Cap, Base·2^(n−1)))
	Strategies []string      // of herdStrategies; run in that order
}

// herdStrategies are the strategies herd knows; the first three run by
// default. "+breaker" is a budget.CircuitBreaker shared by the workers
// (it refuses new orders' first attempts too while open); "+rate" a
// limit.Rate of HerdRate starts per second, burst HerdBurst.
var herdStrategies = []string{"immediate", "expo-full", "expo-full+budget", "expo-full+breaker", "expo-full+rate"}

// DefaultHerd returns the reference numbers: 100 workers, a 5 s reboot, a
// 2.5 ms requeue round trip, backoff 1 s ×2 capped at 30 s, and a database
// host that takes at most 50,000 connection attempts per second (about
// the TCP SYNs per second one host accepts).
func DefaultHerd() HerdConfig {
	return HerdConfig{
		Workers: 100, Jobs: 1, Outage: 5 * time.Second, RTT: 2500 * time.Microsecond,
		Rate: 50_000, Window: DefaultWindow, Base: time.Second, Cap: 30 * time.Second,
		Strategies: herdStrategies[:3],
	}
}

// Params returns the scenario's parameters.
func (c *HerdConfig) Params() []*Param {
	return []*Param{
		intParam(&c.Workers, "workers", "workers consuming the order queue", 1, 10_000_000),
		intParam(&c.Jobs, "jobs", "orders each worker writes, one after another", 1, 1_000_000),
		durParam(&c.Outage, "outage", "how long the database is down from t=0", 0, 24*time.Hour),
		durParam(&c.RTT, "rtt", "round trip of one attempt: nack, requeue, redelivery, connect", time.Microsecond, time.Minute),
		floatParam(&c.Rate, "db-rate", "connection attempts the database host handles per second, first come first served (0: unlimited)", 0, 1e9),
		durParam(&c.Window, "window", "width of the window the peak is counted in", time.Millisecond, time.Hour),
		durParam(&c.Base, "base", "expo-full: window after the first failure (doubles)", time.Millisecond, time.Hour),
		durParam(&c.Cap, "cap", "expo-full: largest window", time.Millisecond, 24*time.Hour),
		listParam(&c.Strategies, "strategy", "strategies to run", herdStrategies),
	}
}

func (c *HerdConfig) validate() error {
	if err := checkParams(c.Params()); err != nil {
		return err
	}
	if c.Cap < c.Base {
		return invalid("cap", "must be >= base (%v), got %v", c.Base, c.Cap)
	}
	if int64(c.Workers)*int64(c.Jobs) > 100_000_000 {
		return invalid("jobs", "workers × jobs must be <= 100,000,000, got %d", int64(c.Workers)*int64(c.Jobs))
	}
	if slices.Contains(c.Strategies, "immediate") {
		if n := outageAttempts(c.Workers, c.Outage, c.RTT, c.Rate); n > maxAttempts {
			return invalid("workers", "immediate requeue would make ~%.3g attempts during the outage (workers × outage / rtt, or db-rate × outage); keep it <= %.0g: fewer --workers, a shorter --outage, a longer --rtt or a --db-rate", n, maxAttempts)
		}
	}
	return nil
}

func (c *HerdConfig) policy(name string) *retry.Policy {
	p := &retry.Policy{MaxAttempts: math.MaxInt}
	expo := backoff.Exponential{Base: c.Base, Cap: c.Cap, Jitter: backoff.Full, Unit: time.Millisecond}
	switch name {
	case "immediate":
		p.Schedule = backoff.Constant(0) // nack with requeue: back at network speed
	case "expo-full":
		p.Schedule = expo
	case "expo-full+budget":
		p.Schedule = expo
		// budget.TokenBucket's defaults: +1 per order, 10 per retry, cap 200; shared by the workers,
		// full when the database reboots (as after a healthy while; the lab's
		// +budget starts full too).
		p.Budget = &budget.TokenBucket{Initial: budget.DefaultMax}
	case "expo-full+breaker":
		p.Schedule, p.Budget = expo, newCircuit()
	case "expo-full+rate":
		p.Schedule, p.Limiter = expo, newVirtualRate(HerdRate, HerdBurst)
	}
	return p
}

// Run simulates each strategy once.
func (c *HerdConfig) Run(ctx context.Context, o Options) (*Result, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	res := &Result{
		Scenario: "herd",
		Title:    fmt.Sprintf("%d workers, database down %v, round trip %v", c.Workers, c.Outage, c.RTT),
		Settings: settings(c.Params(), o),
		Table: Table{Columns: []Column{
			{Key: "strategy", Title: "strategy"},
			{Key: "workers", Title: "workers"},
			{Key: "requests_down", Title: "answered down"},
			{Key: "requests", Title: "requests"},
			{Key: "peak", Title: "peak/" + shortDur(c.Window)},
			{Key: "written", Title: "written"},
			{Key: "dead", Title: "dead-lettered"},
			{Key: "completion_s", Title: "done at s", Prec: 3},
			{Key: "max_queue_ms", Title: "max queue ms", Prec: 1},
		}},
	}
	const bucket = 100 * time.Millisecond
	load := Chart{Title: "requests per second at the database", XLabel: "time (s)", YLabel: "requests/s",
		Shades: []Shade{{From: 0, To: c.Outage.Seconds(), Label: "rebooting"}}}
	var immediate, arrived int64 = -1, 0
	for _, i := range selected(herdStrategies, c.Strategies) {
		name := herdStrategies[i]
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		p := c.policy(name)
		p.Rand = pcg(o.Seed, uint64(i))
		om := outageModel{callers: c.Workers, jobs: c.Jobs, outage: c.Outage, rtt: c.RTT, rate: c.Rate,
			window: c.Window, bucket: bucket}
		run := om.run(p)
		m := run.m
		peak, _ := m.Peak()
		dead := m.Failed()
		res.Table.Rows = append(res.Table.Rows, []any{name, c.Workers, run.during, m.Calls(), peak,
			m.Successes(), dead, m.Completion().Seconds(), float64(run.maxWait) / float64(time.Millisecond)})
		res.Events += run.events
		load.Series = append(load.Series, Series{Name: name, Points: bucketPoints(m.Load(), bucket, float64(time.Second/bucket))})
		if name == "immediate" {
			immediate, arrived = run.during, run.arrived
		}
	}
	res.Charts = []Chart{load}
	if immediate >= 0 {
		note := fmt.Sprintf("immediate requeue: the database answered %d requests while down (\"answered down\": attempts it handled before the %v outage ended); one per worker per round trip would be %.0f",
			immediate, c.Outage, float64(c.Workers)*c.Outage.Seconds()/c.RTT.Seconds())
		if c.Rate > 0 {
			note += fmt.Sprintf(", and the host handles at most %.0f in that time at --db-rate %g", c.Rate*c.Outage.Seconds(), c.Rate)
		}
		if arrived > immediate {
			note += fmt.Sprintf("; %d arrived during the outage, and the %d others waited their turn and were served after it", arrived, arrived-immediate)
		}
		res.Notes = append(res.Notes, note+".")
	}
	return res, nil
}
