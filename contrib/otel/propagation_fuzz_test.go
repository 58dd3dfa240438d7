package staggerotel

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

// canonical is a traceparent as this propagator writes it.
var canonical = regexp.MustCompile(`^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$`)

// FuzzPropagator: the traceparent and tracestate a message or a job row
// carries, whatever they hold, either give no trace context (and nothing
// is injected again) or a valid remote one, which is injected as a
// canonical traceparent (the IDs received, when that was canonical) and a
// tracestate that extract to the same context.
func FuzzPropagator(f *testing.F) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, c := range [][2]string{{tp, "congo=t61rcWkgMzE"}, {tp, ""}, {"", "congo=x"},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", "a=1,b=2"},
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01", ""},
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", ""},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", ""},
		{"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", ""},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-extra", "x=y"},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-", ""},
		{tp, strings.Repeat("k=v,", 40)}, {tp, "bad key=v"}, {tp, "\xff=\xfe"}, {tp + "\n", ""}, {"\x00", "\x00"}} {
		f.Add(c[0], c[1])
	}
	p := Propagator(nil)
	f.Fuzz(func(t *testing.T, parent, state string) {
		ctx := p.Extract(context.Background(), parent, state)
		sc := trace.SpanContextFromContext(ctx)
		p2, s2 := p.Inject(ctx)
		if !sc.IsValid() {
			if p2 != "" || s2 != "" {
				t.Fatalf("Extract(%q, %q) gave no trace, yet Inject gives %q, %q", parent, state, p2, s2)
			}
			return
		}
		if !sc.IsRemote() || !canonical.MatchString(p2) {
			t.Fatalf("Extract(%q, %q) = %v (remote %v), injected as %q", parent, state, sc, sc.IsRemote(), p2)
		}
		if canonical.MatchString(parent) && p2[:53] != parent[:53] {
			t.Fatalf("traceparent %q injected again as %q", parent, p2)
		}
		again := trace.SpanContextFromContext(p.Extract(context.Background(), p2, s2))
		if !again.Equal(sc) {
			t.Fatalf("Extract(%q, %q) = %v; injected as %q, %q, which extract to %v", parent, state, sc, p2, s2, again)
		}
	})
}
