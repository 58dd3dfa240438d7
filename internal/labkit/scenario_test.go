package labkit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/staggerhq/stagger/budget"
	"github.com/staggerhq/stagger/retry"
)

const ms = time.Millisecond

func mustStrategy(t *testing.T, name string, o StrategyOptions) Strategy {
	t.Helper()
	st, err := ParseStrategy(name, o)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func mustRun(t *testing.T, s Scenario, st Strategy) *Result {
	t.Helper()
	r, err := s.Run(t.Context(), st)
	if err != nil {
		t.Fatalf("%s: %v", st.Name, err)
	}
	if !r.Agree() {
		t.Fatalf("%s: callers and gateway disagree:\n%s", st.Name, strings.Join(r.Mismatches, "\n"))
	}
	return r
}

// checkWaitsAreReal checks, in virtual time, that the gap between two
// attempts of a caller is exactly the gateway's latency plus the wait the
// policy decided (retry.Hooks.OnRetry): the recorded waits are the waits
// that happened.
func checkWaitsAreReal(t *testing.T, r *Result, latency time.Duration) {
	t.Helper()
	for i, a := range r.Attempts {
		if a.Attempt == 1 {
			if a.Wait != 0 {
				t.Errorf("caller %d attempt 1 has a wait of %v", a.Caller, a.Wait)
			}
			continue
		}
		prev := r.Attempts[i-1]
		if prev.Caller != a.Caller || prev.Attempt != a.Attempt-1 {
			t.Fatalf("attempts out of order at %d: %+v after %+v", i, a, prev)
		}
		if gap := a.Sent - prev.Sent; gap != latency+a.Wait {
			t.Errorf("caller %d attempt %d: sent %v after the previous, want latency %v + wait %v",
				a.Caller, a.Attempt, gap, latency, a.Wait)
		}
		if a.Arrived != a.Sent {
			t.Errorf("caller %d attempt %d: arrived at %v, sent at %v (no network delay in a bubble)", a.Caller, a.Attempt, a.Arrived, a.Sent)
		}
	}
}

// TestFourCallerOutageInVirtualTime checks the scenario's "retry
// immediately" numbers exactly: with callers starting 12 ms apart (the
// first attempt is at 12 ms) and a 46.2 ms cycle (20 ms wait + 26.2 ms
// round trip; caller 1 is accepted at 12 + 15·46.2 ≈ 705 ms), 4 callers
// make 64 attempts with a peak of 18 in one 200 ms window.
func TestFourCallerOutageInVirtualTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := inMemory(FourCallerOutage())
		// In a bubble the machine adds nothing: the calibrated latency is
		// the whole round trip.
		lat := FourCallerRoundTrip
		r := mustRun(t, s, mustStrategy(t, "immediate", StrategyOptions{}))
		if r.Latency != lat || r.Overhead != 0 {
			t.Errorf("latency %v, overhead %v; want %v and 0", r.Latency, r.Overhead, lat)
		}
		g := r.Gateway
		if g.Total != 64 || g.Accepted != 4 || g.Peak != 18 {
			t.Errorf("immediate: %d attempts, %d accepted, peak %d; want 64, 4, 18", g.Total, g.Accepted, g.Peak)
		}
		c1 := r.Callers[0]
		if !c1.Accepted || c1.Attempts != 16 || c1.AcceptedAt != 12*ms+15*(20*ms+lat) {
			t.Errorf("caller 1: %+v; want accepted on attempt 16 at 705ms", c1)
		}
		if r.Attempts[0].Sent != 12*ms {
			t.Errorf("caller 1's first attempt at %v, want 12ms", r.Attempts[0].Sent)
		}
		for _, a := range r.Attempts {
			if a.Attempt > 1 && a.Wait != ImmediateWait {
				t.Errorf("immediate waited %v before caller %d attempt %d", a.Wait, a.Caller, a.Attempt)
			}
			if want := a.At() >= FourCallerDown; (a.Outcome == Accepted) != want {
				t.Errorf("caller %d attempt %d at %v: %v", a.Caller, a.Attempt, a.At(), a.Outcome)
			}
		}
		checkWaitsAreReal(t, r, lat)
		if err := r.CheckJitter(); err != nil {
			t.Errorf("immediate is not jittered, CheckJitter = %v", err)
		}

		// Full jitter: every wait before attempt n is a whole number of
		// milliseconds in [0, 60·2^(n−2)], and the waits differ.
		r2 := mustRun(t, s, mustStrategy(t, "expo-full", StrategyOptions{}))
		for _, a := range r2.Attempts {
			if a.Attempt == 1 {
				continue
			}
			if hi := DefaultBase << (a.Attempt - 2); a.Wait < 0 || a.Wait > hi || a.Wait%ms != 0 {
				t.Errorf("expo-full: caller %d attempt %d waited %v, want whole ms in [0, %v]", a.Caller, a.Attempt, a.Wait, hi)
			}
		}
		checkWaitsAreReal(t, r2, lat)
		if r2.CallersAccepted() != 4 || r2.DistinctWaits() < 2 || r2.CheckJitter() != nil {
			t.Errorf("expo-full: %d accepted, %d distinct waits", r2.CallersAccepted(), r2.DistinctWaits())
		}
		if r2.Gateway.Total >= g.Total || r2.Gateway.Peak >= g.Peak {
			t.Errorf("expo-full (%d attempts, peak %d) is not gentler than immediate (%d, %d)",
				r2.Gateway.Total, r2.Gateway.Peak, g.Total, g.Peak)
		}

		// Same seed, same waits; another seed, other waits.
		r3 := mustRun(t, s, mustStrategy(t, "expo-full", StrategyOptions{}))
		if fmt.Sprint(r3.Waits()) != fmt.Sprint(r2.Waits()) {
			t.Errorf("same seed gave different waits: %v vs %v", r2.Waits(), r3.Waits())
		}
		s.Seed = 2
		r4 := mustRun(t, s, mustStrategy(t, "expo-full", StrategyOptions{}))
		if fmt.Sprint(r4.Waits()) == fmt.Sprint(r2.Waits()) {
			t.Errorf("seeds 1 and 2 gave the same waits %v", r2.Waits())
		}
	})
}

