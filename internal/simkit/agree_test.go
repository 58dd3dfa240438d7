package simkit

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/staggerhq/stagger/internal/labkit"
)

// TestWelch checks the test against published values: Student's t with
// 29 degrees of freedom has a two-sided 5% point of 2.045 and a 1% point
// of 2.756; with 10, 2.228 and 3.169.
func TestWelch(t *testing.T) {
	for _, c := range []struct{ t, df, p float64 }{{2.045, 29, 0.05}, {2.756, 29, 0.01}, {2.228, 10, 0.05}, {3.169, 10, 0.01}, {0, 5, 1}} {
		got := regIncBeta(c.df/2, 0.5, c.df/(c.df+c.t*c.t))
		if math.Abs(got-c.p) > 2e-4 {
			t.Errorf("P(|T| > %v; df %v) = %.5f, want %v", c.t, c.df, got, c.p)
		}
	}
	// Equal variances and sizes: df = 2(n−1), and T from the means.
	w := WelchTest([]float64{1, 2, 3, 4, 5}, []float64{3, 4, 5, 6, 7})
	if math.Abs(w.T+2) > 1e-12 || math.Abs(w.DF-8) > 1e-12 || math.Abs(w.P-0.0805) > 1e-3 {
		t.Errorf("%+v; want T -2, DF 8, P 0.0805", w)
	}
	if w := WelchTest([]float64{18, 18, 18}, []float64{18, 18}); w.P != 1 {
		t.Errorf("equal constants: %+v", w)
	}
	if w := WelchTest([]float64{18, 18, 18}, []float64{20, 20}); w.P != 0 {
		t.Errorf("different constants: %+v", w)
	}
	if w := WelchTest([]float64{1}, []float64{1, 2}); !math.IsNaN(w.P) {
		t.Errorf("one value: %+v", w)
	}
}

// Parameters of the sim–lab agreement test: runs on each side, the P
// value below which a measure disagrees (three measures per strategy at
// 0.001 each: a correct model fails by chance about once in 170 runs),
// lab runs at once, the most lab runs tried to collect agreeRuns runs that
// did not stall, and what counts as a stall.
const (
	agreeRuns  = 30
	agreeAlpha = 0.001
	agreePar   = 4
	agreeTries = 3 * agreeRuns
	// agreeStall: a lab run whose mean round trip (gateway latency +
	// observed overhead per cycle) missed the scenario's 26.2 ms by more
	// than this was stalled by the machine — during the run (callers held
	// up together) or during its calibration (a latency set too short) —
	// and is not the experiment (docs/lab.md, "Spread between runs").
	// Runs that did not stall miss by under 0.7 ms on a machine with a
	// load average of 11 on 2 cores.
	agreeStall = time.Millisecond
)

// outageSample holds one measure per run: attempts received, the peak per
// 200 ms window and the attempts per logical request.
type outageSample struct{ attempts, peak, amp []float64 }

func (s *outageSample) add(attempts, peak int, amp float64) {
	s.attempts = append(s.attempts, float64(attempts))
	s.peak = append(s.peak, float64(peak))
	s.amp = append(s.amp, amp)
}

// simOutage runs the simulated outage once per lab run: run i with seed
// i+1, lab run i's gateway latency as its round trip, and each attempt
// late by a draw from lab run i's measured lateness per cycle.
func simOutage(c OutageConfig, strategy string, runs []labRun) outageSample {
	var s outageSample
	c.Log = 0
	for i, r := range runs {
		p := c.policy(strategy)
		p.Rand = pcg(uint64(i+1), 0)
		c.RTT = r.latency
		om := c.model()
		om.late, om.lateRand = r.late, rand.New(pcg(uint64(i+1), 1))
		run := om.run(p)
		peak, _ := run.m.Peak()
		s.add(int(run.m.Calls()), peak, run.m.Amplification())
	}
	return s
}

// labRun is one lab run's measures and its timing.
type labRun struct {
	attempts, peak int
	amp            float64
	latency        time.Duration   // the gateway's latency
	late           []time.Duration // per retry cycle: how much longer it took than the wait and the latency
	roundTrip      time.Duration   // mean round trip: latency + mean of late
}

// lateness returns, per retry cycle of res, the time the machine added to
// it: from one attempt's send to the next, beyond the wait and the
// gateway's latency (the terms of Result.ObservedOverhead).
func lateness(res *labkit.Result) []time.Duration {
	var out []time.Duration
	for i, a := range res.Attempts {
		if a.Attempt > 1 && i > 0 && res.Attempts[i-1].Caller == a.Caller {
			out = append(out, a.Sent-res.Attempts[i-1].Sent-a.Wait-res.Latency)
		}
	}
	return out
}

