package budget

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var _ Circuit = &CircuitBreaker{}

// transitions records OnStateChange calls.
type transitions struct {
	mu  sync.Mutex
	log []string
}

func (tr *transitions) record(from, to CircuitState, now time.Time) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.log = append(tr.log, fmt.Sprintf("%s->%s@%v", from, to, now.Sub(t0)))
}

func (tr *transitions) String() string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return strings.Join(tr.log, " ")
}

func mustCircuit(t testing.TB, c CircuitConfig) *CircuitBreaker {
	t.Helper()
	b, err := NewCircuitBreaker(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// TestCircuitLifecycle walks closed → open → half-open → open → half-open
// → closed with injected times and checks each refusal and each callback.
func TestCircuitLifecycle(t *testing.T) {
	var tr transitions
	b := mustCircuit(t, CircuitConfig{FailureRatio: 0.5, MinCalls: 4, Window: time.Second,
		CoolDown: 100 * time.Millisecond, TrialCalls: 2, OnStateChange: tr.record})
	// Three failures are below MinCalls: still closed.
	for i := range 3 {
		if !b.Request(at(i)) {
			t.Fatal("a closed circuit refused")
		}
		b.Result(at(i), false)
	}
	if b.State() != CircuitClosed {
		t.Fatalf("opened before MinCalls: %v", b.State())
	}
	b.Result(at(3), false) // 4 of 4 failed
	if b.State() != CircuitOpen || tr.String() != "closed->open@3ms" {
		t.Fatalf("after 4 failures: %v, transitions %q", b.State(), tr.String())
	}
	if b.Request(at(50)) || b.Retry(at(102)) {
		t.Fatal("an open circuit admitted an attempt inside its cool-down")
	}
	b.Result(at(60), true) // a late answer from before it opened: ignored
	if b.State() != CircuitOpen {
		t.Fatal("an outcome reported while open changed the state")
	}
	// The cool-down has passed at 103 ms: two trials, then refusals.
	if !b.Request(at(103)) || b.State() != CircuitHalfOpen || !b.Retry(at(104)) {
		t.Fatal("want two trials after the cool-down")
	}
	if b.Request(at(105)) || b.Retry(at(105)) {
		t.Fatal("a third trial was admitted")
	}
	b.Result(at(110), false) // the first trial failed: open again
	b.Result(at(111), true)  // the second reports while open: ignored
	if b.State() != CircuitOpen || b.Request(at(200)) {
		t.Fatalf("a failed trial: %v", b.State())
	}
	if !b.Request(at(210)) {
		t.Fatal("no trial one cool-down after reopening")
	}
	b.Result(at(215), true)
	if b.State() != CircuitClosed {
		t.Fatalf("a served trial: %v", b.State())
	}
	if calls, failures := b.Counts(at(215)); calls != 0 || failures != 0 {
		t.Fatalf("closing kept the old window: %d calls, %d failures", calls, failures)
	}
	want := "closed->open@3ms open->half-open@103ms half-open->open@110ms open->half-open@210ms half-open->closed@215ms"
	if tr.String() != want {
		t.Fatalf("transitions:\n got %s\nwant %s", tr.String(), want)
	}
	// Closed again: one failure does not reopen it.
	b.Result(at(216), false)
	if b.State() != CircuitClosed || !b.Request(at(216)) {
		t.Fatal("one failure after closing reopened the circuit")
	}
}

// TestCircuitRatio: the ratio is judged over the window, at and above the
// threshold; failures that slid out of the window no longer count.
func TestCircuitRatio(t *testing.T) {
	b := mustCircuit(t, CircuitConfig{FailureRatio: 0.3, MinCalls: 10, Window: time.Second})
	for i := range 8 {
		b.Result(at(i), true)
	}
	b.Result(at(8), false)
	b.Result(at(9), false) // 2 of 10: 20%
	if b.State() != CircuitClosed {
		t.Fatal("opened at 20% with a threshold of 30%")
	}
	// 2 s later the window is empty; 10 new outcomes of which 3 fail: 30%.
	for i := range 7 {
		b.Result(at(2000+i), true)
	}
	b.Result(at(2010), false)
	b.Result(at(2011), false)
	if calls, failures := b.Counts(at(2011)); calls != 9 || failures != 2 {
		t.Fatalf("window after 2 s: %d calls, %d failures, want 9 and 2", calls, failures)
	}
	b.Result(at(2012), false)
	if b.State() != CircuitOpen {
		t.Fatal("3 of 10 did not open at a threshold of 30%")
	}
}

// TestCircuitLostTrial: a trial whose caller never reports back (it gave
// up during its wait) does not hold the circuit half-open for ever.
func TestCircuitLostTrial(t *testing.T) {
	var tr transitions
	b := mustCircuit(t, CircuitConfig{MinCalls: 1, CoolDown: time.Second, OnStateChange: tr.record})
	b.Result(at(0), false)
	if !b.Retry(at(1000)) || b.Retry(at(1500)) {
		t.Fatal("want one trial at 1 s and a refusal at 1.5 s")
	}
	if !b.Request(at(2000)) || b.Request(at(2001)) {
		t.Fatal("a lost trial was not replaced one cool-down later")
	}
	if tr.String() != "closed->open@0s open->half-open@1s" {
		t.Fatalf("transitions: %s", tr.String())
	}
}

func TestCircuitDefaults(t *testing.T) {
	b := mustCircuit(t, CircuitConfig{})
	for i := range DefaultMinCalls - 1 {
		b.Result(at(i), false)
	}
	if b.State() != CircuitClosed {
		t.Fatal("opened before the default MinCalls")
	}
	b.Result(at(DefaultMinCalls), false)
	if b.State() != CircuitOpen {
		t.Fatal("did not open at the default MinCalls")
	}
	open := at(DefaultMinCalls)
	if b.Request(open.Add(DefaultCoolDown - time.Millisecond)) {
		t.Fatal("admitted before the default cool-down")
	}
	if !b.Request(open.Add(DefaultCoolDown)) || b.Request(open.Add(DefaultCoolDown)) {
		t.Fatal("want exactly DefaultTrialCalls (1) trial")
	}
	for _, s := range []CircuitState{CircuitClosed, CircuitOpen, CircuitHalfOpen, 7} {
		_ = s.String()
	}
	if CircuitHalfOpen.String() != "half-open" || CircuitState(7).String() != "CircuitState(7)" {
		t.Fatal("state names")
	}
}

func TestCircuitInvalid(t *testing.T) {
	for _, c := range []struct {
		cfg  CircuitConfig
		want string
	}{
		{CircuitConfig{FailureRatio: math.NaN()}, "FailureRatio must be a finite number, got NaN"},
		{CircuitConfig{FailureRatio: math.Inf(1)}, "FailureRatio must be a finite number, got +Inf"},
		{CircuitConfig{FailureRatio: -0.1}, "FailureRatio must be in (0, 1] (0 means 0.5), got -0.1"},
		{CircuitConfig{FailureRatio: 1.5}, "FailureRatio must be in (0, 1]"},
		{CircuitConfig{MinCalls: -1}, "MinCalls must be >= 1 (0 means 20), got -1"},
		{CircuitConfig{MinCalls: math.MaxUint32 + 1}, "MinCalls must be <= 4294967295"},
		{CircuitConfig{Window: -time.Second}, "Window must be > 0 (0 means 10s), got -1s"},
		{CircuitConfig{CoolDown: -1}, "CoolDown must be > 0 (0 means 5s), got -1ns"},
		{CircuitConfig{TrialCalls: -1}, "TrialCalls must be in [1, 65535] (0 means 1), got -1"},
		{CircuitConfig{TrialCalls: MaxTrialCalls + 1}, "TrialCalls must be in [1, 65535]"},
	} {
		_, err := NewCircuitBreaker(c.cfg)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "CircuitConfig."+c.want) {
			t.Errorf("NewCircuitBreaker(%+v) = %v, want %q", c.cfg, err, c.want)
		}
	}
}

// TestCircuitRace: goroutines call Request, Retry and Result with random
// outcomes while time moves. The state changes the callback saw must form
// valid moves that add up: every entry into open is followed by at most
// one exit from open per cool-down, and the final state matches.
func TestCircuitRace(t *testing.T) {
	var mu sync.Mutex
	moves := map[[2]CircuitState]int{}
	b := mustCircuit(t, CircuitConfig{FailureRatio: 0.5, MinCalls: 5, Window: 100 * time.Millisecond,
		CoolDown: 5 * time.Millisecond, TrialCalls: 3,
		OnStateChange: func(from, to CircuitState, _ time.Time) {
			mu.Lock()
			moves[[2]CircuitState{from, to}]++
			mu.Unlock()
		}})
	var clock atomic.Int64 // calls made; 160 a millisecond since t0
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for range 20000 {
				// Time moves with the calls made (160 a millisecond), so
				// it moves however the goroutines are scheduled; every other
				// 50 ms the dependency fails 90 % of calls, so the circuit
				// opens and closes again within the run.
				ms := int(clock.Add(1) / 160)
				now := at(ms)
				admitted := b.Request(now)
				if rng.IntN(2) == 0 {
					admitted = b.Retry(now)
				}
				if admitted {
					ok := rng.Float64() < 0.6
					if ms/50%2 == 1 {
						ok = rng.Float64() < 0.1
					}
					b.Result(now, ok)
				}
			}
		}()
	}
	wg.Wait()
	for m, n := range moves {
		switch m {
		case [2]CircuitState{CircuitClosed, CircuitOpen}, [2]CircuitState{CircuitOpen, CircuitHalfOpen},
			[2]CircuitState{CircuitHalfOpen, CircuitOpen}, [2]CircuitState{CircuitHalfOpen, CircuitClosed}:
		default:
			t.Errorf("invalid move %v→%v (%d times)", m[0], m[1], n)
		}
	}
	intoOpen := moves[[2]CircuitState{CircuitClosed, CircuitOpen}] + moves[[2]CircuitState{CircuitHalfOpen, CircuitOpen}]
	outOfOpen := moves[[2]CircuitState{CircuitOpen, CircuitHalfOpen}]
	intoClosed := moves[[2]CircuitState{CircuitHalfOpen, CircuitClosed}]
	outOfClosed := moves[[2]CircuitState{CircuitClosed, CircuitOpen}]
	if intoOpen == 0 || intoClosed == 0 {
		t.Fatalf("the race never cycled the circuit: %v", moves)
	}
	final := b.State()
	if d := intoOpen - outOfOpen; d != btoi(final == CircuitOpen) {
		t.Errorf("into open %d, out of open %d, final %v", intoOpen, outOfOpen, final)
	}
	if d := outOfClosed - intoClosed; d != 1-btoi(final == CircuitClosed) {
		t.Errorf("out of closed %d, into closed %d, final %v", outOfClosed, intoClosed, final)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// BenchmarkCircuit is the closed path: Request, then Result for a served
// attempt, as retry.Begin and End call them.
func BenchmarkCircuit(b *testing.B) {
	cb := mustCircuit(b, CircuitConfig{})
	b.Run("closed", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			now := time.Now()
			if !cb.Request(now) {
				b.Fatal("refused")
			}
			cb.Result(now, true)
		}
	})
	b.Run("closed-parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				now := time.Now()
				cb.Request(now)
				cb.Result(now, true)
			}
		})
	})
	b.Run("open", func(b *testing.B) {
		open := mustCircuit(b, CircuitConfig{MinCalls: 1, CoolDown: time.Hour})
		open.Result(time.Now(), false)
		b.ReportAllocs()
		for b.Loop() {
			if open.Request(time.Now()) {
				b.Fatal("admitted")
			}
		}
	})
}

