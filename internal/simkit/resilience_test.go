package simkit

import (
	"context"
	"testing"
	"time"

	"github.com/staggerhq/stagger/retry"
)

// herdRun runs one herd strategy through the outage model and returns
// what the database received.
func herdRun(c HerdConfig, name string, seed uint64) outageRun {
	p := c.policy(name)
	p.Rand = pcg(seed, 1)
	om := outageModel{callers: c.Workers, jobs: c.Jobs, outage: c.Outage, rtt: c.RTT, rate: c.Rate,
		window: c.Window, bucket: 100 * time.Millisecond}
	return om.run(p)
}

// TestHerdBreakerShedsLoad: with several orders per worker, the shared
// circuit breaker refuses the first attempts of new orders while the
// database is down, where a retry budget only stops retries and lets
// every new order's first attempt through. In this model a refused order
// is dead-lettered at once (workers hold no arrivals over time), so the
// breaker fails the orders fast instead of loading the database; the
// lab's TestBreakerShedsOriginals shows the circuit closing afterwards.
func TestHerdBreakerShedsLoad(t *testing.T) {
	t.Parallel()
	c := DefaultHerd()
	c.Jobs = 20
	bud := herdRun(c, "expo-full+budget", 1)
	brk := herdRun(c, "expo-full+breaker", 1)
	t.Logf("reached the database during the outage: +budget %d, +breaker %d; written %d, %d; circuit-open give-ups %d",
		bud.during, brk.during, bud.m.Successes(), brk.m.Successes(), brk.m.GaveUp(retry.CircuitOpen))
	if brk.during*2 >= bud.during {
		t.Errorf("+breaker let %d attempts reach the database during the outage, +budget %d; want less than half", brk.during, bud.during)
	}
	if brk.m.GaveUp(retry.CircuitOpen) == 0 || brk.m.GaveUp(retry.Budget) != 0 {
		t.Errorf("+breaker give-ups: %d circuit-open, %d budget", brk.m.GaveUp(retry.CircuitOpen), brk.m.GaveUp(retry.Budget))
	}
	if brk.m.Successes()+brk.m.Failed() != int64(c.Workers*c.Jobs) {
		t.Errorf("+breaker: %d written + %d dead-lettered, want every one of %d orders accounted for",
			brk.m.Successes(), brk.m.Failed(), c.Workers*c.Jobs)
	}
}

// TestHerdRateCapsLoad: with the shared rate limit no 100 ms bucket at the
// database holds more than burst + rate·100 ms attempts, and no 1 s span
// (ten buckets) more than burst + rate; without it the same workers send
// several times more at once.
func TestHerdRateCapsLoad(t *testing.T) {
	t.Parallel()
	c := DefaultHerd()
	c.Workers, c.Jobs = 1000, 3
	free := herdRun(c, "expo-full", 2)
	capped := herdRun(c, "expo-full+rate", 2)
	most := func(load []int64, n int) int64 {
		var best int64
		for i := range load {
			var sum int64
			for _, v := range load[i:min(len(load), i+n)] {
				sum += v
			}
			best = max(best, sum)
		}
		return best
	}
	for _, n := range []int{1, 10} {
		limit := int64(HerdBurst + HerdRate*n/10)
		if got := most(capped.m.Load(), n); got > limit {
			t.Errorf("+rate: %d attempts in %d00 ms, the limit allows %d", got, n, limit)
		}
		if got := most(free.m.Load(), n); got <= 2*limit {
			t.Errorf("expo-full alone: only %d attempts in %d00 ms; the test shows nothing", got, n)
		}
	}
	if capped.m.GaveUp(retry.Limited) == 0 {
		t.Error("+rate refused nothing")
	}
}

// TestHerdNewStrategies runs the scenario with the two strategies by name,
// as `stagger sim herd --strategy` does.
func TestHerdNewStrategies(t *testing.T) {
	t.Parallel()
	c := DefaultHerd()
	c.Strategies = []string{"expo-full+breaker", "expo-full+rate"}
	res, err := c.Run(context.Background(), Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Table.Rows) != 2 || res.Table.Rows[0][0] != "expo-full+breaker" || res.Table.Rows[1][0] != "expo-full+rate" {
		t.Fatalf("rows %v", res.Table.Rows)
	}
}
