package labkit

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/staggerhq/stagger/budget"
	"github.com/staggerhq/stagger/retry"
)

// These tests run the real thing — TCP on 127.0.0.1, real timers — and so
// assert only counts and agreement, never durations.

// checkAgreement compares the two sides' counts attempt by attempt,
// independently of Result.reconcile.
func checkAgreement(t *testing.T, r *Result) {
	t.Helper()
	if !r.Agree() {
		t.Fatalf("%s: callers and gateway disagree:\n%s", r.Strategy.Name, strings.Join(r.Mismatches, "\n"))
	}
	sent := 0
	for _, c := range r.Callers {
		sent += c.Attempts
	}
	if sent != len(r.Attempts) || sent != r.Gateway.Total || len(r.Arrivals) != sent {
		t.Fatalf("%s: callers sent %d (log %d), gateway counted %d (%d arrivals)", r.Strategy.Name, sent, len(r.Attempts), r.Gateway.Total, len(r.Arrivals))
	}
	perID := map[string]int{}
	for _, a := range r.Arrivals {
		perID[a.ID]++
	}
	for _, c := range r.Callers {
		if got := perID[strconv.Itoa(c.Caller)]; got != c.Attempts {
			t.Errorf("%s: caller %d sent %d attempts, gateway counted %d", r.Strategy.Name, c.Caller, c.Attempts, got)
		}
	}
	accepted := 0
	for _, a := range r.Attempts {
		if a.Outcome == Accepted {
			accepted++
		}
	}
	if accepted != r.Gateway.Accepted {
		t.Errorf("%s: callers saw %d accepted, gateway accepted %d", r.Strategy.Name, accepted, r.Gateway.Accepted)
	}
}

func TestLoopbackFourCallerOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the four-caller outage on real time (~2 s); skipped with -short")
	}
	for _, name := range []string{"immediate", "expo-full"} {
		r := mustRun(t, FourCallerOutage(), mustStrategy(t, name, StrategyOptions{}))
		checkAgreement(t, r)
		if r.CallersAccepted() != 4 {
			t.Errorf("%s: %d callers accepted, want 4", name, r.CallersAccepted())
		}
		for _, a := range r.Attempts {
			if (a.Outcome == Accepted) != (a.Arrived >= FourCallerDown) {
				t.Errorf("%s: caller %d attempt %d arrived at %v: %v", name, a.Caller, a.Attempt, a.Arrived, a.Outcome)
			}
		}
	}
}

// TestLoopbackThousandCallers: 1,000 callers through a short outage on real
// loopback HTTP; every attempt is counted once on each side.
func TestLoopbackThousandCallers(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 callers on real time; skipped with -short")
	}
	s := Scenario{
		Callers: 1000,
		Faults:  Outage(300*time.Millisecond, 5*time.Millisecond),
		Ramp:    100 * time.Millisecond,
		Seed:    3,
	}
	var bucket *budget.TokenBucket
	opt := StrategyOptions{NewBudget: func() budget.Budget {
		bucket = &budget.TokenBucket{Initial: DefaultBudgetInitial}
		return bucket
	}}
	for _, name := range []string{"expo-full", "immediate+budget"} {
		r := mustRun(t, s, mustStrategy(t, name, opt))
		checkAgreement(t, r)
		if r.Gateway.Requests != 1000 {
			t.Errorf("%s: gateway saw %d logical requests, want 1000", name, r.Gateway.Requests)
		}
		switch name {
		case "expo-full":
			if r.CallersAccepted() != 1000 {
				t.Errorf("expo-full: %d callers accepted", r.CallersAccepted())
			}
		case "immediate+budget":
			// Credits are conserved: what the bucket started with, plus
			// what the 1,000 originals earned (at most 1 each, none while
			// the reserve is full), pays 10 per retry and the rest is left.
			retries := r.Gateway.Total - 1000
			earned := 10*int64(retries) + bucket.Credits() - DefaultBudgetInitial
			if earned < 0 || earned > 1000 {
				t.Errorf("budget: %d retries with %d credits left means %d credits earned by 1000 originals", retries, bucket.Credits(), earned)
			}
			// How many callers the budget stops depends on real timing (a
			// slow start lets first attempts land after the outage); what
			// stops them must be the budget.
			for reason, n := range r.GaveUp() {
				if reason != retry.Budget {
					t.Errorf("%d callers gave up for %v, want only budget", n, reason)
				}
			}
		}
	}
}