// TestNoJitterComesBackTogether shows what doubling without jitter
// does: 4 callers that failed together come back together — 4 after 60 ms,
// 4 after 180 ms, 4 after 420 ms.
func TestNoJitterComesBackTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := inMemory(FourCallerOutage())
		s.Ramp, s.RoundTrip = 0, 0
		r := mustRun(t, s, mustStrategy(t, "expo", StrategyOptions{}))
		byTime := map[time.Duration]int{}
		for _, a := range r.Arrivals {
			byTime[a.At]++
		}
		want := map[time.Duration]int{0: 4, 60 * ms: 4, 180 * ms: 4, 420 * ms: 4, 900 * ms: 4}
		if fmt.Sprint(byTime) != fmt.Sprint(want) {
			t.Errorf("arrivals by time = %v, want %v", byTime, want)
		}
		if r.Gateway.Peak != 12 || r.Gateway.Accepted != 4 {
			t.Errorf("peak %d, accepted %d; want 12 (0, 60 and 180 ms in one window), 4", r.Gateway.Peak, r.Gateway.Accepted)
		}
		if r.DistinctWaits() != 4 || r.CheckJitter() != nil {
			t.Errorf("expo: %d distinct waits, CheckJitter %v", r.DistinctWaits(), r.CheckJitter())
		}
	})
}

// TestBudget: the default token bucket shared by all callers allows
// Initial/10 retries in all, then every caller gives up with reason budget.
// Starting empty, 4 originals earn 4 credits and no retry is ever possible.
func TestBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := inMemory(FourCallerOutage())
		r := mustRun(t, s, mustStrategy(t, "immediate+budget", StrategyOptions{}))
		if r.Gateway.Total != 4+DefaultBudgetInitial/10 || r.Gateway.Accepted != 0 {
			t.Errorf("immediate+budget: %d attempts, %d accepted; want %d, 0", r.Gateway.Total, r.Gateway.Accepted, 4+DefaultBudgetInitial/10)
		}
		if gu := r.GaveUp(); gu[retry.Budget] != 4 {
			t.Errorf("gave up: %v, want 4 for budget", gu)
		}

		empty := mustStrategy(t, "immediate+budget", StrategyOptions{NewBudget: func() budget.Budget { return &budget.TokenBucket{Empty: true} }})
		r = mustRun(t, s, empty)
		if r.Gateway.Total != 4 || r.GaveUp()[retry.Budget] != 4 {
			t.Errorf("empty budget: %d attempts, gave up %v; want 4 attempts, 4 budget give-ups", r.Gateway.Total, r.GaveUp())
		}
		for _, c := range r.Callers {
			if c.Attempts != 1 || !errors.Is(c.Err, retry.ErrBudget) {
				t.Errorf("caller %+v", c)
			}
		}

		// With a long enough outage-free tail, expo-full spends less.
		r = mustRun(t, s, mustStrategy(t, "expo-full+budget", StrategyOptions{}))
		retries := r.Gateway.Total - 4
		if retries > DefaultBudgetInitial/10 {
			t.Errorf("expo-full+budget made %d retries, the budget allows %d", retries, DefaultBudgetInitial/10)
		}
	})
}

