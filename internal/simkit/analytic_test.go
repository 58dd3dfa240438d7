package simkit

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/retry"
)

// TestOCCZeroVariance checks the optimistic-concurrency model against its
// closed form: with every hop exactly d, round k has N−k+1 attempts and one
// winner, so calls = N(N+1)/2 and the last client finishes at
// 4dN + Σ_{k=1}^{N−1} b(k) for a deterministic schedule b.
func TestOCCZeroVariance(t *testing.T) {
	t.Parallel()
	const d = 10 * time.Millisecond
	schedules := map[string]backoff.Schedule{
		"none":     backoff.Constant(0),
		"constant": backoff.Constant(7 * time.Millisecond),
		"expo":     backoff.Exponential{Base: 5 * time.Millisecond, Cap: 2 * time.Second},
		"sequence": backoff.Sequence{1 * time.Millisecond, 30 * time.Millisecond, 2 * time.Millisecond},
	}
	q := new(occQueue)
	for name, s := range schedules {
		for _, n := range []int{1, 2, 3, 10, 57, 190} {
			p := &retry.Policy{MaxAttempts: math.MaxInt, Schedule: s, Rand: pcg(1)}
			got := runOCC(n, d, 0, p, occRand(2), q)
			wantCalls := int64(n * (n + 1) / 2)
			want := occCompletion(n, d, s)
			if got.calls != wantCalls || got.completion != want {
				t.Errorf("%s N=%d: calls %d, completion %v; want %d, %v", name, n, got.calls, got.completion, wantCalls, want)
			}
		}
	}
}

// occCompletion is the closed form of the last client's finish at SD = 0:
// 4dN + Σ_{k=1}^{N−1} b(k) for a deterministic schedule b.
func occCompletion(n int, d time.Duration, s backoff.Schedule) time.Duration {
	want := 4 * d * time.Duration(n)
	for k := 1; k < n; k++ {
		want += s.Delay(k, 0, nil)
	}
	return want
}

// TestBrookerScenarioZeroVariance runs the same check through the
// scenario's sweep (parallel runs, averaging) with the blog simulator's
// attempt counter: at SD = 0 expo finishes at
// 40N + Σ_{k=1}^{N−1} min(2000, 5·2^k) ms (188.55 s at N = 100; stagger's
// own counter, whose first window is 5 ms, gives 186.555 s).
func TestBrookerScenarioZeroVariance(t *testing.T) {
	paper := func(n int) float64 {
		ms := 40.0 * float64(n)
		for k := 1; k < n; k++ {
			ms += math.Min(2000, 5*math.Pow(2, float64(k)))
		}
		return ms
	}
	if got := paper(100); got != 188550 {
		t.Fatalf("closed form at N=100 = %v ms, want 188550", got)
	}
	for _, counter := range []string{"paper", "stagger"} {
		c := DefaultBrooker2015()
		c.NFrom, c.NTo, c.NStep, c.Runs, c.SD = 5, 100, 5, 3, 0
		c.Strategies = []string{"expo"}
		c.Counter = counter
		res, err := c.Run(context.Background(), Options{Seed: 9})
		if err != nil {
			t.Fatal(err)
		}
		s := backoff.Exponential{Base: c.Base, Cap: c.Cap}
		for i, row := range res.Table.Rows {
			n := 5 + 5*i
			want := paper(n)
			if counter == "stagger" {
				want = float64(occCompletion(n, c.Delay, s)) / float64(time.Millisecond)
			}
			if row[1] != n || row[2] != float64(n*(n+1)/2) || row[4] != want {
				t.Errorf("%s: row %v; want N=%d calls=%d completion=%v ms", counter, row, n, n*(n+1)/2, want)
			}
		}
		if last := res.Table.Rows[len(res.Table.Rows)-1]; counter == "stagger" && last[4] != 186555.0 {
			t.Errorf("stagger counter at N=100: %v ms, want 186555", last[4])
		}
	}
}

