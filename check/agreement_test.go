package check_test

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/staggerhq/stagger/budget"
	"github.com/staggerhq/stagger/check"
	"github.com/staggerhq/stagger/retry"
)

// agreementSeeds is how many seeds each clock runs; agreementParallel how
// many real-time runs share the machine at once.
const (
	agreementSeeds    = 30
	agreementParallel = 3
	// agreementLate is the most an open-loop arrival may start late for a
	// real-time run to count as a sample: a run the machine stalled
	// longer (other processes took the CPU) measured the machine, not
	// the policy, and is run again, at most agreementReruns times in all.
	agreementLate   = 15 * time.Millisecond
	agreementReruns = 45
	// agreementT is the largest |t| (Welch) accepted: with 30 seeds a side
	// and the same distribution, |t| > 4 happens about once in 5,000
	// comparisons.
	agreementT = 4.0
)

// budgetExperiment is an open loop with a budget: 300 requests/s
// (Poisson) to a dependency answering in 20 ms + Exp(5 ms), down for
// 200 ms from 200 ms, under the nil Policy with a fresh token bucket.
func budgetExperiment(seed uint64) check.Experiment {
	return check.Experiment{
		Name: "open loop with a budget",
		Policies: []check.Policy{check.RetryFunc("token bucket", func() *retry.Policy {
			return &retry.Policy{Budget: &budget.TokenBucket{}}
		})},
		Callers:    check.OpenLoop(300, true),
		Dependency: check.Dependency{Latency: 20 * time.Millisecond, LatencyExp: 5 * time.Millisecond},
		Faults:     []string{"down 150ms at 150ms"},
		Duration:   500 * time.Millisecond,
		Window:     100 * time.Millisecond,
		Seed:       seed,
	}
}

// hedgeExperiment is a hedge: 300 requests/s (Poisson) to a dependency
// answering in 10 ms + Exp(10 ms) that gets 60 ms slower over 300 ms from
// 200 ms, hedged after 25 ms.
func hedgeExperiment(seed uint64) check.Experiment {
	return check.Experiment{
		Name: "a hedge",
		Policies: []check.Policy{check.HedgedFunc("hedge 25ms", func() (*retry.Hedge, *retry.Policy) {
			return &retry.Hedge{Delay: 25 * time.Millisecond}, nil
		})},
		Callers:    check.OpenLoop(300, true),
		Dependency: check.Dependency{Latency: 10 * time.Millisecond, LatencyExp: 10 * time.Millisecond},
		Faults:     []string{"slow 60ms at 150ms for 250ms"},
		Duration:   500 * time.Millisecond,
		Window:     100 * time.Millisecond,
		Seed:       seed,
	}
}

// TestVirtualPredictsReal: for each experiment, the simulator's attempt
// count, peak per window and amplification match the real-time run's:
// Welch's two-sample t over 30 seeds a side. Real time: about 5 s per
// experiment (skipped under -short).
func TestVirtualPredictsReal(t *testing.T) {
	if testing.Short() {
		t.Skip("real-time agreement runs 2 × 30 loopback runs of 0.5 s; run without -short")
	}
	if raceEnabled {
		// The race detector makes every loopback exchange several times
		// slower: the real-time side would measure the detector. CI runs
		// this test in its step without -race.
		t.Skip("real-time agreement runs without -race (go test -count=1 -run VirtualPredictsReal ./check)")
	}
	for _, exp := range []func(uint64) check.Experiment{budgetExperiment, hedgeExperiment} {
		t.Run(exp(0).Name, func(t *testing.T) {
			virt, real := agreementRuns(t, exp)
			agree(t, virt, real)
		})
	}
}

