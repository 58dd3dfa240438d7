package simkit

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/staggerhq/stagger/budget"
	"github.com/staggerhq/stagger/limit"
	"github.com/staggerhq/stagger/retry"
)

// small returns a scenario's configuration shrunk for a fast test.
func small(t *testing.T, name string) Runner {
	t.Helper()
	s, ok := Lookup(name)
	if !ok {
		t.Fatalf("no scenario %q", name)
	}
	r := s.New()
	set := map[string]map[string]string{
		"herd":        {"workers": "50", "outage": "1s"},
		"brooker2015": {"n-to": "30", "runs": "3"},
		"budgets":     {"duration": "1s", "steps": "2", "clients": "20"},
		"collapse":    {"runs": "2", "duration": "40s"},
		"layers":      {"clicks": "30"},
		"limits":      {"rate": "200", "workers": "10", "step-at": "5s", "duration": "15s"},
		"bimodal":     {"rate": "100", "threads": "100", "hang": "0.05", "deadline": "10s", "warmup": "20s", "duration": "40s"},
		"backoff":     {"clients": "20", "duration": "2s", "steps": "2"},
		"spiral":      {"rate": "1010", "capacity": "1000", "duration": "10s"},
		"metastable":  {"rate": "1333", "capacity": "3400", "cut-len": "9s,10s", "duration": "30s"},
		"littles-law": {"duration": "60s", "warmup": "10s", "latency": "100ms,1s"},
		"hedge":       {"duration": "6s", "warmup": "1s", "load": "0.5,0.95"},
	}[name]
	for _, p := range r.Params() {
		if v, ok := set[p.Name]; ok {
			if err := p.Set(v); err != nil {
				t.Fatal(err)
			}
		}
	}
	return r
}