// TestCircuitGuard: the circuit in front of a token bucket: refusals by the
// open circuit cost no credit; the bucket still rules retries while the
// circuit is closed; both hear the outcomes.
func TestCircuitGuard(t *testing.T) {
	cb := mustCircuit(t, CircuitConfig{MinCalls: 2, CoolDown: time.Second})
	tb := &TokenBucket{Initial: 20}
	g := cb.Guard(tb)
	if got := [3]bool{g.Retry(at(0)), g.Retry(at(0)), g.Retry(at(0))}; got != [3]bool{true, true, false} || tb.Credits() != 0 {
		t.Fatalf("closed circuit: %v, credits %d; want the bucket's 2 retries, then a refusal", got, tb.Credits())
	}
	if g.State() != CircuitClosed {
		t.Fatal("state")
	}
	g.Result(at(1), false)
	g.Result(at(1), false)
	if g.State() != CircuitOpen || cb.State() != CircuitOpen {
		t.Fatal("the circuit did not hear the outcomes")
	}
	for range 30 {
		if g.Request(at(2)) {
			t.Fatal("an open circuit admitted an original")
		}
	}
	if tb.Credits() != 0 {
		t.Fatalf("refused originals earned %d credits", tb.Credits())
	}
	if !g.Request(at(1001)) || tb.Credits() != 1 {
		t.Fatalf("the trial: credits %d", tb.Credits())
	}
}
