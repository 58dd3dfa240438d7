package labkit

import (
	"errors"
	"math"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/budget"
	"github.com/staggerhq/stagger/limit"
	"github.com/staggerhq/stagger/retry"
)

// TestParseStrategySchedules checks that each name maps to the real backoff
// schedule the docs promise.
func TestParseStrategySchedules(t *testing.T) {
	cases := []struct {
		name     string
		opt      StrategyOptions
		schedule backoff.Schedule
		jittered bool
		title    string
	}{
		{"immediate", StrategyOptions{}, backoff.Constant(20 * ms), false, "RETRY IMMEDIATELY"},
		{"immediate", StrategyOptions{Base: time.Second}, backoff.Constant(20 * ms), false, "RETRY IMMEDIATELY"},
		{"constant", StrategyOptions{}, backoff.Constant(60 * ms), false, "CONSTANT BACKOFF"},
		{"constant", StrategyOptions{Base: 35 * ms}, backoff.Constant(35 * ms), false, "CONSTANT BACKOFF"},
		{"expo", StrategyOptions{}, backoff.Exponential{Base: 60 * ms, Jitter: backoff.NoJitter, Unit: ms}, false, "EXPONENTIAL"},
		{"expo-full", StrategyOptions{}, backoff.Exponential{Base: 60 * ms, Jitter: backoff.Full, Unit: ms}, true, "EXPONENTIAL + JITTER"},
		{"expo-full", StrategyOptions{Base: 10 * ms, Cap: time.Second}, backoff.Exponential{Base: 10 * ms, Cap: time.Second, Jitter: backoff.Full, Unit: ms}, true, "EXPONENTIAL + JITTER"},
		{"expo-equal", StrategyOptions{}, backoff.Exponential{Base: 60 * ms, Jitter: backoff.Equal, Unit: ms}, true, "EXPONENTIAL + EQUAL JITTER"},
		{"decorrelated", StrategyOptions{Cap: 2 * time.Second}, backoff.Decorrelated{Base: 60 * ms, Cap: 2 * time.Second, Unit: ms}, true, "DECORRELATED JITTER"},
	}
	for _, c := range cases {
		st, err := ParseStrategy(c.name, c.opt)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if st.Schedule != c.schedule || st.Jittered != c.jittered || st.Title != c.title || st.Name != c.name {
			t.Errorf("%s: got %#v jittered=%v %q, want %#v jittered=%v %q", c.name, st.Schedule, st.Jittered, st.Title, c.schedule, c.jittered, c.title)
		}
		if st.NewBudget != nil || st.Bulkhead != 0 {
			t.Errorf("%s: has a budget or a bulkhead", c.name)
		}
	}
}

// TestExpoFullDraws checks expo-full's draws through the strategy: before
// attempt n, a uniform whole number of ms in [0, 60·2^(n−2)], reaching both
// ends.
func TestExpoFullDraws(t *testing.T) {
	st := mustStrategy(t, "expo-full", StrategyOptions{})
	for n := 1; n <= 4; n++ { // Delay(n) is the wait before attempt n+1
		hi := 60 * ms << (n - 1)
		seen := map[time.Duration]bool{}
		for range 20000 {
			d := st.Schedule.Delay(n, 0, nil)
			if d < 0 || d > hi || d%ms != 0 {
				t.Fatalf("wait before attempt %d: %v, want whole ms in [0, %v]", n+1, d, hi)
			}
			seen[d] = true
		}
		if !seen[0] || !seen[hi] || len(seen) != int(hi/ms)+1 {
			t.Errorf("wait before attempt %d took %d of the %d values (0: %v, max: %v)", n+1, len(seen), hi/ms+1, seen[0], seen[hi])
		}
	}
	imm := mustStrategy(t, "immediate", StrategyOptions{})
	for n := 1; n < 5; n++ {
		if d := imm.Schedule.Delay(n, 0, nil); d != 20*ms {
			t.Errorf("immediate waits %v before attempt %d", d, n+1)
		}
	}
}

func TestParseStrategySuffixes(t *testing.T) {
	st := mustStrategy(t, "expo-full+budget+bulkhead", StrategyOptions{})
	if st.Title != "EXPONENTIAL + JITTER + BUDGET + BULKHEAD" || st.Bulkhead != DefaultBulkhead || st.NewBudget == nil {
		t.Fatalf("%+v", st)
	}
	b1, b2 := st.NewBudget(), st.NewBudget()
	tb, ok := b1.(*budget.TokenBucket)
	if !ok || tb.Credits() != DefaultBudgetInitial || b1 == b2 {
		t.Errorf("NewBudget: %#v (fresh per run: %v)", b1, b1 != b2)
	}
	st = mustStrategy(t, "constant+bulkhead+budget", StrategyOptions{Bulkhead: 7, NewBudget: func() budget.Budget { return &budget.TokenBucket{Initial: 30} }})
	if st.Bulkhead != 7 || st.NewBudget().(*budget.TokenBucket).Credits() != 30 {
		t.Errorf("options not used: %+v", st)
	}
}

