package check_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/staggerhq/stagger/budget"
	"github.com/staggerhq/stagger/check"
	"github.com/staggerhq/stagger/retry"
)

// TestMyPolicyDuringAnOutage is docs/check.md's example, run as written.
func TestMyPolicyDuringAnOutage(t *testing.T) {
	mine := &retry.Policy{MaxAttempts: 4, Budget: &budget.TokenBucket{}}
	res, err := check.Run(context.Background(), check.Experiment{
		Policies:   []check.Policy{check.Retry("mine", mine)},
		Callers:    check.OpenLoop(200, true), // 200 requests/s, Poisson
		Dependency: check.Dependency{Latency: 20 * time.Millisecond},
		Faults:     []string{"down 5s at 5s"},
		Duration:   30 * time.Second, // virtual: the run takes milliseconds
		Seed:       1,
	})
	if err != nil {
		t.Fatal(err)
	}
	res.Check(t, check.MaxAmplification(1.3), check.MaxPeakPerWindow(80),
		check.RecoversWithin(2*time.Second), check.NotMetastable())
}

// TestGuardMyPolicy is the README's example, run as written.
func TestGuardMyPolicy(t *testing.T) {
	res, err := check.Run(context.Background(), check.Experiment{
		Policies: []check.Policy{check.Retry("mine", &retry.Policy{MaxAttempts: 4, Budget: &budget.TokenBucket{}})},
		Callers:  check.OpenLoop(200, true), Faults: []string{"down 5s at 5s"}, Duration: 30 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	res.Check(t, check.MaxAmplification(1.3), check.NotMetastable())
}

// TestDocExamples: the Go examples of docs/check.md and of the README are
// the tests above, word for word.
func TestDocExamples(t *testing.T) {
	src, err := os.ReadFile("doc_example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ doc, fn string }{
		{"../docs/check.md", "TestMyPolicyDuringAnOutage"},
		{"../README.md", "TestGuardMyPolicy"},
	} {
		start := strings.Index(string(src), "func "+c.fn)
		end := strings.Index(string(src)[start:], "\n}\n") + start + 3
		b, err := os.ReadFile(c.doc)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "```go\n"+string(src)[start:end]+"```") {
			t.Errorf("%s does not show %s as doc_example_test.go has it", c.doc, c.fn)
		}
	}
}
