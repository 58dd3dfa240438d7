package simkit_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/internal/simkit"
	"github.com/staggerhq/stagger/internal/timeline"
	"github.com/staggerhq/stagger/retry"
)

// Replay a recorded outage — 40 requests a second, refused for two
// seconds — with two policies, and compare what the dependency receives.
func ExampleReplayDependency() {
	var rec strings.Builder
	rec.WriteString(`{"stagger_timeline":1,"window_ms":1000}` + "\n")
	for s := range 5 {
		if s == 1 || s == 2 { // down: every attempt refused
			fmt.Fprintf(&rec, `{"start_ms":%d,"arrivals":40,"originals":40,"refusals":40,"p50_ms":5,"p99_ms":9}`+"\n", s*1000)
		} else {
			fmt.Fprintf(&rec, `{"start_ms":%d,"arrivals":40,"originals":40,"status":{"200":40},"p50_ms":20,"p99_ms":80}`+"\n", s*1000)
		}
	}
	rec.WriteString(`{"end":{"windows":5,"arrivals":200}}` + "\n")
	tl, err := timeline.Read(strings.NewReader(rec.String()))
	if err != nil {
		fmt.Println(err)
		return
	}
	dep, err := simkit.ReplayDependency(tl)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, p := range []struct {
		name   string
		policy *retry.Policy
	}{
		{"constant 50ms, 10 attempts", &retry.Policy{MaxAttempts: 10, Schedule: backoff.Constant(50 * time.Millisecond)}},
		{"expo full jitter, 4 attempts", &retry.Policy{MaxAttempts: 4, Schedule: backoff.Exponential{Base: 200 * time.Millisecond, Jitter: backoff.Full}}},
	} {
		res, err := dep.Run(context.Background(), p.policy, simkit.ReplayOptions{Seed: 1})
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s: %d attempts for %d requests (recorded %d), %.2f per request, replayed per second %v\n",
			p.name, res.Attempts, res.Originals, res.RecordedAttempts(), res.Amplification(), res.Replayed)
	}
	// Output:
	// constant 50ms, 10 attempts: 839 attempts for 200 requests (recorded 200), 4.20 per request, replayed per second [40 335 361 63 40]
	// expo full jitter, 4 attempts: 418 attempts for 200 requests (recorded 200), 2.09 per request, replayed per second [40 126 141 71 40]
}