func TestParseStrategyErrors(t *testing.T) {
	bad := []struct {
		name string
		opt  StrategyOptions
		want string
	}{
		{"", StrategyOptions{}, `unknown strategy ""`},
		{"exponential", StrategyOptions{}, `unknown strategy "exponential"`},
		{"Immediate", StrategyOptions{}, "unknown strategy"},
		{"immediate+retry", StrategyOptions{}, `suffix "+retry"`},
		{"immediate+", StrategyOptions{}, `suffix "+"`},
		{"expo+budget+budget", StrategyOptions{}, "+budget twice"},
		{"expo", StrategyOptions{Base: -ms}, "base must be > 0"},
		{"expo", StrategyOptions{Cap: -ms}, "cap must be >= 0"},
		{"expo", StrategyOptions{Cap: ms}, "cap (1ms) must be >= base (60ms)"},
		{"expo+bulkhead", StrategyOptions{Bulkhead: -1}, "bulkhead size"},
	}
	for _, c := range bad {
		_, err := ParseStrategy(c.name, c.opt)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseStrategy(%q, %+v) = %v, want an error containing %q", c.name, c.opt, err, c.want)
		}
	}
}

func TestParseStrategyBreakerAndRate(t *testing.T) {
	st := mustStrategy(t, "expo-full+breaker+rate", StrategyOptions{})
	if st.Title != "EXPONENTIAL + JITTER + BREAKER + RATE" || st.NewBudget == nil || st.NewLimiter == nil || st.Bulkhead != 0 {
		t.Fatalf("%+v", st)
	}
	cb, ok := st.NewBudget().(*budget.CircuitBreaker)
	if !ok || cb == st.NewBudget() {
		t.Fatalf("+breaker budget: %T (fresh per run: %v)", cb, ok)
	}
	r, ok := st.NewLimiter().(*limit.Rate)
	if !ok || r.Burst() != DefaultBurst || r.Interval() != time.Second/DefaultRate || r == st.NewLimiter() {
		t.Fatalf("+rate limiter: %#v", r)
	}
	r = mustStrategy(t, "constant+rate", StrategyOptions{Rate: 2, Burst: 7}).NewLimiter().(*limit.Rate)
	if r.Burst() != 7 || r.Interval() != 500*ms {
		t.Errorf("rate options not used: burst %d, interval %v", r.Burst(), r.Interval())
	}
	// +budget and +breaker in either order: the circuit in front.
	for _, name := range []string{"immediate+budget+breaker", "immediate+breaker+budget"} {
		g, ok := mustStrategy(t, name, StrategyOptions{}).NewBudget().(budget.Circuit)
		if !ok {
			t.Fatalf("%s: %T is not a circuit", name, g)
		}
		if _, bare := g.(*budget.CircuitBreaker); bare {
			t.Fatalf("%s: the token bucket is missing", name)
		}
	}
	// +bulkhead and +rate: both limits apply; the rate's refusal gives the
	// bulkhead's slot back.
	st = mustStrategy(t, "immediate+bulkhead+rate", StrategyOptions{Bulkhead: 5, Rate: 1e-3, Burst: 2})
	bh, _ := limit.NewBulkhead(st.Bulkhead)
	l := limit.Join(bh, st.NewLimiter())
	if got := [3]bool{l.TryAcquire(), l.TryAcquire(), l.TryAcquire()}; got != [3]bool{true, true, false} || bh.InFlight() != 2 {
		t.Fatalf("bulkhead+rate: %v, in flight %d; want 2 starts (the burst), then a refusal", got, bh.InFlight())
	}
	l.Release(true)
	if bh.InFlight() != 1 {
		t.Fatalf("release: in flight %d", bh.InFlight())
	}
}

func TestParseStrategyBreakerAndRateErrors(t *testing.T) {
	for _, c := range []struct {
		opt  StrategyOptions
		want string
	}{
		{StrategyOptions{Rate: math.NaN()}, "+rate: limit: invalid configuration: Rate perSecond must be a finite number, got NaN"},
		{StrategyOptions{Rate: math.Inf(1)}, "Rate perSecond must be a finite number, got +Inf"},
		{StrategyOptions{Rate: -1}, "Rate perSecond must be in (0, 1e+09], got -1"},
		{StrategyOptions{Burst: -2}, "Rate burst must be >= 1, got -2"},
		{StrategyOptions{Breaker: budget.CircuitConfig{FailureRatio: math.NaN()}}, "+breaker: budget: invalid configuration: CircuitConfig.FailureRatio must be a finite number"},
		{StrategyOptions{Breaker: budget.CircuitConfig{CoolDown: -ms}}, "CircuitConfig.CoolDown must be > 0"},
	} {
		_, err := ParseStrategy("expo+breaker+rate", c.opt)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.opt, err, c.want)
		}
	}
}

// outageRamp is a long outage with callers arriving all along it and
// after it, in virtual time: 40 callers starting 50 ms apart over 2 s, a
// gateway down for the first second, answering in 10 ms.
func outageRamp() Scenario {
	s := inMemory(FourCallerOutage())
	s.Callers, s.Ramp, s.RoundTrip = 40, 2*time.Second, 0
	s.Faults = Outage(time.Second, 10*ms)
	return s
}