// agree fails t when a measure's Welch t between the virtual and the
// real-time runs is beyond agreementT.
func agree(t *testing.T, virt, real []check.PolicyResult) {
	t.Helper()
	for _, m := range agreementMeasures {
		v, r := sample(virt, m.of), sample(real, m.of)
		tv := welch(v, r)
		t.Logf("%s: virtual %.3f ± %.3f, real %.3f ± %.3f, t = %.2f", m.name, mean(v), sd(v), mean(r), sd(r), tv)
		if math.Abs(tv) > agreementT || math.IsNaN(tv) {
			t.Errorf("%s: the virtual run does not predict the real one: virtual mean %.3f (sd %.3f), real %.3f (sd %.3f), Welch t = %.2f (limit %.0f)",
				m.name, mean(v), sd(v), mean(r), sd(r), tv, agreementT)
		}
	}
}

// agreementMeasures are the measures the virtual run must predict.
var agreementMeasures = []struct {
	name string
	of   func(check.PolicyResult) float64
}{
	{"attempts", func(p check.PolicyResult) float64 { return float64(p.Attempts) }},
	{"peak per window", func(p check.PolicyResult) float64 { return float64(p.Peak) }},
	{"amplification", func(p check.PolicyResult) float64 { return p.Amplification }},
}

// agreementRuns runs exp's first policy with seeds 1 to agreementSeeds
// in virtual time and in real time (agreementParallel real-time runs at
// once; a run the machine stalled is run again).
func agreementRuns(t *testing.T, exp func(uint64) check.Experiment) (virt, real []check.PolicyResult) {
	t.Helper()
	virt = make([]check.PolicyResult, agreementSeeds)
	real = make([]check.PolicyResult, agreementSeeds)
	for i := range virt {
		res, err := check.Run(context.Background(), exp(uint64(i+1)))
		if err != nil {
			t.Fatal(err)
		}
		virt[i] = res.Policies[0]
	}
	start := time.Now()
	var (
		wg     sync.WaitGroup
		sem    = make(chan struct{}, agreementParallel)
		mu     sync.Mutex
		errs   []error
		reruns int
	)
	for i := range real {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			for {
				res, err := check.RunReal(context.Background(), exp(uint64(i+1)))
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				p := res.Policies[0]
				if p.Lateness > agreementLate && reruns < agreementReruns {
					reruns++
					mu.Unlock()
					continue
				}
				real[i] = p
				mu.Unlock()
				return
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	t.Logf("real time: %v for %d runs (%d run again: the machine stalled them)", time.Since(start).Round(time.Millisecond), agreementSeeds, reruns)
	return virt, real
}

func sample(ps []check.PolicyResult, of func(check.PolicyResult) float64) []float64 {
	out := make([]float64, len(ps))
	for i, p := range ps {
		out[i] = of(p)
	}
	return out
}

func mean(x []float64) float64 {
	var s float64
	for _, v := range x {
		s += v
	}
	return s / float64(len(x))
}

func sd(x []float64) float64 {
	m := mean(x)
	var s float64
	for _, v := range x {
		s += (v - m) * (v - m)
	}
	return math.Sqrt(s / float64(len(x)-1))
}

// welch is Welch's t statistic of two samples; 0 when both are constant
// and equal.
func welch(a, b []float64) float64 {
	se := math.Sqrt(sd(a)*sd(a)/float64(len(a)) + sd(b)*sd(b)/float64(len(b)))
	d := mean(a) - mean(b)
	if se == 0 {
		if d == 0 {
			return 0
		}
		return math.Inf(1)
	}
	return d / se
}

// TestAgreementCanFail: the same test tells apart two experiments that
// differ (the dependency's latency doubled): its statistic is not
// trivially small.
func TestAgreementCanFail(t *testing.T) {
	a, b := make([]float64, agreementSeeds), make([]float64, agreementSeeds)
	for i := range agreementSeeds {
		e := hedgeExperiment(uint64(i + 1))
		ra, err := check.Run(context.Background(), e)
		if err != nil {
			t.Fatal(err)
		}
		e.Dependency.Latency *= 2
		rb, _ := check.Run(context.Background(), e)
		a[i], b[i] = ra.Policies[0].Amplification, rb.Policies[0].Amplification
	}
	if tv := welch(a, b); math.Abs(tv) <= agreementT {
		t.Fatalf("a hedge against a 10 ms and a 20 ms dependency: Welch t = %.2f, within the limit %.0f", tv, agreementT)
	}
}
