package queue

import (
	"strings"
	"testing"
)

// FuzzTraceCodec: encodeTrace stores any injected trace context as at
// most MaxTraceLen bytes of printable ASCII (a newline between the two
// fields), dropping a traceparent that is not printable or does not fit
// and then a tracestate that is not or does not; decodeTrace gives back
// what was kept, unchanged.
func FuzzTraceCodec(f *testing.F) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, c := range [][2]string{{tp, "congo=t61rcWkgMzE"}, {tp, ""}, {"", "a=b"}, {tp, "a\nb"}, {tp + "\n", "x"},
		{tp, strings.Repeat("k", MaxTraceLen-len(tp)-1)}, {tp, strings.Repeat("k", MaxTraceLen-len(tp))},
		{strings.Repeat("p", MaxTraceLen), ""}, {strings.Repeat("p", MaxTraceLen+1), "s"}, {"\xff", "\x7f"}, {tp, "é"}} {
		f.Add(c[0], c[1])
	}
	f.Fuzz(func(t *testing.T, parent, state string) {
		enc := encodeTrace(parent, state)
		if len(enc) > MaxTraceLen || strings.Count(enc, "\n") > 1 || !printable(strings.Replace(enc, "\n", "", 1)) {
			t.Fatalf("encodeTrace(%q, %q) = %q: not at most %d bytes of printable ASCII", parent, state, enc, MaxTraceLen)
		}
		p, s := decodeTrace(enc)
		fits := parent != "" && printable(parent) && len(parent) <= MaxTraceLen
		stateFits := fits && state != "" && printable(state) && len(parent)+1+len(state) <= MaxTraceLen
		switch {
		case !fits && (p != "" || s != ""):
			t.Fatalf("encodeTrace(%q, %q) kept %q, %q", parent, state, p, s)
		case fits && p != parent:
			t.Fatalf("encodeTrace(%q, %q): traceparent back as %q", parent, state, p)
		case stateFits != (s != "") || (stateFits && s != state):
			t.Fatalf("encodeTrace(%q, %q): tracestate back as %q", parent, state, s)
		}
	})
}
