package labkit

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/staggerhq/stagger/internal/wire"
	"github.com/staggerhq/stagger/internal/wire/wiretest"
)

// TestGatewayHostileHeaders sends the worst value of every header the
// gateway reads, each alone and repeated, over a real connection: it keeps
// serving, and records no attempt number or request ID beyond the rule
// (docs/architecture.md, "Values from the wire").
func TestGatewayHostileHeaders(t *testing.T) {
	g, err := NewGateway(Faults{}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	g.warmup = "warm-key"
	base, err := g.Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	addr := strings.TrimPrefix(base, "http://")
	cases := wiretest.Cases(HeaderRequestID, HeaderAttempt, headerWarmup)
	for _, h := range cases {
		_, _ = wiretest.Send(addr, "/", h) // refused (400, 431) or served: either way, no crash
	}
	if code, err := wiretest.Send(addr, "/", []wiretest.Header{{HeaderRequestID, "r1"}, {HeaderAttempt, "2"}}); err != nil || code != 200 {
		t.Fatalf("a normal request after the hostile ones: %d, %v", code, err)
	}
	if err := g.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	arr := g.Recorder().Arrivals()
	if len(arr) < len(cases)/2 {
		t.Fatalf("only %d of %d hostile requests were recorded: the test sends too little", len(arr), len(cases))
	}
	for _, a := range arr {
		if a.Attempt < 0 || a.Attempt > wire.MaxAttempt || a.ID != "" && !wire.ValidID(a.ID) {
			t.Errorf("recorded attempt %d, ID %.20q", a.Attempt, a.ID)
		}
	}
	if last := arr[len(arr)-1]; last.ID != "r1" || last.Attempt != 2 || last.Outcome != Accepted {
		t.Errorf("the normal request was recorded as %+v", last)
	}
}
