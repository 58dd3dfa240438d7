package labkit

import (
	"strings"
	"testing"
)

// FuzzFaultParts feeds each step of ParseFault's clause parsing (the
// positional arguments of every kind, each option's parser) arbitrary
// text directly, on a Fault of every kind: none may panic, and an error
// always says something.
func FuzzFaultParts(f *testing.F) {
	for _, s := range []string{"503", "100ms 20ms", "1k", "up", "GET", "/api", "X-Key=v", "1.5", "Mon, 02 Jan 2006 15:04:05 GMT", "", "-1", "NaN", "1e309", "a=b=c"} {
		f.Add(s)
	}
	kinds := []FaultKind{FaultStatus, FaultDelay, FaultCut, FaultReset, FaultLatency, FaultBandwidth, FaultSlowClose, FaultTimeout, FaultSlicer, FaultLimitData, FaultResetPeer, ""}
	f.Fuzz(func(t *testing.T, s string) {
		args := strings.Fields(s)
		for _, k := range kinds {
			steps := []func(*Fault) error{
				func(x *Fault) error { return x.parseArgs(args) },
				func(x *Fault) error { return x.parseStatusArg(args) },
				func(x *Fault) error { return x.parseDelayArg(args) },
				func(x *Fault) error { return x.parseBytesArg(args) },
				func(x *Fault) error { return x.parseResetPeerArgs(args) },
				func(x *Fault) error { return x.parseOptions(args) },
				func(x *Fault) error { return x.parseToxicity("p", s) },
				func(x *Fault) error { return x.parseName("name", s) },
				func(x *Fault) error { return x.parseDir("dir", s) },
				func(x *Fault) error { return x.parseMethod("method", s) },
				func(x *Fault) error { return x.parsePath("path", s) },
				func(x *Fault) error { return x.parseHeader("header", s) },
				func(x *Fault) error { return x.parseRetryAfter("retry-after", s) },
				func(x *Fault) error { return x.parseBody("body", s) },
				func(x *Fault) error { return x.parseJitter("jitter", s) },
				func(x *Fault) error { return x.parseDelayOption("delay", s) },
			}
			for _, step := range steps {
				if err := step(&Fault{Kind: k}); err != nil && err.Error() == "" {
					t.Fatalf("kind %q, input %q: an error with no text", k, s)
				}
			}
		}
	})
}
