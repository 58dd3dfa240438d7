package simkit

import (
	"context"
	"testing"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/budget"
	"github.com/staggerhq/stagger/internal/timeline"
	"github.com/staggerhq/stagger/retry"
)

// BenchmarkReplay: 100,000 recorded first attempts over a 10-minute
// timeline of 200 ms windows, refused for a minute in the middle and
// failing 10% of the time elsewhere, replayed with a token bucket.
func BenchmarkReplay(b *testing.B) {
	tl := &timeline.Timeline{Header: timeline.Header{Width: 200 * time.Millisecond}}
	const windows = 3000 // 10 minutes
	lat := timeline.Latency{P50: 20 * time.Millisecond, P90: 40 * time.Millisecond, P99: 200 * time.Millisecond}
	for i := range windows {
		n := int64(100_000 / windows)
		if i < 100_000%windows {
			n++
		}
		w := timeline.Window{Start: time.Duration(i) * 200 * time.Millisecond, Arrivals: n, Originals: n, Latency: lat, HasLatency: true}
		if i >= 1200 && i < 1500 {
			w.Refusals = n
		} else {
			w.Status = []timeline.StatusCount{{Status: "200", N: n - n/10}, {Status: "500", N: n / 10}}
		}
		tl.Windows = append(tl.Windows, w)
	}
	d, err := ReplayDependency(tl)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		p := &retry.Policy{MaxAttempts: 4, Schedule: backoff.Exponential{Base: 100 * time.Millisecond, Jitter: backoff.Full}, Budget: &budget.TokenBucket{}}
		res, err := d.Run(context.Background(), p, ReplayOptions{Seed: 1})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(res.Attempts), "attempts")
	}
}
