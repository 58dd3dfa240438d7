package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseFaults(t *testing.T) {
	s, err := parseFaults([]string{"down 700ms at 2s; latency 20ms", "drop 1s at 5s;retry-after 1500ms", " cap   8 ;", "latency 300ms at 1s for 2s; down 1s at 10s"})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.down) != 2 || s.down[0] != (faultSpan{2 * time.Second, 2700 * time.Millisecond}) || s.down[1] != (faultSpan{10 * time.Second, 11 * time.Second}) {
		t.Errorf("down = %v", s.down)
	}
	if len(s.drop) != 1 || s.drop[0] != (faultSpan{5 * time.Second, 6 * time.Second}) {
		t.Errorf("drop = %v", s.drop)
	}
	if s.cap != 8 || s.retryAfterValue() != "2" {
		t.Errorf("cap %d, retry-after %q; want 8, \"2\"", s.cap, s.retryAfterValue())
	}
	for _, c := range []struct {
		at   time.Duration
		down bool
		drop bool
		lat  time.Duration
	}{
		{0, false, false, 20 * time.Millisecond},
		{1999 * time.Millisecond, false, false, 320 * time.Millisecond},
		{2 * time.Second, true, false, 320 * time.Millisecond},
		{2699 * time.Millisecond, true, false, 320 * time.Millisecond},
		{2700 * time.Millisecond, false, false, 320 * time.Millisecond},
		{3 * time.Second, false, false, 20 * time.Millisecond}, // window [1s, 3s) ended
		{5500 * time.Millisecond, false, true, 20 * time.Millisecond},
		{10 * time.Second, true, false, 20 * time.Millisecond},
	} {
		if s.isDown(c.at) != c.down || s.isDropped(c.at) != c.drop || s.latencyAt(c.at) != c.lat {
			t.Errorf("at %v: down %v drop %v latency %v; want %v %v %v", c.at,
				s.isDown(c.at), s.isDropped(c.at), s.latencyAt(c.at), c.down, c.drop, c.lat)
		}
	}
	if len(s.clauses) != 7 || s.clauses[4] != "cap 8" {
		t.Errorf("clauses %q", s.clauses)
	}
	empty, err := parseFaults(nil)
	if err != nil || empty.isDown(0) || empty.retryAfterValue() != "" || empty.cap != 0 {
		t.Errorf("no faults: %+v, %v", empty, err)
	}
}

func TestParseFaultsRejects(t *testing.T) {
	cases := []struct{ in, want string }{
		{"", `--fault: empty value`},
		{"explode 1s", `--fault "explode 1s": unknown fault "explode"`},
		{"down 700ms", `--fault "down 700ms": want "down D at T"`},
		{"down 700ms after 2s", `got "after" where "at" belongs`},
		{"down 700 at 2s", `duration "700": want a duration with a unit`},
		{"down 0s at 2s", `duration 0s: must be > 0`},
		{"down -1s at 2s", `duration -1s: must be >= 0`},
		{"down 1s at 2x", `time "2x": want a duration with a unit`},
		{"down 1s at NaN", `time "nan": want a duration`},
		{"down 1s at 24h", `past the limit of 24h0m0s`},
		{"drop 25h at 0s", `must be <= 24h0m0s`},
		{"latency", `want "latency D" or "latency D at T for W"`},
		{"latency 0s", `latency 0s: must be > 0`},
		{"latency 10ms; latency 20ms", `latency without a window is already set`},
		{"latency 10ms at 1s during 2s", `want "latency D at T for W"`},
		{"latency 10ms at 1s for 0s", `window 0s: must be > 0`},
		{"cap 0", `cap: want a whole number of attempts in flight between 1 and 1000000, got "0"`},
		{"cap true", `got "true"`},
		{"cap 2.5", `got "2.5"`},
		{"cap 1e3", `got "1e3"`},
		{"cap 1000001", `got "1000001"`},
		{"cap 5; cap 6", `cap is already set`},
		{"retry-after", `want "retry-after D"`},
		{"retry-after -2s", `must be >= 0`},
		{"retry-after 1s; retry-after 2s", `retry-after is already set`},
		{"retry-after inf", `want a duration`},
	}
	for _, c := range cases {
		_, err := parseFaults([]string{c.in})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parseFaults(%q) = %v, want an error containing %q", c.in, err, c.want)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "--fault") {
			t.Errorf("parseFaults(%q): error %q does not name the flag", c.in, err)
		}
	}
	many := strings.Repeat("down 1s at 1s;", maxFaultClauses+1)
	if _, err := parseFaults([]string{many}); err == nil || !strings.Contains(err.Error(), "more than 1000 clauses") {
		t.Errorf("too many clauses: %v", err)
	}
}
