package check_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/budget"
	"github.com/staggerhq/stagger/check"
	"github.com/staggerhq/stagger/retry"
)

// recordedOutage writes a recording: 40 requests a second for 5 s, every
// attempt refused in seconds 1 and 2 (the format of stagger proxy
// --record).
func recordedOutage(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	b.WriteString(`{"stagger_timeline":1,"window_ms":1000}` + "\n")
	for s := range 5 {
		if s == 1 || s == 2 {
			fmt.Fprintf(&b, `{"start_ms":%d,"arrivals":40,"originals":40,"refusals":40,"p50_ms":5,"p99_ms":9}`+"\n", s*1000)
		} else {
			fmt.Fprintf(&b, `{"start_ms":%d,"arrivals":40,"originals":40,"status":{"200":40},"p50_ms":20,"p99_ms":80}`+"\n", s*1000)
		}
	}
	b.WriteString(`{"end":{"windows":5,"arrivals":200}}` + "\n")
	path := filepath.Join(t.TempDir(), "outage.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestReplay: a recorded outage replayed against policies side by side;
// the retries are the policy's, so a storm's load is several times the
// recording's and a budget's barely above it; the report shows recorded
// against replayed load.
func TestReplay(t *testing.T) {
	rec, err := check.ReadRecording(recordedOutage(t))
	if err != nil {
		t.Fatal(err)
	}
	e := check.Experiment{
		Policies: []check.Policy{
			check.Retry("storm", &retry.Policy{MaxAttempts: 10, Schedule: backoff.Constant(50 * time.Millisecond)}),
			check.RetryFunc("budget", func() *retry.Policy { return &retry.Policy{Budget: &budget.TokenBucket{}} }),
			check.Hedged("hedge", &retry.Hedge{Delay: 10 * time.Millisecond}, nil),
		},
		Replay: rec,
		Seed:   1,
	}
	res, err := check.Run(context.Background(), e)
	if err != nil {
		t.Fatal(err)
	}
	storm, bud := res.Policy("storm"), res.Policy("budget")
	if storm == nil || bud == nil || len(res.Skipped) != 1 || len(res.Recorded) != 5 {
		t.Fatalf("policies %v, skipped %q, recorded %d windows", res.Policies, res.Skipped, len(res.Recorded))
	}
	if storm.Requests != 200 || storm.Amplification < 3 || bud.Amplification > 1.5 || bud.GaveUp["budget"] == 0 {
		t.Fatalf("storm: %d requests, %.2f per request; budget: %.2f, gave up %v", storm.Requests, storm.Amplification, bud.Amplification, bud.GaveUp)
	}
	dir := t.TempDir()
	t.Setenv(check.ReportDirEnv, dir)
	rec2 := &recorder{TB: t}
	if res.Check(rec2, check.MaxAmplification(1.5)) {
		t.Fatal("the storm passed")
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.html"))
	if len(files) != 1 {
		t.Fatalf("report: %v", files)
	}
	b, _ := os.ReadFile(files[0])
	for _, want := range []string{`data-name="recorded"`, `data-name="storm (replayed)"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the report lacks %s", want)
		}
	}
	e.Faults = []string{"down 1s at 1s"}
	if _, err := check.Run(context.Background(), e); err == nil || !strings.Contains(err.Error(), "Faults and Replay") {
		t.Fatalf("faults with a replay: %v", err)
	}
}

func TestReadRecordingErrors(t *testing.T) {
	dir := t.TempDir()
	cut := filepath.Join(dir, "cut.jsonl")
	os.WriteFile(cut, []byte(`{"stagger_timeline":1,"window_ms":1000}`+"\n"+`{"start_ms":0,"arrivals":4,"status":{"200":4}}`+"\n"), 0o600)
	if _, err := check.ReadRecording(cut); err == nil {
		t.Fatal("a recording cut short was read")
	}
	order := filepath.Join(dir, "order.jsonl")
	os.WriteFile(order, []byte(`{"stagger_timeline":1,"window_ms":1000}`+"\n"+`{"start_ms":1000,"arrivals":4,"status":{"200":4}}`+"\n"+
		`{"start_ms":0,"arrivals":4,"status":{"200":4}}`+"\n"+`{"end":{"windows":2,"arrivals":8}}`+"\n"), 0o600)
	if _, err := check.ReadRecording(order); err == nil || !strings.Contains(err.Error(), "start_ms") {
		t.Fatalf("windows out of order: %v", err)
	}
	if _, err := check.ReadRecordingCSV(strings.NewReader("window_start_ms,arrivals\n0,10\n1000,12\n"), 0); err != nil {
		t.Fatalf("a CSV export: %v", err)
	}
}
