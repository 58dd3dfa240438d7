package lab

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/budget"
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