// TestBulkhead: a shared bulkhead of 2 lets 2 of 4 simultaneous callers in;
// the others get a controlled answer at once (limited) and send nothing.
func TestBulkhead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := inMemory(FourCallerOutage())
		s.Ramp = 0
		r := mustRun(t, s, mustStrategy(t, "immediate+bulkhead", StrategyOptions{}))
		limited, accepted := 0, 0
		for _, c := range r.Callers {
			switch {
			case c.Accepted:
				accepted++
			case c.GaveUp == retry.Limited && c.Attempts == 0:
				limited++
			default:
				t.Errorf("caller %+v", c)
			}
		}
		if limited != 2 || accepted != 2 {
			t.Errorf("limited %d, accepted %d; want 2 and 2", limited, accepted)
		}
	})
}

// TestCapacityAndRetryAfter: a gateway that serves one attempt at a time
// answers the others Busy at once, with a Retry-After of 1s that the callers
// honour (it is longer than immediate's 20 ms). Four callers arriving
// together are therefore served one per second: 4 + 3 + 2 + 1 attempts.
func TestCapacityAndRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := inMemory(FourCallerOutage())
		s.Ramp, s.RoundTrip = 0, 0
		s.Faults = Faults{Capacity: 1, Latency: 100 * ms, RetryAfter: time.Second}
		r := mustRun(t, s, mustStrategy(t, "immediate", StrategyOptions{}))
		g := r.Gateway
		if g.Total != 10 || g.Busy != 6 || g.Accepted != 4 || g.Peak != 4 {
			t.Fatalf("total %d, busy %d, accepted %d, peak %d; want 10, 6, 4, 4", g.Total, g.Busy, g.Accepted, g.Peak)
		}
		for _, a := range r.Attempts {
			if a.Attempt > 1 && a.Wait != time.Second {
				t.Errorf("caller %d attempt %d waited %v, want the gateway's Retry-After of 1s", a.Caller, a.Attempt, a.Wait)
			}
			if a.Sent != time.Duration(a.Attempt-1)*time.Second {
				t.Errorf("caller %d attempt %d sent at %v", a.Caller, a.Attempt, a.Sent)
			}
		}
	})
}

// TestAttemptTimeout: a gateway slower than the callers' attempt timeout
// still counts the attempts it received; the callers see failures.
func TestAttemptTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := inMemory(FourCallerOutage())
		s.Faults, s.RoundTrip = Faults{Latency: 50 * ms}, 0
		s.AttemptTimeout = 10 * ms
		s.MaxAttempts = 3
		r, err := s.Run(t.Context(), mustStrategy(t, "immediate", StrategyOptions{}))
		if err != nil {
			t.Fatal(err)
		}
		if !r.Agree() {
			t.Fatalf("disagree: %v", r.Mismatches)
		}
		if r.Gateway.Total != 12 || r.CallersAccepted() != 0 || r.GaveUp()[retry.Exhausted] != 4 {
			t.Errorf("total %d, accepted callers %d, gave up %v", r.Gateway.Total, r.CallersAccepted(), r.GaveUp())
		}
		for _, a := range r.Attempts {
			if a.Outcome != Failed || !a.Received {
				t.Errorf("attempt %+v: want Failed on the caller's side, received by the gateway", a)
			}
		}
	})
}