// labOutage runs the lab's default outage in real time on 127.0.0.1,
// agreePar runs at once with seeds 1, 2, …, until agreeRuns runs did not
// stall or agreeTries runs were made; it returns the runs that did not
// stall and the number that did.
func labOutage(t *testing.T, strategy string) (runs []labRun, stalled int) {
	t.Helper()
	st, err := labkit.ParseStrategy(strategy, labkit.StrategyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seed := 0
	for len(runs) < agreeRuns && seed < agreeTries {
		n := min(agreeRuns-len(runs)+agreePar-1, agreeTries-seed) // a few spare runs per round
		batch := make([]*labkit.Result, n)
		errs := make([]error, n)
		sem := make(chan struct{}, agreePar)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				sc := labkit.FourCallerOutage()
				sc.Seed = uint64(seed + i + 1)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				batch[i], errs[i] = sc.Run(ctx, st)
			}()
		}
		wg.Wait()
		seed += n
		for i, res := range batch {
			if errs[i] != nil {
				t.Fatalf("lab run %d: %v", seed-n+i+1, errs[i])
			}
			if !res.Agree() {
				t.Fatalf("lab run %d: callers and gateway disagree: %v", seed-n+i+1, res.Mismatches)
			}
			r := labRun{attempts: res.Gateway.Total, peak: res.Gateway.Peak, amp: res.Gateway.AttemptsPerRequest(),
				latency: res.Latency, late: lateness(res), roundTrip: res.Latency + res.ObservedOverhead()}
			if (r.roundTrip - labkit.FourCallerRoundTrip).Abs() > agreeStall {
				stalled++
				continue
			}
			if len(runs) < agreeRuns {
				runs = append(runs, r)
			}
		}
	}
	return runs, stalled
}

// compare runs Welch's test on each measure and returns one line per
// measure and the measures that disagree (P < agreeAlpha).
func compare(lab, sim outageSample) (lines, failed []string) {
	for _, m := range []struct {
		name     string
		lab, sim []float64
	}{{"attempts", lab.attempts, sim.attempts}, {"peak per 200ms", lab.peak, sim.peak}, {"amplification", lab.amp, sim.amp}} {
		w := WelchTest(m.lab, m.sim)
		lines = append(lines, fmt.Sprintf("%-15s lab %6.2f ± %.2f  sim %6.2f ± %.2f  t %6.2f  df %5.1f  P %.4f",
			m.name, w.Mean1, w.SD1, w.Mean2, w.SD2, w.T, w.DF, w.P))
		if !(w.P >= agreeAlpha) {
			failed = append(failed, fmt.Sprintf("%s: lab %.2f ± %.2f, sim %.2f ± %.2f, P %.2g < %v", m.name, w.Mean1, w.SD1, w.Mean2, w.SD2, w.P, agreeAlpha))
		}
	}
	return lines, failed
}

// TestOutageAgreesWithLab: the simulated outage predicts the lab's
// real-time run of the same experiment. For each strategy, 30 lab runs on
// 127.0.0.1 (seeds 1, 2, …) and 30 simulated runs give the attempts
// received, the peak per 200 ms window and the attempts per logical
// request; Welch's t-test on each must not reject equal means at
// P < 0.001.
//
// The experiment is the same on both sides, round trip included: the lab
// aims its gateway's latency at a 26.2 ms round trip but the machine adds
// its own time to each cycle, which the run measures (Result.Latency +
// ObservedOverhead); simulated run i gets the round trip lab run i had.
// So the samples' spread — the test's tolerance — carries the machine's
// measured timing noise. A run the machine stalled (its cycles took more
// than agreeStall beyond its calibrated overhead: callers held up
// together, which no round trip describes) is left out and replaced by a
// run with the next seed, up to agreeTries runs; if fewer than 30 did not
// stall, the test fails.
//
// The same lab samples must reject the simulated outage with its callers
// started together (no ramp): retrying immediately, its peak is 20 against
// the lab's 18, so the test can fail.
func TestOutageAgreesWithLab(t *testing.T) {
	begin := time.Now()
	c := DefaultOutage()
	for _, strategy := range []string{"immediate", "expo-full"} {
		runs, stalled := labOutage(t, strategy)
		if len(runs) < agreeRuns {
			t.Fatalf("%s: the machine stalled %d of %d lab runs; %d ran the experiment, %d needed", strategy, stalled, stalled+len(runs), len(runs), agreeRuns)
		}
		var lab outageSample
		var lo, hi time.Duration = time.Hour, -time.Hour
		for _, r := range runs {
			lab.add(r.attempts, r.peak, r.amp)
			lo, hi = min(lo, r.roundTrip), max(hi, r.roundTrip)
		}
		lines, failed := compare(lab, simOutage(c, strategy, runs))
		t.Logf("%s: %d runs each (%d lab runs stalled, left out); round trips %v to %v:", strategy, agreeRuns, stalled,
			lo.Round(10*time.Microsecond), hi.Round(10*time.Microsecond))
		for _, l := range lines {
			t.Log("  " + l)
		}
		for _, f := range failed {
			t.Errorf("%s: the simulator disagrees with the lab: %s", strategy, f)
		}
		if strategy == "immediate" {
			old := c
			old.Ramp = 0
			lines, failed := compare(lab, simOutage(old, strategy, runs))
			t.Logf("%s, simulated without the ramp:", strategy)
			for _, l := range lines {
				t.Log("  " + l)
			}
			if len(failed) == 0 {
				t.Errorf("%s: the simulator without the ramp agrees with the lab: the test cannot tell them apart", strategy)
			}
		}
	}
	t.Logf("took %v", time.Since(begin).Round(time.Millisecond))
}
