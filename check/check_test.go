package check_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/budget"
	"github.com/staggerhq/stagger/check"
	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/retry"
)

// outage is the guard's outage: 100 requests/s (Poisson) to a dependency
// answering in 20 ms, down for 5 s from 5 s, 30 s in all.
func outage(seed uint64, ps ...check.Policy) check.Experiment {
	return check.Experiment{
		Name:       "5s outage under 100 req/s",
		Policies:   ps,
		Callers:    check.OpenLoop(100, true),
		Dependency: check.Dependency{Latency: 20 * time.Millisecond},
		Faults:     []string{"down 5s at 5s"},
		Duration:   30 * time.Second,
		Seed:       seed,
	}
}

// TestDefaultsDoNotStampede guards the project's own defaults: retry's
// nil Policy and the queue's default schedule against an outage (the
// HTTP transport's default runs in real time: TestTransportDefault). A
// change that makes them stampede (more attempts per request, or a
// burst on the dependency) fails here.
func TestDefaultsDoNotStampede(t *testing.T) {
	queueDefault := &retry.Policy{MaxAttempts: queue.DefaultJobMaxAttempts, Schedule: queue.DefaultSchedule}
	for _, seed := range []uint64{1, 2, 3} {
		res, err := check.Run(context.Background(), outage(seed,
			check.Retry("retry nil Policy", nil),
			check.Retry("queue DefaultSchedule", queueDefault),
			check.RetryFunc("nil Policy + TokenBucket", func() *retry.Policy { return &retry.Policy{Budget: &budget.TokenBucket{}} }),
		))
		if err != nil {
			t.Fatal(err)
		}
		// 100 req/s is 20 per 200 ms window; 3 attempts make at most 60
		res.Check(t, check.MaxAmplification(1.6), check.MaxPeakPerWindow(130), check.RecoversWithin(2*time.Second), check.NotMetastable())
		nb := res.Policy("nil Policy + TokenBucket")
		vs, err := res.Evaluate(check.AtMost(1.0, "retry nil Policy"))
		if err != nil || vs[2].Policy != nb.Name || !vs[2].OK {
			t.Errorf("seed %d: a budget added load to the nil Policy: %v %v", seed, vs, err)
		}
		if nb.GaveUp["budget"] == 0 {
			t.Errorf("seed %d: the token bucket refused nothing in a 5 s outage: %v", seed, nb.GaveUp)
		}
	}
}

// recorder is a testing.TB that records what Check reports.
type recorder struct {
	testing.TB
	errs, logs []string
}

func (r *recorder) Errorf(format string, a ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, a...))
}
func (r *recorder) Logf(format string, a ...any) { r.logs = append(r.logs, fmt.Sprintf(format, a...)) }
func (r *recorder) Helper()                      {}

