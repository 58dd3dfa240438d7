package simkit

import (
	"context"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Options are the settings every scenario shares.
type Options struct {
	// Seed makes a run reproducible: the same parameters and Seed give the
	// same Result, byte for byte, whatever Parallel is.
	Seed uint64
	// Parallel is the number of goroutines that run independent
	// simulations of a sweep; 0 means GOMAXPROCS. It never changes results.
	Parallel int
	// Progress, if set, is called after each independent run of a sweep
	// with the runs done and the total, from any goroutine.
	Progress func(done, total int)
}

// Runner is a scenario's configuration: its parameters and its run.
type Runner interface {
	// Params returns the configuration's parameters, bound to its fields.
	Params() []*Param
	// Run validates the configuration and simulates it.
	Run(ctx context.Context, o Options) (*Result, error)
}

// Scenario is a named, described experiment.
type Scenario struct {
	Name    string // what Lookup and `stagger sim NAME` take, e.g. "herd"
	Summary string // one line for `stagger sim list`
	// New returns the scenario's default configuration.
	New func() Runner
}

// Scenarios returns every scenario, in the order of `stagger sim list`.
func Scenarios() []Scenario {
	return []Scenario{
		{"outage", "4 callers, 700 ms outage, retry immediately vs exponential + full jitter", func() Runner { c := DefaultOutage(); return &c }},
		{"herd", "workers hammer a database down for 5 s: immediate requeue vs expo-full vs budget", func() Runner { c := DefaultHerd(); return &c }},
		{"brooker2015", "optimistic-concurrency row (Brooker 2015): calls and completion time vs clients per backoff", func() Runner { c := DefaultBrooker2015(); return &c }},
		{"budgets", "failure rate 0…1: load amplification and success of retry budgets, breaker and 3 retries", func() Runner { c := DefaultBudgets(); return &c }},
		{"collapse", "metastable collapse: a 5 s spike, timeouts that do not cancel work, goodput per second", func() Runner { c := DefaultCollapse(); return &c }},
		{"layers", "retries stacked in layers multiply (n^L); a single retry owner keeps n", func() Runner { c := DefaultLayers(); return &c }},
		{"littles-law", "100 req/s, latency 0.1 s → 2 s, a pool of 50: in-flight = λ·W", func() Runner { c := DefaultLittlesLaw(); return &c }},
		{"metastable", "capacity cut of set length (Huang et al. 2022): timeouts and resends keep the server down after it is back", func() Runner { c := DefaultMetastable(); return &c }},
		{"spiral", "retry spiral (SRE book): 10,100 QPS against 10,000, every failure retried 1 s later; what a budget does", func() Runner { c := DefaultSpiral(); return &c }},
		{"backoff", "what backoff is for (Brooker 2022): open-loop clients keep their amplification, serial clients slow down", func() Runner { c := DefaultBackoffFor(); return &c }},
		{"bimodal", "bimodal latency (SRE book): 5% of queries hang to a 100 s deadline and take the threads; a timeout gives them back", func() Runner { c := DefaultBimodal(); return &c }},
		{"limits", "concurrency limits under a latency step: limit.AIMD (Netflix defaults) vs a fixed bulkhead vs none", func() Runner { c := DefaultLimits(); return &c }},
		{"hedge", "hedged requests under a latency tail (Dean & Barroso 2013): the caller's p99 vs the receiver's load, with and without a budget", func() Runner { c := DefaultHedge(); return &c }},
	}
}

// Lookup returns the scenario called name.
func Lookup(name string) (Scenario, bool) {
	for _, s := range Scenarios() {
		if s.Name == name {
			return s, true
		}
	}
	return Scenario{}, false
}

// mix is splitmix64: it turns a seed and a run's coordinates into an
// independent stream seed.
func mix(seed uint64, parts ...uint64) uint64 {
	x := seed
	for _, p := range parts {
		x ^= p + 0x9e3779b97f4a7c15 + x<<6 + x>>2
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		x = z ^ z>>31
	}
	return x
}

// pcg returns a PCG source for a run's coordinates.
func pcg(seed uint64, parts ...uint64) *rand.PCG {
	s := mix(seed, parts...)
	return rand.NewPCG(s, mix(s, 0x5eed))
}

// parallel runs job(i) for i in [0, n) on o.Parallel goroutines, stopping
// early when ctx ends. Jobs write their results into slots indexed by i,
// so results never depend on scheduling.
func parallel(ctx context.Context, o Options, n int, job func(i int)) error {
	workers := o.Parallel
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = min(workers, n)
	var next, done atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				job(i)
				d := done.Add(1)
				if o.Progress != nil {
					o.Progress(int(d), n)
				}
			}
		}()
	}
	wg.Wait()
	return ctx.Err()
}

// sweep runs job(i) for i in [0, n) with parallel and returns the results
// in index order, or the error of the lowest-numbered job that failed.
func sweep[T any](ctx context.Context, o Options, n int, job func(i int) (T, error)) ([]T, error) {
	out := make([]T, n)
	errs := make([]error, n)
	if err := parallel(ctx, o, n, func(i int) { out[i], errs[i] = job(i) }); err != nil {
		return nil, err
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// poissonGap draws the gap to the next arrival of a Poisson process at
// rate per second, rounded up to a whole nanosecond (never 0).
func poissonGap(rng *rand.Rand, rate float64) time.Duration {
	return time.Duration(math.Ceil(rng.ExpFloat64() / rate * 1e9))
}
