package simkit

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/retry"
)

// BenchmarkHerdImmediate: 100 workers requeueing at once against a
// database down for 5 s (~600,000 events per run, the real Policy.Decide
// behind every one of the 200,000 failures).
func BenchmarkHerdImmediate(b *testing.B) {
	c := DefaultHerd()
	p := c.policy("immediate")
	om := outageModel{callers: c.Workers, jobs: 1, outage: c.Outage, rtt: c.RTT, window: c.Window, bucket: 100 * time.Millisecond}
	var events uint64
	b.ReportAllocs()
	for b.Loop() {
		events += om.run(p).events
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkOCC: one run of 100 clients without backoff (the most
// contended strategy of brooker2015).
func BenchmarkOCC(b *testing.B) {
	q := new(occQueue)
	var events uint64
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		p := &retry.Policy{MaxAttempts: math.MaxInt, Schedule: backoff.Constant(0), Rand: pcg(1, uint64(i))}
		events += runOCC(100, 10*time.Millisecond, 2*time.Millisecond, p, occRand(mix(2, uint64(i))), q).events
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkBrooker2015: the whole default sweep (19 N × 100 runs × 5
// strategies) on one goroutine.
func BenchmarkBrooker2015(b *testing.B) {
	c := DefaultBrooker2015()
	var events uint64
	for b.Loop() {
		res, err := c.Run(context.Background(), Options{Seed: 1, Parallel: 1})
		if err != nil {
			b.Fatal(err)
		}
		events += res.Events
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}