// TestThreeRetries: at failure rate f, 3 retries make 1+f+f²+f³ calls per
// request and succeed with probability 1−f⁴; the simulated means must lie
// within 4 standard errors.
func TestThreeRetries(t *testing.T) {
	t.Parallel()
	c := DefaultBudgets()
	c.Duration = 60 * time.Second // 60,000 requests per point
	c.Steps = 5                   // f = 0, 0.2, …, 1
	c.Strategies = []string{"3-retries"}
	res, err := c.Run(context.Background(), Options{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Table.Rows) != c.Steps+1 {
		t.Fatalf("%d rows", len(res.Table.Rows))
	}
	for _, row := range res.Table.Rows {
		f := row[1].(float64)
		n := float64(row[2].(int64))
		load, succ := row[4].(float64), row[5].(float64)
		// attempts K: P(K=k) = f^(k−1)(1−f) for k < 4, P(K=4) = f³
		var ek, ek2 float64
		for k := 1; k <= 4; k++ {
			pk := math.Pow(f, float64(k-1)) * (1 - f)
			if k == 4 {
				pk = math.Pow(f, 3)
			}
			ek += float64(k) * pk
			ek2 += float64(k*k) * pk
		}
		wantLoad, wantSucc := 1+f+f*f+f*f*f, 1-math.Pow(f, 4)
		if math.Abs(ek-wantLoad) > 1e-12 {
			t.Fatalf("test's own distribution is off: %v vs %v", ek, wantLoad)
		}
		seLoad := math.Sqrt((ek2-ek*ek)/n) + 1e-12
		seSucc := math.Sqrt(wantSucc*(1-wantSucc)/n) + 1e-12
		if math.Abs(load-wantLoad) > 4*seLoad+5e-4 || math.Abs(succ-wantSucc) > 4*seSucc+5e-4 {
			t.Errorf("f=%.1f: load %.4f (want %.4f ± %.4f), success %.4f (want %.4f ± %.4f)",
				f, load, wantLoad, 4*seLoad, succ, wantSucc, 4*seSucc)
		}
	}
}

// TestBudgetsBoundLoad: at f = 1 three retries quadruple the load, while
// each budget keeps it near 1.1 or lower. The paper's bucket starts with 5
// tokens and earns 0.1 per call, so over n calls per client it allows
// 0.1n + 4 retries give or take one; the paper's breaker sees
// failures/calls = 1 at the first failure and never retries.
func TestBudgetsBoundLoad(t *testing.T) {
	t.Parallel()
	c := DefaultBudgets()
	c.Steps = 1 // f = 0 and f = 1
	res, err := c.Run(context.Background(), Options{Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	perClient := c.RatePer * c.Duration.Seconds()
	for _, row := range res.Table.Rows {
		name, f, load := row[0].(string), row[1].(float64), row[4].(float64)
		if f == 0 {
			// adaptive counts requests still in flight against its accepts,
			// so it sheds a few at the start even when nothing fails.
			if load != 1 && (name != "adaptive" || load < 0.99) {
				t.Errorf("%s at f=0: load %v, want 1", name, load)
			}
			continue
		}
		var lo, hi float64
		switch name {
		case "no-retries", "breaker":
			lo, hi = 1, 1
		case "3-retries":
			lo, hi = 4, 4
		case "token-bucket":
			lo, hi = 1+(0.1*perClient+3)/perClient, 1+(0.1*perClient+5)/perClient
		case "credits", "ratio-10%":
			lo, hi = 1.05, 1.11
		case "breaker-window":
			lo, hi = 1, 1.06
		case "grpc": // 10 tokens, retries while > 5: about 5 per client
			lo, hi = 1, 1+6/perClient
		case "adaptive": // sheds originals locally
			lo, hi = 0, 0.1
		}
		if load < lo || load > hi {
			t.Errorf("%s at f=1: load %.4f outside [%v, %v]", name, load, lo, hi)
		}
		// Refusals are counted whatever their reason (breaker-window's
		// budget.Breaker refuses with circuit-open).
		if name != "no-retries" && name != "3-retries" && name != "adaptive" && fmt.Sprint(row[6]) == "0" {
			t.Errorf("%s at f=1: no refused retry counted", name)
		}
	}
}

// TestBudgetsClientCount is the paper's lesson on client count: 1000 thin
// clients at 100 req/s in total (0.1 req/s each, about 2 calls per client
// in 20 s) each hold a full bucket of 5 tokens they never have to earn, so
// the token bucket retries nearly as if it were not there, while the
// cumulative breaker opens at a client's first failure and keeps its
// protection. With 100 clients at 10 req/s the bucket bounds the load near
// 1.1.
func TestBudgetsClientCount(t *testing.T) {
	t.Parallel()
	load := func(clients int, rate float64) map[string]float64 {
		c := DefaultBudgets()
		c.Clients, c.RatePer, c.Steps = clients, rate, 2 // f = 0, 0.5, 1
		c.Strategies = []string{"3-retries", "token-bucket", "breaker"}
		res, err := c.Run(context.Background(), Options{Seed: 2})
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]float64{}
		for _, row := range res.Table.Rows {
			if row[1].(float64) == 0.5 {
				m[row[0].(string)] = row[4].(float64)
			}
		}
		return m
	}
	thin, thick := load(1000, 0.1), load(100, 10)
	// 3 retries at f = 0.5: 1 + 0.5 + 0.25 + 0.125.
	if l := thin["3-retries"]; math.Abs(l-1.875) > 0.1 { // 4 standard errors over 2000 requests
		t.Errorf("thin clients, 3 retries: load %.3f, want 1.875", l)
	}
	// The bucket's retries are uncapped per request: at f = 0.5 a request
	// takes 2 attempts on average while tokens last, so thin clients reach
	// about 2 calls per request.
	if l := thin["token-bucket"]; l < 1.7 {
		t.Errorf("thin clients, token bucket: load %.3f, want >= 1.7 (its full bucket is never drained)", l)
	}
	if l := thin["breaker"]; l > 1.1 {
		t.Errorf("thin clients, breaker: load %.3f, want <= 1.1 (it opens at a client's first failure)", l)
	}
	if l := thick["token-bucket"]; l > 1.15 {
		t.Errorf("100 clients, token bucket: load %.3f, want <= 1.15", l)
	}
	if l := thick["breaker"]; l > 1.1 {
		t.Errorf("100 clients, breaker: load %.3f, want <= 1.1", l)
	}
}

// TestLayersExact: with the service down, L layers of n attempts reach it
// exactly n^L times per click; a single owner, exactly n.
func TestLayersExact(t *testing.T) {
	c := DefaultLayers()
	c.Shapes = []string{"3x3", "3x4", "5x3", "2x5", "1x4"}
	c.Clicks = 50
	res, err := c.Run(context.Background(), Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{27, 3, 64, 4, 243, 3, 25, 5, 4, 4}
	for i, row := range res.Table.Rows {
		if row[2] != want[i] || row[4] != int64(want[i]) || row[5] != 0.0 {
			t.Errorf("row %v: want %v calls per click (max too), success 0", row, want[i])
		}
		if row[3] != want[i] {
			t.Errorf("row %v: expected column %v, want %v", row, row[3], want[i])
		}
	}
}

// TestLayersPartialFailure: at f < 1 the mean matches the exact formula
// within sampling error.
func TestLayersPartialFailure(t *testing.T) {
	t.Parallel()
	c := DefaultLayers()
	c.Shapes = []string{"3x3"}
	c.Failure = 0.5
	c.Clicks = 20_000
	res, err := c.Run(context.Background(), Options{Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range res.Table.Rows {
		got, exp := row[2].(float64), row[3].(float64)
		if math.Abs(got-exp) > 0.03*exp {
			t.Errorf("%v: %.3f calls per click, expected %.3f", row[1], got, exp)
		}
	}
}

// TestLittlesLaw: in every set-up with a steady state, the time-average in
// flight L equals λ·W within 2%.
func TestLittlesLaw(t *testing.T) {
	t.Parallel()
	c := DefaultLittlesLaw()
	c.Duration, c.Warmup = 660*time.Second, 60*time.Second
	res, err := c.Run(context.Background(), Options{Seed: 11})
	if err != nil {
		t.Fatal(err)
	}
	steady := 0
	for _, row := range res.Table.Rows {
		lat, mode := row[0].(float64), row[1].(string)
		l, lw, errPct := row[4].(float64), row[5].(float64), row[6].(float64)
		if row[10] != "yes" {
			if mode != "pool" || lat != 2 {
				t.Errorf("%v %s marked unsteady", lat, mode)
			}
			continue
		}
		steady++
		if math.Abs(errPct) > 2 || math.Abs(l-lw) > 0.02*lw {
			t.Errorf("%vs %s: L = %.2f, λW = %.2f (%.2f%%)", lat, mode, l, lw, errPct)
		}
	}
	if steady != 5 {
		t.Fatalf("%d steady rows, want 5", steady)
	}
	// the reference numbers: ~10 in flight at 0.1 s, ~200 at 2 s, 50 in a bulkhead
	for _, row := range res.Table.Rows {
		lat, mode, l := row[0].(float64), row[1].(string), row[4].(float64)
		want := map[string]float64{"0.1unbounded": 10, "2unbounded": 200, "2bulkhead": 50}[fmt.Sprint(lat)+mode]
		if want > 0 && math.Abs(l-want) > 0.05*want {
			t.Errorf("%vs %s: L = %.1f, want ~%v", lat, mode, l, want)
		}
	}
}

// TestOutageScenario reproduces the lab's default outage: callers 12 ms
// apart, a 46.2 ms cycle, 64 attempts and a peak of 18 for retrying
// immediately (20 when the callers start together), and checks the jitter
// verification.
func TestOutageScenario(t *testing.T) {
	c := DefaultOutage()
	res, err := c.Run(context.Background(), Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	imm, exp := res.Table.Rows[0], res.Table.Rows[1]
	// caller 4 starts at 48 ms: attempt 16 arrives at 48 + 15·46.2 = 741 ms
	if imm[2] != int64(64) || imm[3] != int64(4) || imm[4] != 18 || imm[6] != 741.0 || imm[5] != 1 {
		t.Errorf("immediate: %v; want 64 attempts, 4 accepted, peak 18, last at 741 ms, one distinct wait", imm)
	}
	if exp[3] != int64(4) || exp[5].(int) < 2 || exp[2].(int64) >= 64 {
		t.Errorf("expo-full: %v; want 4 accepted, >= 2 distinct waits, fewer attempts than immediate", exp)
	}
	if got := res.Log[0]; got != "RETRY IMMEDIATELY: 4 callers, 64 attempts total, 4 accepted, peak 18" {
		t.Errorf("summary line %q", got)
	}
	if got := res.Log[1]; got != "  caller 1 attempt 1: straight away -> DOWN at 12ms" {
		t.Errorf("first log line %q", got)
	}
	if got := res.Log[16]; got != "  caller 1 attempt 16: after 20ms -> ACCEPTED at 705ms" {
		t.Errorf("last log line %q", got)
	}
	c.Ramp, c.Strategies, c.Log = 0, []string{"immediate"}, 0
	res, err = c.Run(context.Background(), Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Table.Rows[0][4]; got != 20 {
		t.Errorf("immediate without a ramp: peak %v, want 20 (callers in lock-step)", got)
	}
}

// TestHerdImmediateExact: with an unlimited database and a fixed round
// trip, each worker hits the database once per round trip during the
// outage: workers × outage / rtt requests.
func TestHerdImmediateExact(t *testing.T) {
	t.Parallel()
	c := DefaultHerd()
	c.Rate = 0
	c.Strategies = []string{"immediate"}
	res, err := c.Run(context.Background(), Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	row := res.Table.Rows[0]
	if row[2] != int64(200_000) || row[3] != int64(200_100) || row[5] != int64(100) || row[4] != 8000 {
		t.Errorf("immediate: %v; want 200000 in the outage, 200100 in all, 100 written, peak 8000", row)
	}
}

// TestHerdAnsweredDown: "answered down" counts the attempts the database
// handled while it was down, so with a host that handles db-rate attempts
// per second it never exceeds db-rate × outage (plus the one in service
// when the outage began to end), however many workers queue up; with 100
// workers it is one per worker per round trip, below that bound.
func TestHerdAnsweredDown(t *testing.T) {
	t.Parallel()
	c := DefaultHerd()
	c.Strategies = []string{"immediate"}
	for _, workers := range []int{100, 20_000} {
		c.Workers = workers
		res, err := c.Run(context.Background(), Options{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		down := res.Table.Rows[0][2].(int64)
		bound := int64(c.Rate*c.Outage.Seconds()) + 1
		if down > bound {
			t.Errorf("%d workers: answered down %d > db-rate × outage = %d", workers, down, bound)
		}
		if workers == 20_000 && down < bound-int64(c.Rate*c.RTT.Seconds()) { // the first arrive half a round trip in
			t.Errorf("%d workers: answered down %d, want the host saturated at ~%d", workers, down, bound)
		}
	}
}

// TestHerdOrdering: the strategies order as expected: immediate ≫
// expo-full ≥ budget during the outage, and the budget dead-letters.
func TestHerdOrdering(t *testing.T) {
	t.Parallel()
	c := DefaultHerd()
	res, err := c.Run(context.Background(), Options{Seed: 4})
	if err != nil {
		t.Fatal(err)
	}
	imm, expo, bud := res.Table.Rows[0], res.Table.Rows[1], res.Table.Rows[2]
	if !(imm[2].(int64) > 100*expo[2].(int64) && expo[2].(int64) > bud[2].(int64)) {
		t.Errorf("answered down: immediate %v, expo %v, budget %v", imm[2], expo[2], bud[2])
	}
	if expo[5] != int64(100) || bud[6].(int64) == 0 {
		t.Errorf("expo-full wrote %v (want 100); budget dead-lettered %v (want > 0)", expo[5], bud[6])
	}
}

// TestCollapse: the paper's spike collapses the server with retries that
// do not back off (their 3 tries exceed its 100 attempts/s capacity, so
// latency keeps growing after the spike), while the 10 s doubling full
// jitter backoff and the budget recover; without the spike nothing times
// out. The ramp's falling edge is back at the normal rate at 50 s; the
// budget serves again by then, plain retries do not.
func TestCollapse(t *testing.T) {
	t.Parallel()
	collapsed := func(c CollapseConfig) map[string]string {
		res, err := c.Run(context.Background(), Options{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for _, row := range res.Table.Rows {
			m[row[0].(string)] = row[10].(string)
			// without a spike only the network's tail (two hops of
			// Exp(0.1 s) past the slack of 1.3 s) times out, rarely.
			if c.SpikeRate == c.Rate && row[3].(float64) > 1 {
				t.Errorf("no spike: %v timeouts per run, want < 1", row)
			}
		}
		return m
	}
	c := DefaultCollapse()
	got := collapsed(c)
	if got["no-backoff"] != "10/10" && got["no-backoff"] != "9/10" && got["no-backoff"] != "8/10" {
		t.Errorf("spike: no-backoff collapsed in %s runs, want at least 8/10", got["no-backoff"])
	}
	if got["full-jitter"] != "0/10" || got["budget"] != "0/10" {
		t.Errorf("spike: backoff or budget runs collapsed: %v", got)
	}
	r := c
	r.Load = "ramp"
	got = collapsed(r)
	if got["no-backoff"] != "10/10" || got["budget"] != "0/10" {
		t.Errorf("ramp: %v; want no-backoff 10/10, budget 0/10", got)
	}
	c.SpikeRate = c.Rate
	for name, v := range collapsed(c) {
		if v != "0/10" {
			t.Errorf("no spike: %s collapsed in %s runs", name, v)
		}
	}
}

// TestCollapseLittle: in steady state at λ = 40 req/s the server holds
// L = λ·W attempts with W = Latency + PerRequest·L, so
// L = λ·Latency / (1 − λ·PerRequest) = 40 / 0.6 ≈ 66.7.
func TestCollapseLittle(t *testing.T) {
	t.Parallel()
	c := DefaultCollapse()
	c.SpikeRate, c.Duration = c.Rate, 400*time.Second
	run := c.runOne("no-backoff", 7)
	var sum float64
	for _, n := range run.conc[20:] {
		sum += float64(n)
	}
	l := sum / float64(len(run.conc)-20)
	want := c.Rate * c.Latency.Seconds() / (1 - c.Rate*c.PerRequest.Seconds())
	if math.Abs(l-want) > 0.05*want {
		t.Errorf("mean in flight %.1f, want λ·Latency/(1−λ·PerRequest) = %.1f ± 5%%", l, want)
	}
	if run.timeouts > 5 {
		t.Errorf("%d timeouts at a stable load", run.timeouts)
	}
}

// TestLittlesStep: when the dependency slows from 0.1 s to 2 s, in flight
// climbs to ~200 without a limit; the pool of 50 fills and queues; the
// bulkhead holds at 50 and refuses the rest at once.
func TestLittlesStep(t *testing.T) {
	c := DefaultLittlesLaw()
	run := func(mode string) littleRun {
		return c.runOne(mode, 100*time.Millisecond, 2*time.Second, 30*time.Second, 90*time.Second, 0, 7)
	}
	u, p, b := run("unbounded"), run("pool"), run("bulkhead")
	if u.inSystemAtEnd < 150 || u.inSystemAtEnd > 250 || u.queueAtEnd != 0 || u.rejected != 0 {
		t.Errorf("unbounded: %d in the system (want ~200), %d queued, %d rejected", u.inSystemAtEnd, u.queueAtEnd, u.rejected)
	}
	if p.inSystemAtEnd != 50+int64(p.queueAtEnd) || p.queueAtEnd < 4000 || p.rejected != 0 {
		t.Errorf("pool: %d in the system, %d queued (want 50 busy + a queue of ~75/s × 60 s)", p.inSystemAtEnd, p.queueAtEnd)
	}
	if b.inSystemAtEnd > 50 || b.queueAtEnd != 0 || b.rejected < 4000 {
		t.Errorf("bulkhead: %d in the system (want <= 50), %d queued, %d refused", b.inSystemAtEnd, b.queueAtEnd, b.rejected)
	}
	// before the step every set-up holds ~10 in flight
	for name, r := range map[string]littleRun{"unbounded": u, "pool": p, "bulkhead": b} {
		var before float64
		for _, a := range r.perSecond[10:30] {
			before += a
		}
		if before /= 20; before < 7 || before > 13 {
			t.Errorf("%s: %.1f in flight before the step, want ~10", name, before)
		}
	}
}

// TestBrookerCounter: with the blog simulator's counter the k-th window of
// expo, full and equal is min(cap, base·2^k) (its attempt counter is
// incremented before the wait), and with stagger's it is
// min(cap, base·2^(k−1)); decorrelated's first wait is drawn from
// [base, 3·base] in both.
func TestBrookerCounter(t *testing.T) {
	for _, counter := range []string{"paper", "stagger"} {
		c := DefaultBrooker2015()
		c.Counter = counter
		shift := 0
		if counter == "paper" {
			shift = 1
		}
		for _, name := range []string{"expo", "full", "equal"} {
			e, ok := c.schedule(name).(backoff.Exponential)
			if !ok {
				t.Fatalf("%s: schedule %T, want backoff.Exponential", name, c.schedule(name))
			}
			for k := 1; k <= 12; k++ {
				want := min(c.Cap, c.Base<<(k-1+shift))
				if got := e.Window(k); got != want {
					t.Errorf("%s %s: window %d = %v, want %v", counter, name, k, got, want)
				}
			}
		}
		src := pcg(3)
		for range 1000 {
			if d := c.schedule("decorrelated").Delay(1, 0, src); d < c.Base || d > 3*c.Base {
				t.Fatalf("%s decorrelated first wait %v outside [%v, %v]", counter, d, c.Base, 3*c.Base)
			}
		}
	}
}

// metastableAt runs the metastable scenario at a tenth of the paper's rate
// and capacity (the same queue waits, a tenth of the events).
func metastableAt(t *testing.T, rate, cut float64, resends int, strategy string, cutLen, duration time.Duration) (goodput float64, c MetastableConfig) {
	t.Helper()
	c = DefaultMetastable()
	c.Rate, c.Capacity, c.Cut, c.Resends, c.Duration = rate/10, c.Capacity/10, cut, resends, duration
	run := c.runOne(strategy, cutLen, 1)
	secs := int(c.Duration / time.Second)
	return meanRange(run.goodput, secs-10, secs), c
}

// TestMetastablePaperCases: the four cases of Huang et al.'s retry
// experiment land where the paper reports them: a 10 s cut to 0.40 CPU
// fails metastably at 13,333 req/s; 9 s at 0.40, 10 s at 0.45 and 10 s at
// 10,000 req/s recover. A budget recovers from the 10 s cut too.
func TestMetastablePaperCases(t *testing.T) {
	t.Parallel()
	paper := 1e9 / 75_000.0
	cases := []struct {
		name       string
		rate, cut  float64
		len        time.Duration
		strategy   string
		metastable bool
	}{
		{"10 s at 0.40 CPU", paper, 0.2, 10 * time.Second, "retries", true},
		{"9 s at 0.40 CPU", paper, 0.2, 9 * time.Second, "retries", false},
		{"10 s at 0.45 CPU", paper, 0.225, 10 * time.Second, "retries", false},
		{"10 s at 0.40 CPU, 10,000 req/s", 10_000, 0.2, 10 * time.Second, "retries", false},
		{"10 s at 0.40 CPU with a budget", paper, 0.2, 10 * time.Second, "budget", false},
	}
	for _, tc := range cases {
		g, c := metastableAt(t, tc.rate, tc.cut, 4, tc.strategy, tc.len, DefaultMetastable().Duration)
		if got := g < 0.5*c.Rate; got != tc.metastable {
			t.Errorf("%s: goodput %.0f/s of %.0f offered; metastable %v, want %v", tc.name, g, c.Rate, got, tc.metastable)
		}
	}
}

// TestMetastableBound: once the queue is past the timeout every request
// costs Resends+1 attempts, so the failure can sustain itself only if
// Rate × (Resends+1) > Capacity. With one resend (2 × 13,333 < 34,000) the
// server recovers from a cut of any length (the backlog of a 20 s cut
// drains at 34,000 − 26,667 attempts/s within a minute and a half); without
// the cut nothing times out.
func TestMetastableBound(t *testing.T) {
	t.Parallel()
	paper := 1e9 / 75_000.0
	for _, l := range []time.Duration{10 * time.Second, 20 * time.Second} {
		g, c := metastableAt(t, paper, 0.2, 1, "retries", l, 200*time.Second)
		if 2*c.Rate >= c.Capacity {
			t.Fatalf("bound not met: %v × 2 >= %v", c.Rate, c.Capacity)
		}
		if g < 0.9*c.Rate {
			t.Errorf("one resend, %v cut: goodput %.0f/s of %.0f, want recovered", l, g, c.Rate)
		}
	}
	c := DefaultMetastable()
	c.Rate, c.Capacity = c.Rate/10, c.Capacity/10
	if run := c.runOne("retries", time.Nanosecond, 1); run.timeouts != 0 {
		t.Errorf("no cut: %d timeouts", run.timeouts)
	}
}

// TestSpiral: without a budget second k carries Rate + k·(Rate − Capacity)
// attempts on average (the SRE book's 10,100 QPS against 10,000 grow by 100
// QPS a second); a run is a random walk around it with a standard
// deviation of about √(k·Rate), so the mean of the runs must lie within 4
// of its standard errors. Each budget allows at most one retry per ten
// queries, so its attempts per query stay at or below 1.1 (a windowed ratio
// may spend its window's allowance in a burst, so a single second can go
// above 1.1 × Rate).
func TestSpiral(t *testing.T) {
	t.Parallel()
	c := DefaultSpiral()
	c.Runs = 8
	res, err := c.Run(context.Background(), Options{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	marks := []int{1, 15, 30, 59}
	for _, row := range res.Table.Rows {
		name := row[0].(string)
		for i, k := range marks {
			got := row[1+i].(float64)
			switch name {
			case "retries":
				want := c.Rate + float64(k)*(c.Rate-c.Capacity)
				se := math.Sqrt(float64(k+1)*c.Rate) / math.Sqrt(float64(c.Runs))
				if math.Abs(got-want) > 4*se {
					t.Errorf("retries, second %d: load %.0f, want %.0f ± %.0f", k, got, want, 4*se)
				}
			}
		}
		if amp := row[7].(float64); name != "retries" && amp > 1.1+1e-3 {
			t.Errorf("%s: %.4f attempts per query, want <= 1.1", name, amp)
		}
	}
}

// TestBackoffFor: open clients make 1 + f + f² + f³ calls per request with
// or without backoff, and as many calls per second; serial clients without
// backoff call at Clients·k / (1/RatePer + 2k·RTT) per second (k the mean
// attempts per call), and with backoff they all but stop calling a
// dependency that fails every call.
func TestBackoffFor(t *testing.T) {
	t.Parallel()
	c := DefaultBackoffFor()
	res, err := c.Run(context.Background(), Options{Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	serialNone := map[float64]float64{}
	for _, row := range res.Table.Rows {
		mode, strategy, f := row[0].(string), row[1].(string), row[2].(float64)
		n, cps, load := float64(row[3].(int64)), row[5].(float64), row[7].(float64)
		k := expectedLoad(f, c.Retries)
		switch {
		case mode == "open":
			// var(attempts) <= 4, so 4 standard errors are at most 8/√n
			if math.Abs(load-k) > 8/math.Sqrt(n)+1e-9 {
				t.Errorf("open %s f=%.1f: %.4f calls/request, want %.4f", strategy, f, load, k)
			}
			if want := float64(c.Clients) * c.RatePer * k; math.Abs(cps-want) > 0.03*want {
				t.Errorf("open %s f=%.1f: %.1f calls/s, want %.1f ± 3%%", strategy, f, cps, want)
			}
		case strategy == "no-backoff":
			serialNone[f] = cps
			if want := c.serialCallRate(f); math.Abs(cps-want) > 0.03*want {
				t.Errorf("serial f=%.1f: %.1f calls/s, want %.1f ± 3%%", f, cps, want)
			}
		case f == 1:
			if cps > 0.1*serialNone[1] {
				t.Errorf("serial backoff at f=1: %.1f calls/s, want < 10%% of %.1f without backoff", cps, serialNone[1])
			}
		}
	}
}

// TestBimodal: the SRE book's frontend (1,000 threads, 1,000 QPS × 0.1 s)
// keeps Rate·Latency = 100 threads busy; when 5% of the queries hang to
// the 100 s deadline it accepts Threads / (Rate·E[hold]) = 19.6% of them
// (the book's 80.4% error rate), and a 1 s per-attempt timeout brings it
// back to accepting everything and serving the 95% that complete.
func TestBimodal(t *testing.T) {
	t.Parallel()
	c := DefaultBimodal()
	c.Hangs = []float64{0, 0.05}
	res, err := c.Run(context.Background(), Options{Seed: 4})
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range res.Table.Rows {
		name, hang := row[0].(string), row[1].(float64)
		acc, book, served, busy := row[3].(float64), row[4].(float64), row[5].(float64), row[6].(float64)
		switch {
		case hang == 0:
			if acc != 1 || math.Abs(busy-100) > 5 {
				t.Errorf("%s, nothing hangs: accepted %.4f, %.1f threads busy; want 1 and 100 (λ·W)", name, acc, busy)
			}
		case name == "deadline":
			if math.Abs(book-1000.0/5095) > 1e-9 || math.Abs(acc-book) > 0.01 {
				t.Errorf("deadline, 5%% hang: accepted %.4f, book %.4f; want 0.196 ± 0.01", acc, book)
			}
		default:
			if acc < 0.999 || math.Abs(served-0.95) > 0.005 {
				t.Errorf("timeout, 5%% hang: accepted %.4f, served %.4f; want 1 and 0.95", acc, served)
			}
		}
	}
}

// TestLimits: before the step every mode serves the offered 1,000 req/s;
// after it a bulkhead of 50 carries B/after = 500 req/s (Little's law)
// with no timeouts, no limit lets the queue grow past the timeout so that
// nothing is served in time, and limit.AIMD with Netflix's defaults finds
// the new capacity within its [20, 200] bounds.
func TestLimits(t *testing.T) {
	t.Parallel()
	c := DefaultLimits()
	res, err := c.Run(context.Background(), Options{Seed: 6})
	if err != nil {
		t.Fatal(err)
	}
	capAfter := float64(c.Workers) / c.After.Seconds()
	for _, row := range res.Table.Rows {
		name, before, late := row[0].(string), row[1].(float64), row[2].(float64)
		timeouts, maxIn := row[4].(float64), row[8].(int64)
		if math.Abs(before-c.Rate) > 0.05*c.Rate {
			t.Errorf("%s: goodput before the step %.0f, want %.0f ± 5%%", name, before, c.Rate)
		}
		switch name {
		case "none":
			if late > 0.05*capAfter {
				t.Errorf("none: late goodput %.0f, want ~0 (collapsed)", late)
			}
		case "bulkhead":
			want := float64(c.Bulkhead) / c.After.Seconds()
			if math.Abs(late-want) > 0.05*want || timeouts != 0 || maxIn > int64(c.Bulkhead) {
				t.Errorf("bulkhead: late goodput %.0f (want %.0f ± 5%%), %.1f timeouts/s, max in flight %d", late, want, timeouts, maxIn)
			}
		case "aimd":
			lim := row[7].(int64)
			if late < 0.9*capAfter || maxIn > int64(c.AIMDMax) || lim < int64(c.AIMDMin) || lim > int64(c.AIMDMax) {
				t.Errorf("aimd: late goodput %.0f (want >= 90%% of %.0f), max in flight %d, limit %d", late, capAfter, maxIn, lim)
			}
		}
	}
}