func TestRunCanceled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 300*ms)
		defer cancel()
		s := inMemory(FourCallerOutage())
		r, err := s.Run(ctx, mustStrategy(t, "immediate", StrategyOptions{}))
		if !errors.Is(err, context.DeadlineExceeded) || r == nil {
			t.Fatalf("err = %v, result %v", err, r)
		}
		if r.CallersAccepted() != 0 || r.GaveUp()[retry.Deadline] != 4 {
			t.Errorf("gave up %v", r.GaveUp())
		}
	})
}

func TestJitterCheck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := inMemory(FourCallerOutage())
		s.MaxAttempts = 2
		// A base under the 1 ms granularity jitters nothing: every wait is 0.
		r := mustRun(t, s, mustStrategy(t, "expo-full", StrategyOptions{Base: 500 * time.Microsecond}))
		if err := r.CheckJitter(); !errors.Is(err, ErrJitterIdle) {
			t.Errorf("CheckJitter = %v, want ErrJitterIdle (waits %v)", err, r.Waits())
		}
		if ErrJitterIdle.Error() != "every wait was identical — jitter is not doing anything" {
			t.Errorf("message %q", ErrJitterIdle)
		}
		// One wait is nothing to compare.
		s.Callers = 1
		r = mustRun(t, s, mustStrategy(t, "expo-full", StrategyOptions{Base: 500 * time.Microsecond}))
		if err := r.CheckJitter(); err != nil || len(r.Waits()) != 1 {
			t.Errorf("one wait: CheckJitter = %v, waits %v", err, r.Waits())
		}
	})
}

func TestScenarioValidate(t *testing.T) {
	ok := FourCallerOutage()
	bad := []struct {
		name string
		mod  func(*Scenario)
		want string
	}{
		{"no callers", func(s *Scenario) { s.Callers = 0 }, "Callers"},
		{"too many callers", func(s *Scenario) { s.Callers = MaxCallers + 1 }, "Callers"},
		{"negative window", func(s *Scenario) { s.Window = -1 }, "Window"},
		{"negative ramp", func(s *Scenario) { s.Ramp = -1 }, "Ramp"},
		{"negative attempts", func(s *Scenario) { s.MaxAttempts = -1 }, "MaxAttempts"},
		{"negative timeout", func(s *Scenario) { s.AttemptTimeout = -1 }, "AttemptTimeout"},
		{"negative round trip", func(s *Scenario) { s.RoundTrip = -1 }, "RoundTrip"},
		{"listen without dial", func(s *Scenario) { s.Listen = inMemory(*s).Listen }, "Listen and Dial"},
		{"bad faults", func(s *Scenario) { s.Faults.Latency = -1 }, "Faults.Latency"},
	}
	for _, c := range bad {
		s := ok
		c.mod(&s)
		err := s.Validate()
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Validate = %v, want an error naming %s", c.name, err, c.want)
		}
		if _, err := s.Run(t.Context(), mustStrategy(t, "immediate", StrategyOptions{})); err == nil {
			t.Errorf("%s: Run accepted an invalid scenario", c.name)
		}
	}
	if err := ok.Validate(); err != nil {
		t.Error(err)
	}
	if _, err := ok.Run(t.Context(), Strategy{Name: "none"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Run without a schedule: %v", err)
	}
}

// slowConn delays every write, like a slower network.
type slowConn struct {
	net.Conn
	delay time.Duration
}

func (c slowConn) Write(p []byte) (int, error) {
	time.Sleep(c.delay)
	return c.Conn.Write(p)
}

// TestRoundTripCalibration: on a "machine" whose network adds 1 ms to every
// request, Run measures that overhead while warming up and takes it off the
// gateway's latency, so the callers still see the 26.2 ms round trip and
// the scenario's numbers still come out exactly.
func TestRoundTripCalibration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := inMemory(FourCallerOutage())
		dial := s.Dial
		s.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return slowConn{c, ms}, nil
		}
		r, err := s.Run(t.Context(), mustStrategy(t, "immediate", StrategyOptions{}))
		if err != nil {
			t.Fatal(err)
		}
		if r.Overhead != ms || r.Latency != FourCallerRoundTrip-ms {
			t.Errorf("overhead %v, latency %v; want 1ms and %v", r.Overhead, r.Latency, FourCallerRoundTrip-ms)
		}
		if g := r.Gateway; g.Total != 64 || g.Peak != 18 || g.Accepted != 4 {
			t.Errorf("%d attempts, peak %d, %d accepted; want 64, 18, 4", g.Total, g.Peak, g.Accepted)
		}
		// Without calibration the same network stretches every cycle.
		s.RoundTrip, s.Faults.Latency = 0, FourCallerRoundTrip
		r, err = s.Run(t.Context(), mustStrategy(t, "immediate", StrategyOptions{}))
		if err != nil {
			t.Fatal(err)
		}
		if r.Overhead != 0 || r.Latency != FourCallerRoundTrip || r.Gateway.Total == 64 {
			t.Errorf("uncalibrated: overhead %v, latency %v, %d attempts", r.Overhead, r.Latency, r.Gateway.Total)
		}
	})
}