func render(t *testing.T, res *Result) string {
	t.Helper()
	var b bytes.Buffer
	for _, w := range []func(io.Writer) error{res.WriteText, res.WriteJSON, res.WriteCSV} {
		if err := w(&b); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// TestDeterministic: the same seed gives byte-identical output, whatever
// the parallelism; another seed gives another output.
func TestDeterministic(t *testing.T) {
	for _, s := range Scenarios() {
		t.Run(s.Name, func(t *testing.T) {
			t.Parallel()
			var outs []string
			for _, o := range []Options{{Seed: 42, Parallel: 1}, {Seed: 42, Parallel: 3}, {Seed: 43}} {
				res, err := small(t, s.Name).Run(context.Background(), o)
				if err != nil {
					t.Fatal(err)
				}
				outs = append(outs, render(t, res))
			}
			if outs[0] != outs[1] {
				t.Fatalf("same seed, different output:\n%s\n---\n%s", outs[0], outs[1])
			}
			if outs[0] == outs[2] && s.Name != "layers" { // layers at f=1 is deterministic by design
				t.Fatalf("seeds 42 and 43 gave identical output")
			}
		})
	}
}

// TestEveryScenarioListed: names are unique, described, and every
// parameter has usage text and accepts its own default.
func TestEveryScenarioListed(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range Scenarios() {
		if seen[s.Name] || s.Summary == "" {
			t.Errorf("scenario %q duplicated or undescribed", s.Name)
		}
		seen[s.Name] = true
		fs := flag.NewFlagSet(s.Name, flag.ContinueOnError)
		for _, p := range s.New().Params() {
			if p.Usage == "" {
				t.Errorf("%s: parameter %s has no usage", s.Name, p.Name)
			}
			if err := p.Check(); err != nil {
				t.Errorf("%s: default rejected: %v", s.Name, err)
			}
			fs.Var(p, p.Name, p.Usage) // panics on a duplicate name
		}
	}
	if len(seen) != 13 {
		t.Errorf("%d scenarios, want 13", len(seen))
	}
}

// TestBadParams: bad values are refused by Set (the CLI flag) and by Run
// (values set in code), naming the parameter.
func TestBadParams(t *testing.T) {
	cases := []struct{ scenario, param, value string }{
		{"outage", "callers", "0"},
		{"outage", "callers", "-4"},
		{"outage", "callers", "true"},
		{"outage", "callers", "4.5"},
		{"outage", "outage", "-1s"},
		{"outage", "outage", "soon"},
		{"outage", "strategy", "sometimes"},
		{"herd", "workers", "99999999999"},
		{"herd", "db-rate", "NaN"},
		{"herd", "db-rate", "+Inf"},
		{"herd", "db-rate", "-5"},
		{"herd", "rtt", "0s"},
		{"brooker2015", "runs", "0"},
		{"budgets", "rate", "false"},
		{"budgets", "breaker-threshold", "1.5"},
		{"layers", "shapes", "3x"},
		{"layers", "shapes", "0x3"},
		{"layers", "shapes", "9x10"},
		{"layers", "failure", "2"},
		{"littles-law", "latency", "2s,-1s"},
		{"littles-law", "latency", "fast"},
		{"collapse", "timeout", "0s"},
		{"collapse", "load", "sideways"},
		{"brooker2015", "counter", "python"},
		{"budgets", "backoff", "-1s"},
		{"metastable", "cut", "2"},
		{"metastable", "cut-len", "10s,0s"},
		{"spiral", "capacity", "0"},
		{"spiral", "attempts", "-1"},
		{"backoff", "mode", "half-open"},
		{"bimodal", "hang", "0.1,NaN"},
		{"bimodal", "hang", "1.5"},
		{"limits", "aimd-backoff", "1"},
		{"limits", "rate", "Inf"},
	}
	for _, c := range cases {
		s, _ := Lookup(c.scenario)
		r := s.New()
		var p *Param
		for _, q := range r.Params() {
			if q.Name == c.param {
				p = q
			}
		}
		if p == nil {
			t.Fatalf("%s has no parameter %s", c.scenario, c.param)
		}
		fs := flag.NewFlagSet(c.scenario, flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		for _, q := range r.Params() {
			fs.Var(q, q.Name, q.Usage)
		}
		err := fs.Parse([]string{"--" + c.param + "=" + c.value})
		if err == nil || !strings.Contains(err.Error(), "-"+c.param) {
			t.Errorf("%s --%s=%s: error %v, want one naming the flag", c.scenario, c.param, c.value, err)
		}
	}

	// values set in code are checked by Run
	h := DefaultHerd()
	h.Workers = 0
	if _, err := h.Run(context.Background(), Options{}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "workers") {
		t.Errorf("Workers = 0: %v", err)
	}
	h = DefaultHerd()
	h.Cap = time.Millisecond
	if _, err := h.Run(context.Background(), Options{}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "cap") {
		t.Errorf("cap < base: %v", err)
	}
	h = DefaultHerd()
	h.Workers, h.Rate = 1_000_000, 0 // immediate requeue: 2e9 attempts
	if _, err := h.Run(context.Background(), Options{}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "workers") {
		t.Errorf("immediate with 10⁶ workers and no db-rate: %v", err)
	}
	lim := DefaultLimits()
	lim.AIMDMin = 300 // above aimd-max
	if _, err := lim.Run(context.Background(), Options{}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "aimd-max") {
		t.Errorf("aimd-min > aimd-max: %v", err)
	}
	lim = DefaultLimits()
	lim.AIMDInitial = 10 // below aimd-min
	if _, err := lim.Run(context.Background(), Options{}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "aimd-initial") {
		t.Errorf("aimd-initial < aimd-min: %v", err)
	}
	bi := DefaultBimodal()
	bi.Warmup = bi.Duration
	if _, err := bi.Run(context.Background(), Options{}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "warmup") {
		t.Errorf("warmup >= duration: %v", err)
	}
	co := DefaultCollapse()
	co.Load, co.SpikeRate = "ramp", 10 // a ramp that falls from the start
	if _, err := co.Run(context.Background(), Options{}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "spike-rate") {
		t.Errorf("ramp with spike-rate < rate: %v", err)
	}
	sp := DefaultSpiral()
	sp.Duration, sp.Runs = 24*time.Hour, 10_000 // a spiral of ~1e16 attempts
	if _, err := sp.Run(context.Background(), Options{}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "duration") {
		t.Errorf("huge spiral: %v", err)
	}
	s := DefaultOutage()
	s.Outage, s.Callers = time.Hour, 100_000
	if _, err := s.Run(context.Background(), Options{}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "callers") {
		t.Errorf("outage with an hour-long outage: %v", err)
	}
	b := DefaultBrooker2015()
	b.Delay, b.SD = 0, 0
	if _, err := b.Run(context.Background(), Options{}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "delay") {
		t.Errorf("instant hops: %v", err)
	}
	b = DefaultBrooker2015()
	b.NTo = 5
	if _, err := b.Run(context.Background(), Options{}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "n-to") {
		t.Errorf("n-to < n-from: %v", err)
	}
	b = DefaultBrooker2015()
	b.Runs = 1_000_000
	if _, err := b.Run(context.Background(), Options{}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "runs") {
		t.Errorf("huge sweep: %v", err)
	}
	l := DefaultLittlesLaw()
	l.Warmup = l.Duration
	if _, err := l.Run(context.Background(), Options{}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "warmup") {
		t.Errorf("warmup >= duration: %v", err)
	}
}

// TestCanceled: a sweep stops when its context ends.
func TestCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c := DefaultBrooker2015()
	if _, err := c.Run(ctx, Options{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

// TestProgress: a sweep reports each run once, ending at the total.
func TestProgress(t *testing.T) {
	c := DefaultBrooker2015()
	c.NTo, c.Runs = 30, 5
	var calls, last int
	_, err := c.Run(context.Background(), Options{Parallel: 1, Progress: func(done, total int) {
		calls++
		last = done
		if total != 3*5*5 {
			t.Errorf("total %d", total)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if calls != 75 || last != 75 {
		t.Fatalf("progress called %d times, last %d", calls, last)
	}
}

// recorder logs every call a driver makes to a budget and a limiter.
type recorder struct {
	log   *[]string
	inner budget.Budget
	lim   limit.Limiter
}

func (r recorder) Request(now time.Time) bool {
	*r.log = append(*r.log, "request")
	return r.inner.Request(now)
}
func (r recorder) Retry(now time.Time) bool {
	ok := r.inner.Retry(now)
	*r.log = append(*r.log, "retry:"+map[bool]string{true: "yes", false: "no"}[ok])
	return ok
}
func (r recorder) Result(now time.Time, ok bool) {
	*r.log = append(*r.log, "result:"+map[bool]string{true: "ok", false: "fail"}[ok])
	r.inner.Result(now, ok)
}
func (r recorder) TryAcquire() bool {
	*r.log = append(*r.log, "acquire")
	return r.lim.TryAcquire()
}
func (r recorder) Release(ok bool) {
	*r.log = append(*r.log, "release")
	r.lim.Release(ok)
}

// TestDriverMatchesDo: for the same sequence of outcomes the simulator's
// driver makes the same budget and limiter calls, in the same order, as
// the in-process retry.Do.
func TestDriverMatchesDo(t *testing.T) {
	newPolicy := func(log *[]string) *retry.Policy {
		bulk, _ := limit.NewBulkhead(1)
		rec := recorder{log: log, inner: &budget.TokenBucket{Initial: 25}, lim: bulk}
		return &retry.Policy{MaxAttempts: 10, Budget: rec, Limiter: rec, Rand: pcg(1)}
	}
	// retry.Do against a dependency down for its first 3 attempts... of
	// which the budget allows 2 retries (25 credits, 10 each)
	var doLog []string
	n := 0
	err := retry.Do(context.Background(), withFakeClock(newPolicy(&doLog)), func(context.Context) error {
		n++
		return ErrDown
	})
	if !errors.Is(err, retry.ErrBudget) {
		t.Fatalf("Do: %v", err)
	}
	// the outage model with one caller, down long enough for every attempt
	var simLog []string
	om := outageModel{callers: 1, jobs: 1, outage: time.Hour, rtt: time.Millisecond, window: DefaultWindow, bucket: time.Second}
	run := om.run(newPolicy(&simLog))
	t.Logf("Do: %v", doLog)
	if !slices.Equal(doLog, simLog) {
		t.Fatalf("calls differ:\nDo:  %v\nsim: %v", doLog, simLog)
	}
	if run.m.Calls() != int64(n) || run.m.GaveUp(retry.Budget) != 1 {
		t.Fatalf("sim made %d calls (Do %d), budget give-ups %d", run.m.Calls(), n, run.m.GaveUp(retry.Budget))
	}
}
