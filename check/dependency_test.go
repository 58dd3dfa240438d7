package check_test

import (
	"context"
	"testing"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/check"
	"github.com/staggerhq/stagger/retry"
)

func runOne(t *testing.T, e check.Experiment) *check.PolicyResult {
	t.Helper()
	res, err := check.Run(context.Background(), e)
	if err != nil {
		t.Fatal(err)
	}
	return &res.Policies[0]
}

func TestDependencyModels(t *testing.T) {
	open := func(p *retry.Policy, d check.Dependency, faults ...string) check.Experiment {
		return check.Experiment{Policies: []check.Policy{check.Retry("p", p)}, Callers: check.OpenLoop(100, false),
			Dependency: d, Faults: faults, Duration: 10 * time.Second, Seed: 1}
	}
	once := &retry.Policy{MaxAttempts: 1}

	t.Run("rate cap refuses", func(t *testing.T) {
		p := runOne(t, open(once, check.Dependency{Latency: 10 * time.Millisecond, Rate: 50}))
		if p.Accepted < 480 || p.Accepted > 520 || p.Attempts != p.Requests {
			t.Fatalf("100 req/s against 50/s: %d accepted of %d", p.Accepted, p.Attempts)
		}
	})
	t.Run("rate cap queues", func(t *testing.T) {
		p := runOne(t, open(once, check.Dependency{Latency: 10 * time.Millisecond, Rate: 200, Overload: check.Queue}))
		if p.Successes+p.Unfinished != p.Requests || p.Latency.P99 > 30*time.Millisecond {
			t.Fatalf("under the rate every attempt is served at once: %+v", p.Latency)
		}
		q := runOne(t, open(once, check.Dependency{Latency: 10 * time.Millisecond, Rate: 80, Overload: check.Queue}))
		if q.Latency.P50 < time.Second || q.GaveUp["exhausted"] != 0 {
			t.Fatalf("over the rate attempts wait their turn: p50 %v, gave up %v", q.Latency.P50, q.GaveUp)
		}
	})
	t.Run("concurrency cap", func(t *testing.T) {
		p := runOne(t, open(once, check.Dependency{Latency: 100 * time.Millisecond, Concurrency: 5}))
		// 100/s × 100 ms = 10 in flight wanted, 5 served
		if r := float64(p.Accepted) / float64(p.Attempts); r < 0.4 || r > 0.6 {
			t.Fatalf("a cap of 5 against 10 in flight: %.2f accepted", r)
		}
	})
	t.Run("collapse model", func(t *testing.T) {
		p := runOne(t, open(once, check.Collapse()))
		// Little: L = 100/s × (1 s + 0.01 s·L) → L = 200, latency 3 s
		if p.Latency.P50 < 2500*time.Millisecond || p.Latency.P50 > 3100*time.Millisecond {
			t.Fatalf("collapse model at 100/s: p50 %v, want about 3s", p.Latency.P50)
		}
	})
	t.Run("retry-after", func(t *testing.T) {
		p := runOne(t, open(nil, check.Dependency{Refusal: check.RetryAfter, RetryAfter: 1500 * time.Millisecond}, "down 1s at 1s"))
		// the nil Policy waits the 2 s asked (1.5 s rounded up) before its
		// retry, by when the dependency is back: one retry each, no give-up
		if p.Latency.Max < 2*time.Second || p.Latency.Max > 2100*time.Millisecond || len(p.GaveUp) != 0 {
			t.Fatalf("503 + Retry-After 2s: max latency %v, gave up %v", p.Latency.Max, p.GaveUp)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		pol := &retry.Policy{AttemptTimeout: 100 * time.Millisecond, Schedule: backoff.Constant(0)}
		p := runOne(t, open(pol, check.Dependency{Refusal: check.Timeout}, "down 1s at 1s"))
		// arrivals at 1.00 s … 1.99 s; three attempts 100 ms apart all
		// inside the outage for those before 1.8 s
		if p.GaveUp["exhausted"] != 80 || p.Latency.Max != 300*time.Millisecond {
			t.Fatalf("hung attempts end at the attempt timeout: max %v, gave up %v", p.Latency.Max, p.GaveUp)
		}
		h := runOne(t, open(&retry.Policy{Schedule: backoff.Constant(0)}, check.Dependency{Refusal: check.Timeout, Hang: time.Second}, "down 1s at 1s"))
		// a hung attempt is dropped after the hang, 1 s: by then the
		// outage is over and the retry succeeds
		if h.Latency.Max != time.Second || len(h.GaveUp) != 0 {
			t.Fatalf("without a timeout a hung attempt waits the hang: max %v, gave up %v", h.Latency.Max, h.GaveUp)
		}
	})
	t.Run("drop", func(t *testing.T) {
		p := runOne(t, open(&retry.Policy{MaxAttempts: 10, Schedule: backoff.Constant(100 * time.Millisecond)}, check.Dependency{Latency: 5 * time.Millisecond}, "drop 1s at 1s"))
		// 10 attempts 100 ms apart span 900 ms: the 10 requests of the
		// outage's first 100 ms exhaust them, the rest get through
		if p.GaveUp["exhausted"] != 10 || p.Attempts < p.Requests+400 {
			t.Fatalf("dropped connections are retried: %d attempts for %d requests, gave up %v", p.Attempts, p.Requests, p.GaveUp)
		}
	})
	t.Run("closed loop with think time", func(t *testing.T) {
		e := check.Experiment{Policies: []check.Policy{check.Retry("p", nil)}, Callers: check.Callers{N: 3, Requests: 4, Think: 50 * time.Millisecond},
			Dependency: check.Dependency{Latency: 10 * time.Millisecond}}
		p := runOne(t, e)
		if p.Requests != 12 || p.Successes != 12 || p.Attempts != 12 {
			t.Fatalf("3 callers × 4 requests: %+v", p)
		}
	})
}

// TestRealRefusals: the real-time gateway answers each kind of refusal,
// and callers retry through them.
func TestRealRefusals(t *testing.T) {
	for _, r := range []check.Refusal{check.Status503, check.RetryAfter, check.Drop, check.Timeout} {
		t.Run(r.String(), func(t *testing.T) {
			e := check.Experiment{
				Policies:   []check.Policy{check.Retry("p", &retry.Policy{MaxAttempts: 20, AttemptTimeout: 100 * time.Millisecond, MaxAfter: time.Second, ClampAfter: true, Schedule: backoff.Constant(20 * time.Millisecond)})},
				Callers:    check.ClosedLoop(3),
				Dependency: check.Dependency{Latency: 5 * time.Millisecond, Refusal: r, RetryAfter: 100 * time.Millisecond},
				Faults:     []string{"down 150ms at 0s"},
			}
			res, err := check.RunReal(context.Background(), e)
			if err != nil {
				t.Fatal(err)
			}
			p := res.Policies[0]
			if p.Successes != 3 || p.Attempts <= 3 {
				t.Fatalf("%v: %d successes, %d attempts, gave up %v", r, p.Successes, p.Attempts, p.GaveUp)
			}
		})
	}
}

// TestVirtualRunsThePolicysHooks: the virtual run goes through the
// policy's own Step, so its hooks see every attempt, retry and give-up
// the dependency counted.
func TestVirtualRunsThePolicysHooks(t *testing.T) {
	var attempts, retries, giveUps, successes int64
	p := &retry.Policy{Hooks: retry.Hooks{
		OnAttempt: func(retry.Event) { attempts++ },
		OnRetry:   func(retry.Event) { retries++ },
		OnGiveUp:  func(retry.Event) { giveUps++ },
		OnSuccess: func(retry.Event) { successes++ },
	}}
	r := runOne(t, outage(2, check.Retry("hooked", p)))
	var gave int64
	for _, n := range r.GaveUp {
		gave += n
	}
	if attempts != r.Attempts || successes != r.Successes || giveUps != gave || retries != r.Attempts-r.Requests {
		t.Fatalf("hooks: %d attempts, %d retries, %d give-ups, %d successes; the run: %d attempts, %d requests, %d give-ups, %d successes",
			attempts, retries, giveUps, successes, r.Attempts, r.Requests, gave, r.Successes)
	}
}

// TestConcurrencyQueue: over its Concurrency a queueing dependency makes
// attempts wait their turn (none refused), in both clocks, and one whose
// caller gives up while it waits leaves the queue.
func TestConcurrencyQueue(t *testing.T) {
	e := check.Experiment{
		Policies:   []check.Policy{check.Retry("once", &retry.Policy{MaxAttempts: 1})},
		Callers:    check.ClosedLoop(12),
		Dependency: check.Dependency{Latency: 50 * time.Millisecond, Concurrency: 4, Overload: check.Queue},
	}
	for _, run := range []func(context.Context, check.Experiment) (*check.Result, error){check.Run, check.RunReal} {
		res, err := run(context.Background(), e)
		if err != nil {
			t.Fatal(err)
		}
		p := res.Policies[0]
		// 12 callers, 4 at a time, 50 ms each: three rounds
		if p.Successes != 12 || p.Accepted != 12 || p.Latency.Max < 150*time.Millisecond || p.Latency.Max > 300*time.Millisecond {
			t.Fatalf("%s: %d successes, %d accepted, max latency %v; want 12, 12, about 150ms", res.Clock, p.Successes, p.Accepted, p.Latency.Max)
		}
	}
	e.Policies = []check.Policy{check.Retry("impatient", &retry.Policy{MaxAttempts: 1, AttemptTimeout: 75 * time.Millisecond})}
	res, err := check.Run(context.Background(), e)
	if err != nil {
		t.Fatal(err)
	}
	// the first 4 are served in 50 ms; the next 4 wait 50 ms and need 50
	// more, past 75 ms; the last 4 would start after 75 ms: they time out
	// in the queue and leave it
	if p := res.Policies[0]; p.Successes != 4 || p.GaveUp["exhausted"] != 8 || p.Attempts != 12 {
		t.Fatalf("impatient callers: %d successes, gave up %v", p.Successes, p.GaveUp)
	}
}

func TestRunCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	e := outage(1, check.Retry("p", nil))
	if _, err := check.Run(ctx, e); err == nil {
		t.Fatal("a canceled context ran to the end")
	}
	if _, err := check.RunReal(ctx, e); err == nil {
		t.Fatal("a canceled context ran in real time")
	}
}
