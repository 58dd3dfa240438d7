package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/staggerhq/stagger/internal/labkit"
)

func TestParseFaults(t *testing.T) {
	s, err := parseFaults([]string{"down 700ms at 2s; latency 20ms", "drop 1s at 5s;retry-after 1500ms", " cap   8 ;",
		"slow 300ms at 1s for 2s; down 1s at 10s", "flap 100ms/200ms at 20s for 1s"})
	if err != nil {
		t.Fatal(err)
	}
	want := labkit.Faults{
		Down:       []labkit.Span{{From: 2 * time.Second, To: 2700 * time.Millisecond}, {From: 10 * time.Second, To: 11 * time.Second}},
		Latency:    20 * time.Millisecond,
		Capacity:   8,
		Slow:       []labkit.Slow{{Span: labkit.Span{From: time.Second, To: 3 * time.Second}, Extra: 300 * time.Millisecond}},
		Flap:       []labkit.Flap{{Span: labkit.Span{From: 20 * time.Second, To: 21 * time.Second}, Down: 100 * time.Millisecond, Up: 200 * time.Millisecond}},
		RetryAfter: 1500 * time.Millisecond,
	}
	if got := s.Faults; !equalFaults(got, want) {
		t.Errorf("faults\n got %+v\nwant %+v", got, want)
	}
	if len(s.drop) != 1 || s.drop[0] != (labkit.Span{From: 5 * time.Second, To: 6 * time.Second}) {
		t.Errorf("drop = %v", s.drop)
	}
	if s.retryAfterValue() != "2" || s.end() != 21*time.Second {
		t.Errorf("retry-after %q, end %v; want \"2\", 21s", s.retryAfterValue(), s.end())
	}
	for _, c := range []struct {
		at   time.Duration
		o    labkit.Outcome
		drop bool
		lat  time.Duration
	}{
		{0, labkit.Accepted, false, 20 * time.Millisecond},
		{2 * time.Second, labkit.Down, false, 170 * time.Millisecond}, // halfway through the slow phase
		{2699 * time.Millisecond, labkit.Down, false, 20*time.Millisecond + 254850*time.Microsecond},
		{2700 * time.Millisecond, labkit.Accepted, false, 20*time.Millisecond + 255*time.Millisecond},
		{3 * time.Second, labkit.Accepted, false, 20 * time.Millisecond},
		{5500 * time.Millisecond, labkit.Accepted, true, 20 * time.Millisecond},
		{20050 * time.Millisecond, labkit.Down, false, 20 * time.Millisecond},
		{20150 * time.Millisecond, labkit.Accepted, false, 20 * time.Millisecond},
	} {
		o, lat := s.Decide(c.at, 0)
		if o != c.o || lat != c.lat || s.isDropped(c.at) != c.drop {
			t.Errorf("at %v: %v after %v, dropped %v; want %v after %v, %v", c.at, o, lat, s.isDropped(c.at), c.o, c.lat, c.drop)
		}
	}
	if o, lat := s.Decide(0, 8); o != labkit.Busy || lat != 0 {
		t.Errorf("at the cap: %v after %v, want busy at once", o, lat)
	}
	if len(s.clauses) != 8 || s.clauses[4] != "cap 8" {
		t.Errorf("clauses %q", s.clauses)
	}
	empty, err := parseFaults(nil)
	if err != nil || empty.isDropped(0) || empty.retryAfterValue() != "" || empty.Capacity != 0 || empty.end() != 0 {
		t.Errorf("no faults: %+v, %v", empty, err)
	}
}

func equalFaults(a, b labkit.Faults) bool {
	eq := func(x, y any) bool { return strings.TrimSpace(sprint(x)) == strings.TrimSpace(sprint(y)) }
	return eq(a, b)
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
		{"latency", `want "latency D"`},
		{"latency 0s", `latency 0s: must be > 0`},
		{"latency 10ms; latency 20ms", `latency is already set`},
		{"latency 10ms at 1s for 2s", `want "latency D"`},
		{"slow 10ms at 1s during 2s", `got "during" where "for" belongs`},
		{"slow 10ms at 1s for 0s", `duration 0s: must be > 0`},
		{"slow 0s at 1s for 1s", `extra latency 0s: must be > 0`},
		{"flap 100ms at 1s for 1s", `"100ms" is not D/U`},
		{"flap 100ms/0s at 1s for 1s", `up time 0s: must be > 0`},
		{"flap x/100ms at 1s for 1s", `down time "x"`},
		{"cap 0", `cap: want a whole number of attempts in flight between 1 and 1000000, got "0"`},
		{"cap true", `got "true"`},
		{"cap 2.5", `got "2.5"`},
		{"cap 1e3", `got "1e3"`},
		{"cap 1000001", `got "1000001"`},
		{"cap 5; cap 6", `cap is already set`},
		{"retry-after", `want "retry-after D"`},
		{"retry-after -2s", `must be >= 0`},
		{"retry-after 0s", `must be > 0`},
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

func sprint(v any) string { return fmt.Sprintf("%+v", v) }