// TestBreakerShedsOriginals: during an outage the circuit breaker refuses
// original requests, which a retry budget never does, so the gateway
// receives fewer of them and fewer attempts in all while it is down; once
// it is back, a trial closes the circuit and the callers that come later
// are all accepted.
func TestBreakerShedsOriginals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := outageRamp()
		count := func(r *Result) (originals, inOutage int) {
			for _, a := range r.Arrivals {
				if a.Attempt == 1 {
					originals++
				}
				if a.At < time.Second {
					inOutage++
				}
			}
			return originals, inOutage
		}
		withBudget := mustRun(t, s, mustStrategy(t, "immediate+budget", StrategyOptions{}))
		withBreaker := mustRun(t, s, mustStrategy(t, "immediate+breaker", StrategyOptions{}))
		bo, bd := count(withBudget)
		co, cd := count(withBreaker)
		t.Logf("originals at the gateway: +budget %d, +breaker %d; attempts during the outage: %d, %d", bo, co, bd, cd)
		if bo != s.Callers {
			t.Errorf("+budget: %d originals arrived, want every caller's %d", bo, s.Callers)
		}
		if co >= bo*3/4 || cd >= bd/2 {
			t.Errorf("+breaker sent %d originals and %d attempts during the outage; +budget %d and %d", co, cd, bo, bd)
		}
		refused, openGiveUps := 0, 0
		for _, c := range withBreaker.Callers {
			start := s.Ramp * time.Duration(c.Caller) / time.Duration(s.Callers)
			switch {
			case c.Attempts == 0:
				refused++ // refused at its original: nothing reached the gateway
			case c.GaveUp == retry.CircuitOpen:
				openGiveUps++
				if !errors.Is(c.Err, retry.ErrCircuitOpen) {
					t.Errorf("caller %d: %v", c.Caller, c.Err)
				}
			}
			// Back up at 1 s; a trial by 1 s + one cool-down closes it.
			if start >= time.Second+2*DefaultBreaker.CoolDown && !c.Accepted {
				t.Errorf("caller %d started at %v, after the circuit closed, and was not accepted: %+v", c.Caller, start, c)
			}
		}
		if refused == 0 || openGiveUps == 0 {
			t.Errorf("+breaker: %d callers refused at their original, %d gave up circuit-open; want both > 0", refused, openGiveUps)
		}
	})
}

// TestRateCapsArrivals: with +rate no span of time t at the gateway holds
// more than burst + rate·t attempts, where without it the same callers
// send several times more; refused attempts give up as limited.
func TestRateCapsArrivals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := outageRamp()
		maxIn := func(r *Result, span time.Duration) int {
			most := 0
			for i, a := range r.Arrivals {
				n := 0
				for _, b := range r.Arrivals[i:] {
					if b.At-a.At >= span {
						break
					}
					n++
				}
				most = max(most, n)
			}
			return most
		}
		free := mustRun(t, s, mustStrategy(t, "immediate", StrategyOptions{}))
		capped := mustRun(t, s, mustStrategy(t, "immediate+rate", StrategyOptions{}))
		for _, span := range []time.Duration{50 * ms, 200 * ms, time.Second} {
			limit := DefaultBurst + int(DefaultRate*span.Seconds())
			if got := maxIn(capped, span); got > limit {
				t.Errorf("+rate: %d attempts within %v, the limit allows %d", got, span, limit)
			}
			if got := maxIn(free, span); got <= 2*limit {
				t.Errorf("without +rate only %d attempts within %v: the test shows nothing", got, span)
			}
		}
		limited := capped.GaveUp()[retry.Limited]
		if limited == 0 || capped.Gateway.Total > DefaultBurst+int(DefaultRate*capped.Elapsed.Seconds())+1 {
			t.Errorf("+rate: %d attempts in %v, %d callers limited", capped.Gateway.Total, capped.Elapsed, limited)
		}
	})
}
func TestParseStrategyHedge(t *testing.T) {
	st := mustStrategy(t, "expo-full+hedge", StrategyOptions{})
	if st.Hedge != DefaultHedge || st.Title != "EXPONENTIAL + JITTER + HEDGE" {
		t.Errorf("%+v", st)
	}
	if st = mustStrategy(t, "constant+hedge+budget", StrategyOptions{Hedge: 30 * ms}); st.Hedge != 30*ms || st.NewBudget == nil {
		t.Errorf("%+v", st)
	}
	if st = mustStrategy(t, "constant", StrategyOptions{Hedge: 30 * ms}); st.Hedge != 0 {
		t.Errorf("no +hedge, yet Hedge %v", st.Hedge)
	}
	if _, err := ParseStrategy("expo+hedge", StrategyOptions{Hedge: -ms}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "hedge delay") {
		t.Errorf("negative delay: %v", err)
	}
	if _, err := ParseStrategy("expo+hedge+hedge", StrategyOptions{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("twice: %v", err)
	}
}
