package main

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/staggerhq/stagger/internal/labkit"
)

// FuzzParseFaults: any --fault value is refused with an error naming the
// flag, or gives a valid schedule with every time in [0, 24h], which its
// normalized clauses, parsed again, give unchanged.
func FuzzParseFaults(f *testing.F) {
	for _, s := range []string{"down 700ms at 2s", "drop 1s at 0s; latency 25ms", "slow 200ms at 1s for 5s", "flap 100ms/200ms at 1s for 3s",
		"cap 8; retry-after 1500ms", "DOWN 1S AT 2S", "down 1µs at 0", "down 24h at 1ns", "down 12h at 12h", "down 0s at 1s", "down -1s at 1s",
		"latency 1s; latency 2s", "cap 0", "cap 1000001", "cap 9223372036854775808", "flap 1s at 1s for 1s", "flap 0s/1s at 1s for 1s",
		"slow 1s at 1s to 2s", "retry-after 0s", "bogus", ";;", " ", "", "down 1s at", "down 1h at 9223372036854775807ns",
		strings.Repeat("down 1ms at 1ms;", 1001), "down\t1s\nat\r2s", "down 1s at 2s; \xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		s, err := parseFaults([]string{v})
		if err != nil {
			if s != nil || !strings.HasPrefix(err.Error(), "--fault") {
				t.Fatalf("parseFaults(%q) = %v, %q: want no schedule and an error naming the flag", v, s, err)
			}
			return
		}
		if err := s.Faults.Validate(); err != nil {
			t.Fatalf("parseFaults(%q) accepted an invalid schedule: %v", v, err)
		}
		spans := append([]labkit.Span(nil), s.drop...)
		spans = append(spans, s.Down...)
		for _, sl := range s.Slow {
			spans = append(spans, sl.Span)
		}
		for _, fl := range s.Flap {
			spans = append(spans, fl.Span)
		}
		for _, sp := range spans {
			if sp.From < 0 || sp.To <= sp.From || sp.To > labkit.MaxFaultTime {
				t.Fatalf("parseFaults(%q): span %+v outside [0, %v]", v, sp, labkit.MaxFaultTime)
			}
		}
		if s.Latency < 0 || s.Latency > labkit.MaxFaultTime || s.RetryAfter < 0 || s.RetryAfter > labkit.MaxFaultTime || s.Capacity < 0 || s.Capacity > labkit.MaxFaultCap {
			t.Fatalf("parseFaults(%q): %+v out of bounds", v, s.Faults)
		}
		if len(s.clauses) == 0 {
			return
		}
		again, err := parseFaults([]string{strings.Join(s.clauses, "; ")})
		if err != nil {
			t.Fatalf("parseFaults(%q): clauses %q do not parse again: %v", v, s.clauses, err)
		}
		if !reflect.DeepEqual(again, s) {
			t.Fatalf("parseFaults(%q) = %+v; its clauses parse to %+v", v, s, again)
		}
	})
}

// FuzzParseGrouping: any --group-by value is refused with an error naming
// the flag, or groups by a valid header name or by the request's parts.
func FuzzParseGrouping(f *testing.F) {
	for _, s := range []string{"idempotency-key", "header:X-Request-Id", "header:", "header:a b", "method+path+client",
		"HEADER:x", "header:X-\xff", "", " ", "503"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if g, err := parseGrouping(s); err == nil {
			if g.header != "" && !validHeaderName(g.header) {
				t.Fatalf("parseGrouping(%q) = header %q", s, g.header)
			}
		} else if !strings.HasPrefix(err.Error(), "--group-by") {
			t.Fatalf("parseGrouping(%q): error %q does not name the flag", s, err)
		}
	})
}

// FuzzParseCheck: any command line for `stagger check` gives a config
// (exit 0) or bad usage (exit 2) with a message, never a panic; a config
// holds only finite thresholds.
func FuzzParseCheck(f *testing.F) {
	for _, s := range []string{
		"--policy p.json --fault down\x005s\x00at\x005s --rate 200 --max-amplification 1.3",
		"--max-amplification NaN", "--rate -1", "--replay r.jsonl --real", "--max-peak 1e99",
		"--callers 4 --rate 5", "--baseline x --max-load 1.2", "--recover-within -1s", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var out, errOut bytes.Buffer
		cfg, code := parseCheck(strings.Split(s, "\x00"), &out, &errOut)
		switch {
		case cfg == nil && code != exitUsage && code != exitOK:
			t.Fatalf("parseCheck(%q): exit %d", s, code)
		case cfg == nil && code == exitUsage && errOut.Len() == 0:
			t.Fatalf("parseCheck(%q): bad usage without a message", s)
		}
	})
}
