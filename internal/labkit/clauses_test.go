package labkit

import (
	"strings"
	"testing"
	"time"
)

func TestFaultClausesSpan(t *testing.T) {
	c, err := ParseFaultClauses("--fault", []string{"drop 1s at 9s; down 2s at 3s", "slow 1s at 5s for 10s"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Start() != 3*time.Second || c.End() != 15*time.Second || !c.IsDropped(9500*time.Millisecond) || c.IsDropped(10*time.Second) {
		t.Fatalf("start %v, end %v", c.Start(), c.End())
	}
	if _, err := ParseFaultClauses("Faults", []string{"down 1s"}); err == nil || !strings.HasPrefix(err.Error(), `Faults "down 1s": want "down D at T"`) {
		t.Fatalf("the error must name the field and the clause: %v", err)
	}
}

// FuzzParseFaultClauses: any value parses without a panic into a timeline
// that validates, whose spans stay inside MaxFaultTime.
func FuzzParseFaultClauses(f *testing.F) {
	for _, s := range []string{"down 700ms at 0s", "drop 1s at 2s; latency 20ms", "slow 1s at 0s for 4s", "flap 100ms/200ms at 1s for 2s", "cap 5; retry-after 1s", "down 1s", ";;", "cap -1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseFaultClauses("--fault", []string{s})
		if err != nil {
			return
		}
		if err := c.Faults.Validate(); err != nil {
			t.Fatalf("%q parsed into an invalid timeline: %v", s, err)
		}
		if c.End() > MaxFaultTime || c.Start() > c.End() {
			t.Fatalf("%q: spans [%v, %v] outside [0, %v]", s, c.Start(), c.End(), MaxFaultTime)
		}
	})
}
