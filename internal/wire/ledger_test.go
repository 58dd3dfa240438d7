package wire

import (
	"strings"
	"testing"
)

func TestParseMaxAttempts(t *testing.T) {
	for _, c := range []struct {
		v    string
		max  int
		want int
	}{
		{"1", 0, 1}, {"5", 0, 5}, {"10", 0, DefaultMaxBudget}, {"11", 0, DefaultMaxBudget},
		{"5", 3, 3}, {"20", 50, 20}, {"18446744073709551616", 7, 7},
		{strings.Repeat("9", 32), -1, DefaultMaxBudget}, {"99", 1 << 30, 99},
	} {
		if n, ok := ParseMaxAttempts(c.v, c.max); !ok || n != c.want {
			t.Errorf("ParseMaxAttempts(%q, %d) = %d, %v; want %d", c.v, c.max, n, ok, c.want)
		}
	}
	for _, v := range append(hostile, "0", "00") {
		if strings.Trim(v, "0123456789") == "" && strings.Trim(v, "0") != "" && len(v) <= maxDigits {
			continue // digits: clamped above
		}
		if n, ok := ParseMaxAttempts(v, 0); ok {
			t.Errorf("ParseMaxAttempts(%.40q) = %d, true; want unreadable", v, n)
		}
	}
	if MaxBudget(1<<40) != MaxAttempt {
		t.Errorf("MaxBudget must not exceed MaxAttempt")
	}
}

func TestRepeats(t *testing.T) {
	var r Repeats
	r.Seen("a", 1, 2)
	r.Seen("a", 2, 2) // a marked retry: not a repeat
	r.Seen("a", 2, 2) // the same attempt again: a repeat
	r.Seen("a", 0, 2) // unmarked: a repeat
	if r.Repeats() != 2 {
		t.Errorf("repeats %d, want 2", r.Repeats())
	}
	r.Seen("b", 1, 2)
	r.Seen("c", 1, 2) // evicts a
	r.Seen("a", 1, 2) // forgotten: new (evicts b)
	if r.Repeats() != 2 || r.Evicted() != 2 {
		t.Errorf("repeats %d evicted %d, want 2, 2", r.Repeats(), r.Evicted())
	}
}
