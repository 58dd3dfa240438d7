package labkit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/staggerhq/stagger/internal/labkit"
)

// Run one lab experiment programmatically: 4 callers against a real
// loopback gateway that is down for 300 ms, retrying with exponential
// backoff and full jitter. The counts depend on real timing, so this prints
// only what holds on every run.
func ExampleScenario_Run() {
	s := labkit.Scenario{
		Callers: 4,
		Faults:  labkit.Outage(300*time.Millisecond, 5*time.Millisecond),
		Ramp:    20 * time.Millisecond, // callers start 5 ms apart
		Seed:    1,                     // the same seed draws the same waits
	}
	st, err := labkit.ParseStrategy("expo-full", labkit.StrategyOptions{Base: 60 * time.Millisecond})
	if err != nil {
		fmt.Println(err)
		return
	}
	r, err := s.Run(context.Background(), st)
	if err != nil {
		fmt.Println(err)
		return
	}
	// r.WriteLog(os.Stdout, true) would print the per-attempt log with the
	// counts (r.Gateway.Total, .Accepted, .Peak), and labkit.WriteReportFile
	// the HTML report. Here: what holds on every run.
	refusedInOutage := true
	for _, a := range r.Attempts { // each joined with its gateway record
		if (a.Arrived < 300*time.Millisecond) != (a.Outcome == labkit.Down) {
			refusedInOutage = false
		}
	}
	fmt.Println("callers accepted:", r.CallersAccepted())
	fmt.Println("caller and gateway counts agree:", r.Agree(), r.Gateway.Total == len(r.Attempts))
	fmt.Println("down exactly during the outage:", refusedInOutage)
	fmt.Println("jitter check:", r.CheckJitter())
	// Output:
	// callers accepted: 4
	// caller and gateway counts agree: true true
	// down exactly during the outage: true
	// jitter check: <nil>
}

// A Recorder counts attempts on the receiving side of anything — here fed
// by hand with known arrival times.
func ExampleRecorder() {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rec := labkit.NewRecorder(start)
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	rec.Record(at(12), "order-1", 1, labkit.Down)
	rec.Record(at(20), "order-2", 1, labkit.Down)
	rec.Record(at(58), "order-1", 2, labkit.Down)
	rec.Record(at(150), "order-2", 2, labkit.Busy)
	rec.Record(at(230), "order-1", 3, labkit.Accepted)
	rec.Record(at(420), "order-2", 3, labkit.Accepted)

	s := rec.Stats(200 * time.Millisecond)
	fmt.Printf("%d attempts, %d accepted, %d rejected\n", s.Total, s.Accepted, s.Rejected)
	fmt.Printf("peak %d in one 200ms window, from %v\n", s.Peak, s.PeakAt)
	fmt.Printf("%d requests, %.1f attempts each, at most %d\n", s.Requests, s.AttemptsPerRequest(), s.MaxAttempts)
	for _, b := range s.Timeline {
		fmt.Printf("window %v: %d accepted, %d rejected\n", b.Start, b.Accepted, b.Rejected)
	}
	// Output:
	// 6 attempts, 2 accepted, 4 rejected
	// peak 4 in one 200ms window, from 12ms
	// 2 requests, 3.0 attempts each, at most 3
	// window 0s: 0 accepted, 4 rejected
	// window 200ms: 1 accepted, 0 rejected
	// window 400ms: 1 accepted, 0 rejected
}

// Strategy names map to the real backoff schedules.
func ExampleParseStrategy() {
	for _, name := range []string{"immediate", "expo-full", "expo+budget+bulkhead"} {
		st, err := labkit.ParseStrategy(name, labkit.StrategyOptions{})
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Printf("%s: %s, schedule %#v, budget %v, bulkhead %d\n",
			st.Name, st.Title, st.Schedule, st.NewBudget != nil, st.Bulkhead)
	}
	_, err := labkit.ParseStrategy("retry-harder", labkit.StrategyOptions{})
	fmt.Println(err)
	// Output:
	// immediate: RETRY IMMEDIATELY, schedule 20000000, budget false, bulkhead 0
	// expo-full: EXPONENTIAL + JITTER, schedule backoff.Exponential{Base:60000000, Multiplier:0, Cap:0, Jitter:0x1, Unit:1000000}, budget false, bulkhead 0
	// expo+budget+bulkhead: EXPONENTIAL + BUDGET + BULKHEAD, schedule backoff.Exponential{Base:60000000, Multiplier:0, Cap:0, Jitter:0x0, Unit:1000000}, budget true, bulkhead 2
	// lab: invalid configuration: unknown strategy "retry-harder" (want one of immediate, constant, expo, expo-full, expo-equal, decorrelated, optionally followed by +budget, +bulkhead, +breaker, +rate or +hedge)
}

// SlidingPeak counts the densest window anywhere, not on a grid: these
// arrivals straddle the 200 ms boundary, so fixed windows see 2 + 2, a
// sliding one sees 4.
func ExampleSlidingPeak() {
	ms := time.Millisecond
	peak, at := labkit.SlidingPeak([]time.Duration{150 * ms, 190 * ms, 210 * ms, 250 * ms}, 200*ms)
	fmt.Println(peak, at)
	// Output: 4 150ms
}