// TestCheckFailsAStampede: a policy that retries at once, 10 times, fails
// the guard's thresholds, and the failure says which measure, the limit,
// the value, the window and the seed, and where the report is.
func TestCheckFailsAStampede(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(check.ReportDirEnv, dir)
	res, err := check.Run(context.Background(), outage(7, check.Retry("immediate", &retry.Policy{MaxAttempts: 10, Schedule: backoff.Constant(0)})))
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{TB: t}
	if res.Check(rec, check.MaxAmplification(1.6), check.MaxPeakPerWindow(130)) {
		t.Fatal("Check passed a policy that retries 10 times at once")
	}
	if len(rec.errs) != 2 {
		t.Fatalf("want 2 failures, got %q", rec.errs)
	}
	p := res.Policy("immediate")
	for _, want := range []string{"immediate: amplification", "exceeds 1.6", "seed 7", "virtual time", "window [", fmt.Sprintf("%.3f", p.Amplification)} {
		if !strings.Contains(rec.errs[0], want) {
			t.Errorf("the failure %q does not say %q", rec.errs[0], want)
		}
	}
	for _, want := range []string{"peak per window", fmt.Sprintf("%d attempts exceeds 130 attempts", p.Peak), "window [" + (p.PeakAt - 200*time.Millisecond).Round(100*time.Microsecond).String()} {
		if !strings.Contains(rec.errs[1], want) {
			t.Errorf("the failure %q does not say %q", rec.errs[1], want)
		}
	}
	if doc, err := os.ReadFile("../docs/check.md"); err != nil || !strings.Contains(string(doc), "\n"+rec.errs[0]+"\n") {
		t.Errorf("docs/check.md does not show the failure as it is: %q (%v)", rec.errs[0], err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.html"))
	if len(files) != 1 || len(rec.logs) != 1 || !strings.Contains(rec.logs[0], files[0]) {
		t.Fatalf("want one report named in the log; files %v, log %q", files, rec.logs)
	}
	b, err := os.ReadFile(files[0])
	if err != nil || !strings.Contains(string(b), "attempts received per window") || !strings.Contains(string(b), "fail") {
		t.Fatalf("the report is not the run's: %v", err)
	}
}

func TestRunIsDeterministic(t *testing.T) {
	e := outage(5, check.RetryFunc("budget", func() *retry.Policy { return &retry.Policy{Budget: &budget.TokenBucket{}} }),
		check.HedgedFunc("hedge", func() (*retry.Hedge, *retry.Policy) { return &retry.Hedge{Delay: 30 * time.Millisecond}, nil }))
	e.Dependency.LatencyExp = 10 * time.Millisecond
	a, err := check.Run(context.Background(), e)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := check.Run(context.Background(), e)
	if !reflect.DeepEqual(a.Policies, b.Policies) {
		t.Fatal("two runs of one seed differ")
	}
	e.Seed = 6
	c, _ := check.Run(context.Background(), e)
	if c.Policies[0].Attempts == a.Policies[0].Attempts && c.Policies[1].Attempts == a.Policies[1].Attempts {
		t.Fatal("another seed gave the same attempts")
	}
}

// TestLabOutageMatchesTheLab: the lab's outage with "retry after 20 ms
// until accepted" is the lab's own arithmetic: 64 attempts, a peak of 18.
func TestLabOutageMatchesTheLab(t *testing.T) {
	res, err := check.Run(context.Background(), check.LabOutage(
		check.Retry("immediate", &retry.Policy{MaxAttempts: 1000, Schedule: backoff.Constant(20 * time.Millisecond)}),
		check.Retry("nil", nil)))
	if err != nil {
		t.Fatal(err)
	}
	p := res.Policy("immediate")
	if p.Attempts != 64 || p.Peak != 18 || p.Successes != 4 {
		t.Fatalf("want 64 attempts, peak 18, 4 successes; got %d, %d, %d", p.Attempts, p.Peak, p.Successes)
	}
	if n := res.Policy("nil"); n.Attempts != 12 || n.GaveUp["exhausted"] != 4 {
		t.Fatalf("the nil Policy: want 12 attempts, 4 exhausted; got %d, %v", n.Attempts, n.GaveUp)
	}
}

func TestValidate(t *testing.T) {
	ok := check.LabOutage(check.Retry("p", nil))
	for name, c := range map[string]struct {
		mut  func(*check.Experiment)
		want string
	}{
		"no policy":   {func(e *check.Experiment) { e.Policies = nil }, "Policies"},
		"twice":       {func(e *check.Experiment) { e.Policies = append(e.Policies, check.Retry("p", nil)) }, "used twice"},
		"zero policy": {func(e *check.Experiment) { e.Policies = []check.Policy{{Name: "x"}} }, "check.Retry"},
		"NaN rate":    {func(e *check.Experiment) { e.Callers.Rate = nanf() }, "Callers.Rate"},
		"neg latency": {func(e *check.Experiment) { e.Dependency.Latency = -1 }, "Dependency.Latency"},
		"bad clause":  {func(e *check.Experiment) { e.Faults = []string{"down 1s"} }, `Faults "down 1s"`},
		"tolerance":   {func(e *check.Experiment) { e.Tolerance = 1 }, "Tolerance"},
		"huge":        {func(e *check.Experiment) { e.Callers = check.OpenLoop(1e9, false); e.Duration = time.Hour }, "requests"},
	} {
		e := ok
		e.Policies = append([]check.Policy(nil), ok.Policies...)
		c.mut(&e)
		_, err := check.Run(context.Background(), e)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: want an error naming %q, got %v", name, c.want, err)
		}
	}
	res, _ := check.Run(context.Background(), ok)
	for _, th := range []check.Threshold{check.MaxAmplification(nanf()), check.MaxPeakPerWindow(0), check.RecoversWithin(-1), check.AtMost(-1, "p")} {
		if _, err := res.Evaluate(th); err == nil {
			t.Errorf("%s: a bad limit was accepted", th.Measure)
		}
	}
}

func nanf() float64 { z := 0.0; return z / z }
