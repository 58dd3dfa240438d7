package check_test

import (
	"context"
	"errors"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/check"
	"github.com/staggerhq/stagger/internal/timeline"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retryhttp"
)

// writeOutage writes a recording of 12 windows of 100 ms: 30 first
// attempts a window answered in 10 ms (p50; p90 20 ms, p99 40 ms), and
// from 400 to 800 ms an outage in which the dependency admitted 20
// attempts a window (12 answered 200, 4 answered 500, 4 reset) and
// refused 40. With refusals false the 40 are recorded as abandoned
// instead: the same failures, but no capacity (a replay that ignores the
// refusals).
func writeOutage(t testing.TB, refusals bool) *check.Recording {
	t.Helper()
	path := filepath.Join(t.TempDir(), "outage.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := timeline.NewWriter(f, timeline.Header{Width: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 12 {
		win := timeline.Window{Start: time.Duration(i) * 100 * time.Millisecond, Arrivals: 30, Originals: 30,
			Status:     []timeline.StatusCount{{Status: "200", N: 30}},
			Latency:    timeline.Latency{P50: 10 * time.Millisecond, P90: 20 * time.Millisecond, P99: 40 * time.Millisecond},
			HasLatency: true}
		if i >= 4 && i < 8 {
			win.Arrivals, win.Status, win.Resets = 60, []timeline.StatusCount{{Status: "200", N: 12}, {Status: "500", N: 4}}, 4
			win.Latency = timeline.Latency{P50: 5 * time.Millisecond, P90: 10 * time.Millisecond, P99: 20 * time.Millisecond}
			if refusals {
				win.Refusals = 40
			} else {
				win.Abandoned = 40
			}
		}
		if err := w.Add(win); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	rec, err := check.ReadRecording(path)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// replayExperiment replays rec with up to 4 attempts 40 ms apart.
func replayExperiment(rec *check.Recording) func(uint64) check.Experiment {
	return func(seed uint64) check.Experiment {
		return check.Experiment{
			Name: "a recorded timeline",
			Policies: []check.Policy{check.Retry("4 attempts", &retry.Policy{MaxAttempts: 4,
				Schedule: backoff.Exponential{Base: 40 * time.Millisecond, Multiplier: 1, Jitter: backoff.Full}})},
			Replay: rec,
			Window: 100 * time.Millisecond,
			Seed:   seed,
		}
	}
}

// TestVirtualPredictsRealReplay: a recorded outage replayed in virtual
// time predicts its replay in real time (the gateway following the same
// recording by the same rule): attempts, peak per window and
// amplification, Welch's t over 30 seeds a side. The same real-time runs
// tell apart a virtual replay that ignores the recorded refusals, so the
// comparison can fail. Real time: 30 runs of about 1.3 s, 3 at once.
func TestVirtualPredictsRealReplay(t *testing.T) {
	if testing.Short() {
		t.Skip("real-time agreement runs 30 loopback replays of 1.2 s; run without -short")
	}
	if raceEnabled {
		t.Skip("real-time agreement runs without -race (go test -count=1 -run VirtualPredictsReal ./check)")
	}
	exp := replayExperiment(writeOutage(t, true))
	virt, real := agreementRuns(t, exp)
	agree(t, virt, real)

	blind := make([]check.PolicyResult, agreementSeeds)
	for i := range blind {
		res, err := check.Run(context.Background(), replayExperiment(writeOutage(t, false))(uint64(i+1)))
		if err != nil {
			t.Fatal(err)
		}
		blind[i] = res.Policies[0]
	}
	told := false
	for _, m := range agreementMeasures {
		tv := welch(sample(blind, m.of), sample(real, m.of))
		t.Logf("%s, refusals ignored: virtual %.3f, real %.3f, t = %.2f", m.name, mean(sample(blind, m.of)), mean(sample(real, m.of)), tv)
		told = told || math.Abs(tv) > agreementT
	}
	if !told {
		t.Error("a virtual replay that ignores the recorded refusals agrees with the real-time replay on every measure: the comparison cannot fail")
	}
}

// TestReplayReal: RunReal replays a recording with a retry policy, a
// hedge and a transport side by side (virtual time skips the last two):
// every recorded first attempt starts, every request finishes, and the
// recorded refusals make the retry policy retry.
func TestReplayReal(t *testing.T) {
	rec := writeOutage(t, true)
	e := replayExperiment(rec)(1)
	e.Policies = append(e.Policies,
		check.Hedged("hedge 15ms", &retry.Hedge{Delay: 15 * time.Millisecond}, nil),
		check.Transport("retryhttp.New(nil, nil)", func(base http.RoundTripper) http.RoundTripper { return retryhttp.New(base, nil) }))
	res, err := check.RunReal(context.Background(), e)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Policies) != 3 || len(res.Recorded) != 12 || res.Window != rec.Width() {
		t.Fatalf("%d policies, %d recorded windows, window %v", len(res.Policies), len(res.Recorded), res.Window)
	}
	for _, p := range res.Policies {
		if p.Requests != 360 || p.Unfinished != 0 || len(p.Windows) < 12 {
			t.Errorf("%s: %d requests (want the recording's 360), %d unfinished, %d windows", p.Name, p.Requests, p.Unfinished, len(p.Windows))
		}
	}
	if p := res.Policy("4 attempts"); p.Amplification < 1.2 || p.Attempts > 4*p.Requests {
		t.Errorf("4 attempts against a recording that refused 2 of 3 attempts for 400 ms: amplification %.2f, %d attempts", p.Amplification, p.Attempts)
	}
	virt, err := check.Run(context.Background(), e)
	if err != nil {
		t.Fatal(err)
	}
	if len(virt.Policies) != 1 || len(virt.Skipped) != 2 {
		t.Fatalf("virtual time replays the retry policy only: skipped %q", virt.Skipped)
	}
}

// TestReplayRealTooLarge: a recording that starts more requests than a
// real-time run takes is refused before anything runs.
func TestReplayRealTooLarge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, _ := timeline.NewWriter(f, timeline.Header{Width: time.Second})
	if err := w.Add(timeline.Window{Arrivals: check.MaxRealRequests + 1, Originals: -1,
		Status: []timeline.StatusCount{{Status: "200", N: check.MaxRealRequests + 1}}}); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(w.Close(), f.Close()); err != nil {
		t.Fatal(err)
	}
	rec, err := check.ReadRecording(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = check.RunReal(context.Background(), check.Experiment{Policies: []check.Policy{check.Retry("nil", nil)}, Replay: rec})
	if !errors.Is(err, check.ErrInvalid) || !strings.Contains(err.Error(), "Replay") {
		t.Fatalf("got %v, want ErrInvalid naming Replay", err)
	}
}