// TestFourCallerCycleWindow checks docs/lab.md's claim: with callers 12 ms
// apart, "retry immediately" makes exactly 64 attempts with a peak of 18
// for any cycle (20 ms + round trip) between 45.87 and 46.57 ms, and not
// outside.
func TestFourCallerCycleWindow(t *testing.T) {
	us := time.Microsecond
	for _, c := range []struct {
		roundTrip time.Duration
		want64    bool
	}{
		{25800 * us, false}, {25880 * us, true}, {26000 * us, true}, {26200 * us, true},
		{26400 * us, true}, {26560 * us, true}, {26600 * us, false},
	} {
		synctest.Test(t, func(t *testing.T) {
			s := inMemory(FourCallerOutage())
			s.RoundTrip = c.roundTrip
			r := mustRun(t, s, mustStrategy(t, "immediate", StrategyOptions{}))
			got := r.Gateway.Total == 64 && r.Gateway.Peak == 18
			if got != c.want64 {
				t.Errorf("cycle %v: %d attempts, peak %d; want 64/18: %v", 20*ms+c.roundTrip, r.Gateway.Total, r.Gateway.Peak, c.want64)
			}
		})
	}
}

// TestHedgeStrategy: with +hedge, an attempt slower than the hedge delay
// gets a second one; the first answer wins, the loser is canceled, and
// the gateway and the callers still agree on every attempt. A budget
// with nothing in it sends no hedge.
func TestHedgeStrategy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := inMemory(FourCallerOutage())
		s.Ramp, s.RoundTrip = 0, 0
		s.Faults = Faults{Latency: 150 * ms}
		r := mustRun(t, s, mustStrategy(t, "expo-full+hedge", StrategyOptions{}))
		if !r.Agree() {
			t.Fatalf("disagree: %v", r.Mismatches)
		}
		if r.Gateway.Total != 8 || r.CallersAccepted() != 4 {
			t.Fatalf("gateway counted %d, %d callers accepted; want 8 and 4", r.Gateway.Total, r.CallersAccepted())
		}
		for _, a := range r.Attempts {
			want := time.Duration(a.Attempt-1) * DefaultHedge
			if a.Sent != want || a.Canceled != (a.Attempt == 2) {
				t.Errorf("caller %d attempt %d sent at %v canceled %v; want %v, canceled only the hedge", a.Caller, a.Attempt, a.Sent, a.Canceled, want)
			}
		}
		for _, c := range r.Callers {
			if c.AcceptedAt != 0 {
				t.Errorf("caller %d accepted by the attempt that arrived at %v, want the first (0s)", c.Caller, c.AcceptedAt)
			}
		}

		empty := StrategyOptions{NewBudget: func() budget.Budget { return &budget.TokenBucket{Empty: true} }}
		r = mustRun(t, s, mustStrategy(t, "expo-full+budget+hedge", empty))
		if !r.Agree() || r.Gateway.Total != 4 || r.CallersAccepted() != 4 {
			t.Errorf("empty budget: gateway counted %d, %d accepted, mismatches %v; want 4 attempts, no hedge", r.Gateway.Total, r.CallersAccepted(), r.Mismatches)
		}

		s.Faults = Faults{Latency: 50 * ms} // faster than the delay: nothing to hedge
		r = mustRun(t, s, mustStrategy(t, "expo-full+hedge", StrategyOptions{}))
		if !r.Agree() || r.Gateway.Total != 4 {
			t.Errorf("fast gateway: counted %d, mismatches %v", r.Gateway.Total, r.Mismatches)
		}
	})
}
