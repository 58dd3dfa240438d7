package simkit

import (
	"context"
	"errors"
	"io"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/budget"
	"github.com/staggerhq/stagger/internal/report"
	"github.com/staggerhq/stagger/internal/timeline"
	"github.com/staggerhq/stagger/retry"
)

const msec = time.Millisecond

// served is a window in which every one of n attempts was answered 200
// after lat, n of them first attempts.
func served(start time.Duration, n int64, lat time.Duration) timeline.Window {
	w := timeline.Window{Start: start, Arrivals: n, Originals: n, HasLatency: true,
		Latency: timeline.Latency{P50: lat, P90: lat, P99: lat}}
	if n > 0 {
		w.Status = []timeline.StatusCount{{Status: "200", N: n}}
	}
	return w
}

func replay(t *testing.T, tl *timeline.Timeline, p *retry.Policy, seed uint64) *ReplayResult {
	t.Helper()
	d, err := ReplayDependency(tl)
	if err != nil {
		t.Fatal(err)
	}
	res, err := d.Run(context.Background(), p, ReplayOptions{Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestReplayHealthy: a recording without failures replays as recorded:
// every window receives its recorded first attempts and nothing more.
func TestReplayHealthy(t *testing.T) {
	tl := &timeline.Timeline{Header: timeline.Header{Width: 200 * msec}}
	for i, n := range []int64{5, 0, 12, 7, 30} {
		tl.Windows = append(tl.Windows, served(time.Duration(i)*200*msec, n, 20*msec))
	}
	tl.Windows = append(tl.Windows, served(2*time.Second, 9, 20*msec)) // after a gap
	res := replay(t, tl, &retry.Policy{MaxAttempts: 5}, 1)
	if res.Attempts != 63 || res.Originals != 63 || res.Succeeded != 63 || res.Amplification() != 1 {
		t.Errorf("%d attempts, %d originals, %d succeeded; want 63 of each", res.Attempts, res.Originals, res.Succeeded)
	}
	if !reflect.DeepEqual(res.Recorded, res.Replayed) {
		t.Errorf("recorded %v, replayed %v", res.Recorded, res.Replayed)
	}
	if res.Recorded[10] != 9 || len(res.Recorded) != 11 {
		t.Errorf("recorded %v: want 11 windows, 9 in the last", res.Recorded)
	}
	c := res.LoadChart("recorded vs replayed")
	if len(c.Series) != 2 || len(c.Series[0].Points) != 11 || c.Series[1].Points[10] != (report.Point{X: 2, Y: 9}) {
		t.Errorf("chart %+v", c)
	}
	page := report.Page{Title: "replay", Sections: []report.Section{{Title: "load", Charts: []report.Chart{c}}}}
	if err := report.Write(io.Discard, page); err != nil {
		t.Errorf("the chart does not render: %v", err)
	}
}

// outageTimeline is the lab's outage as a proxy records it: 4 first
// attempts in the first window, down (refused) for 700 msec, answers after
// 26.2 msec.
func outageTimeline() *timeline.Timeline {
	lat := timeline.Latency{P50: 26200 * time.Microsecond, P90: 26200 * time.Microsecond, P99: 26200 * time.Microsecond}
	tl := &timeline.Timeline{Header: timeline.Header{Width: 100 * msec}}
	for i := range 10 {
		w := timeline.Window{Start: time.Duration(i) * 100 * msec, Originals: 0, Latency: lat, HasLatency: true, Arrivals: 8}
		if i == 0 {
			w.Originals = 4
		}
		if i < 7 {
			w.Refusals = 8
		} else {
			w.Status = []timeline.StatusCount{{Status: "200", N: 8}}
		}
		tl.Windows = append(tl.Windows, w)
	}
	return tl
}

// TestReplayOutage: in a recorded outage nothing succeeds before it ends;
// retrying every 20 msec over a 46.2 msec cycle makes about 16 attempts per
// request, and full jitter far fewer.
func TestReplayOutage(t *testing.T) {
	imm := replay(t, outageTimeline(), &retry.Policy{MaxAttempts: 1000, Schedule: backoff.Constant(20 * msec)}, 1)
	if imm.Succeeded != 4 || imm.Originals != 4 {
		t.Fatalf("%+v", imm)
	}
	for i, n := range imm.Replayed[:7] {
		if n == 0 {
			t.Errorf("window %d received nothing during the outage", i)
		}
	}
	// attempt k of a request that started at s arrives at s + (k−1)·46.2 msec;
	// the first after 700 msec is accepted: 16 attempts for s in (6.8, 53), 15 or 17 outside.
	if imm.Amplification() < 14 || imm.Amplification() > 17 {
		t.Errorf("retry immediately: %.2f attempts per request, want 14–17", imm.Amplification())
	}
	jit := replay(t, outageTimeline(), &retry.Policy{MaxAttempts: 1000, Schedule: backoff.Exponential{Base: 60 * msec, Jitter: backoff.Full, Unit: msec}}, 1)
	if jit.Succeeded != 4 || jit.Amplification() >= imm.Amplification()/2 {
		t.Errorf("full jitter: %d succeeded, %.2f attempts per request; want 4 and under half of %.2f", jit.Succeeded, jit.Amplification(), imm.Amplification())
	}
}

// TestReplayCapacity: a window that shed half of 100 attempts admits 50;
// without retries exactly 50 requests succeed.
func TestReplayCapacity(t *testing.T) {
	tl := &timeline.Timeline{Header: timeline.Header{Width: time.Second}, Windows: []timeline.Window{{
		Arrivals: 100, Originals: 100, Refusals: 50, Status: []timeline.StatusCount{{Status: "200", N: 50}},
	}}}
	res := replay(t, tl, &retry.Policy{MaxAttempts: 1}, 3)
	if res.Succeeded != 50 || res.GaveUp[retry.Exhausted] != 50 {
		t.Errorf("%d succeeded, gave up %v; want 50 and 50", res.Succeeded, res.GaveUp)
	}
}

// TestReplayErrorRate: a recorded 20% failure rate fails about 20% of the
// attempts (within 4 standard deviations of 20,000 draws).
func TestReplayErrorRate(t *testing.T) {
	tl := &timeline.Timeline{Header: timeline.Header{Width: time.Second}}
	for i := range 20 {
		tl.Windows = append(tl.Windows, timeline.Window{Start: time.Duration(i) * time.Second, Arrivals: 1000, Originals: 1000,
			Status: []timeline.StatusCount{{Status: "200", N: 800}, {Status: "500", N: 100}}, Resets: 50, Timeouts: 50})
	}
	res := replay(t, tl, &retry.Policy{MaxAttempts: 1, AttemptTimeout: time.Second}, 7)
	failed := float64(res.GaveUp[retry.Exhausted]) / 20000
	if sd := math.Sqrt(0.2 * 0.8 / 20000); math.Abs(failed-0.2) > 4*sd {
		t.Errorf("failed %.4f, want 0.2 ± %.4f", failed, 4*sd)
	}
}

// TestReplayAttemptTimeout: answers slower than AttemptTimeout end at the
// bound and are retried; the run is deterministic for a seed.
func TestReplayAttemptTimeout(t *testing.T) {
	tl := &timeline.Timeline{Header: timeline.Header{Width: time.Second}, Windows: []timeline.Window{served(0, 10, 2*time.Second)}}
	p := &retry.Policy{MaxAttempts: 3, AttemptTimeout: 500 * msec, Schedule: backoff.Constant(100 * msec)}
	res := replay(t, tl, p, 1)
	if res.Attempts != 30 || res.Succeeded != 0 || res.GaveUp[retry.Exhausted] != 10 {
		t.Errorf("%d attempts, %d succeeded, gave up %v; want 30, 0, 10 exhausted", res.Attempts, res.Succeeded, res.GaveUp)
	}
	// each request: 3 attempts of 500 msec and 2 waits of 100 msec after its start in [0, 1 s)
	if res.Completion < 1700*msec || res.Completion >= 2700*msec {
		t.Errorf("completion %v, want in [1.7 s, 2.7 s)", res.Completion)
	}
	if again := replay(t, tl, p, 1); !reflect.DeepEqual(res, again) {
		t.Error("two runs with the same seed differ")
	}
}

// TestReplayBudget: a token bucket caps the retries of a long outage that
// plain retries amplify.
func TestReplayBudget(t *testing.T) {
	tl := &timeline.Timeline{Header: timeline.Header{Width: time.Second}}
	for i := range 30 {
		w := timeline.Window{Start: time.Duration(i) * time.Second, Arrivals: 100, Originals: 100}
		if i >= 10 && i < 20 {
			w.Refusals = 100
		} else {
			w.Status = []timeline.StatusCount{{Status: "200", N: 100}}
		}
		tl.Windows = append(tl.Windows, w)
	}
	sched := backoff.Exponential{Base: 100 * msec, Jitter: backoff.Full}
	plain := replay(t, tl, &retry.Policy{MaxAttempts: 5, Schedule: sched}, 1)
	bud := replay(t, tl, &retry.Policy{MaxAttempts: 5, Schedule: sched, Budget: &budget.TokenBucket{}}, 1)
	t.Logf("amplification: plain %.2f, with a token bucket %.2f; gave up %v", plain.Amplification(), bud.Amplification(), bud.GaveUp)
	if plain.Amplification() < 1.3 || bud.Amplification() > 1.15 || bud.GaveUp[retry.Budget] == 0 {
		t.Errorf("plain %.2f (want >= 1.3), budget %.2f (want <= 1.15) with budget give-ups %d", plain.Amplification(), bud.Amplification(), bud.GaveUp[retry.Budget])
	}
}

func TestReplayInvalid(t *testing.T) {
	if _, err := ReplayDependency(nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("nil: %v", err)
	}
	if _, err := ReplayDependency(&timeline.Timeline{Header: timeline.Header{Width: time.Second}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("no windows: %v", err)
	}
	bad := &timeline.Timeline{Header: timeline.Header{Width: time.Second}, Windows: []timeline.Window{{Arrivals: 1, Originals: -1}}}
	if _, err := ReplayDependency(bad); !errors.Is(err, timeline.ErrInvalid) {
		t.Errorf("sum broken: %v", err)
	}
	d, _ := ReplayDependency(outageTimeline())
	if _, err := d.Run(context.Background(), nil, ReplayOptions{Window: -1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("negative window: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	big := &timeline.Timeline{Header: timeline.Header{Width: time.Second}, Windows: []timeline.Window{served(0, 10000, msec)}}
	d, _ = ReplayDependency(big)
	if _, err := d.Run(ctx, nil, ReplayOptions{}); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled: %v", err)
	}
}
