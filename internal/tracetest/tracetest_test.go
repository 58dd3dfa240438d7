package tracetest

import (
	"context"
	"testing"

	"github.com/staggerhq/stagger/retry"
)

var _ retry.Propagator = Propagator{}

func TestRoundTrip(t *testing.T) {
	var p Propagator
	ctx := p.Extract(context.Background(), "00-abc-01", "k=v")
	if parent, state := p.Inject(ctx); parent != "00-abc-01" || state != "k=v" {
		t.Errorf("Inject after Extract = %q, %q", parent, state)
	}
	if got := p.Extract(context.Background(), "", "k=v"); From(got) != (Context{}) {
		t.Errorf("an empty traceparent was kept: %+v", From(got))
	}
	if parent, state := p.Inject(context.Background()); parent != "" || state != "" {
		t.Errorf("Inject of no trace = %q, %q", parent, state)
	}
}
