package check

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/staggerhq/stagger/internal/simkit"
	"github.com/staggerhq/stagger/internal/timeline"
)

// Recording is a dependency's recorded timeline: per window, the attempts
// that arrived, the answers by status, the refusals, the attempts without
// an answer and the latency percentiles, as `stagger proxy --record`
// writes it or a CSV export gives it. Set it as Experiment.Replay to
// replay the outage against a policy.
type Recording struct {
	tl  *timeline.Timeline
	dep *simkit.Replay
}

// ReadRecording reads a recording in the JSON lines format of `stagger
// proxy --record`. A file cut short, out of order or malformed is an
// error naming the line, the field and the rule.
func ReadRecording(path string) (*Recording, error) {
	tl, err := timeline.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return newRecording(tl)
}

// ReadRecordingCSV reads a recording from a CSV export (one row per
// window: window_start or window_start_ms, arrivals, status_NNN,
// refusals, timeout, reset, refused, abandoned, p50_ms, p90_ms, p99_ms;
// docs/proxy.md lists the columns) with windows of width (0: the smallest
// gap between rows).
func ReadRecordingCSV(r io.Reader, width time.Duration) (*Recording, error) {
	tl, err := timeline.ReadCSV(r, width)
	if err != nil {
		return nil, err
	}
	return newRecording(tl)
}

func newRecording(tl *timeline.Timeline) (*Recording, error) {
	dep, err := simkit.ReplayDependency(tl)
	if err != nil {
		return nil, err
	}
	return &Recording{tl: tl, dep: dep}, nil
}

// Width returns the recording's window width.
func (r *Recording) Width() time.Duration { return r.tl.Width }

// End returns the end of the recording's last window.
func (r *Recording) End() time.Duration { return r.tl.End() }

// Arrivals returns the attempts the recording received.
func (r *Recording) Arrivals() int64 { return r.tl.Arrivals() }

// recorded returns the recorded attempts, first attempts and served
// answers per window of the recording's width, from 0.
func (r *Recording) recorded() []Window {
	var ws []Window
	for _, w := range r.tl.Windows {
		i := int(w.Start / r.tl.Width)
		for len(ws) <= i {
			ws = append(ws, Window{Start: time.Duration(len(ws)) * r.tl.Width})
		}
		ws[i].Attempts += w.Arrivals
		orig := w.Arrivals
		if w.Originals >= 0 {
			orig = w.Originals
		}
		ws[i].Requests += orig
		ws[i].Accepted += w.Served()
	}
	return ws
}

// originals returns the logical requests the recording starts.
func (r *Recording) originals() int64 {
	var n int64
	for i := range r.dep.Windows() {
		n += r.dep.Originals(i)
	}
	return n
}

// arrivals returns the instants the recorded first attempts start, in
// order: the replay's rule (simkit.Replay.Arrival) drawn from rng.
func (r *Recording) arrivals(rng *rand.Rand) []time.Duration {
	var ts []time.Duration
	for i := range r.dep.Windows() {
		for range r.dep.Originals(i) {
			ts = append(ts, r.dep.Arrival(i, rng))
		}
	}
	slices.Sort(ts)
	return ts
}

// replayFrame sets what a replay's result shows of the recording: its
// windows and its span as the fault.
func replayFrame(res *Result, rec *Recording) {
	res.Window = rec.Width()
	res.FaultStart, res.FaultEnd = 0, rec.End()
	res.Recorded = rec.recorded()
}

// runReplay replays the recording with each policy in virtual time.
func runReplay(ctx context.Context, p *plan, res *Result) error {
	rec := p.e.Replay
	replayFrame(res, rec)
	for _, pol := range p.e.Policies {
		if err := ctx.Err(); err != nil {
			return err
		}
		if pol.newRetry == nil {
			res.Skipped = append(res.Skipped, pol.Name+": an http.RoundTripper runs in real time only (RunReal replays the recording with it)")
			continue
		}
		pp, h := runPolicy(pol, p.e.Seed, 0x9e3779b97f4a7c15)
		if h != nil {
			res.Skipped = append(res.Skipped, pol.Name+": a hedge is not replayed in virtual time (the recorded dependency has no per-attempt latency to hedge against)")
			continue
		}
		rr, err := rec.dep.Run(ctx, pp, simkit.ReplayOptions{Seed: p.e.Seed, Window: p.window, Hang: p.e.Dependency.Hang})
		if err != nil {
			return fmt.Errorf("check: %s: %w", pol.Name, err)
		}
		pr, span := replayPolicy(pol.Name, rr, res, rec)
		res.Duration = max(res.Duration, span)
		res.Policies = append(res.Policies, pr)
	}
	return nil
}

// replayPolicy sums up one policy's replay, virtual or real: the result
// and the span it covers.
func replayPolicy(name string, rr *simkit.ReplayResult, res *Result, rec *Recording) (PolicyResult, time.Duration) {
	pr := PolicyResult{Name: name, Requests: rr.Originals, Attempts: rr.Attempts, Successes: rr.Succeeded,
		Amplification: rr.Amplification(), Peak: rr.Peak, PeakAt: rr.PeakAt, GaveUp: map[string]int64{}, Events: rr.Events}
	for reason, n := range rr.GaveUp {
		if n > 0 {
			pr.GaveUp[reason.String()] = n
		}
	}
	for i, n := range rr.Replayed {
		w := Window{Start: time.Duration(i) * rr.Width, Attempts: n}
		if i < len(res.Recorded) {
			w.Requests = res.Recorded[i].Requests
		}
		pr.Windows = append(pr.Windows, w)
	}
	span := max(rr.Completion, rec.End())
	if span > 0 {
		pr.Goodput = float64(rr.Succeeded) / span.Seconds()
	}
	// a replay runs until every request has finished
	pr.Recovered, pr.Recovery = true, max(0, rr.Completion-rec.End())
	return pr, span
}
