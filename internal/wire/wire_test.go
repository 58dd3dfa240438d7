package wire

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
)

// hostile are the worst values a client can send for a number or an ID.
var hostile = []string{
	"", " ", "-1", "-9223372036854775808", "+1", " 1", "1 ", "0x10", "1e3", "1.5", "NaN", "Inf", "-Inf",
	"9223372036854775807", "9223372036854775808", "18446744073709551615", "18446744073709551616",
	"99999999999999999999999999999999", "999999999999999999999999999999999", "١", "\xff", "1\x00",
	strings.Repeat("9", 1<<20),
}

func TestParseAttempt(t *testing.T) {
	for v, want := range map[string]int{"1": 1, "2": 2, "007": 7, "1048576": MaxAttempt} {
		if n, ok := ParseAttempt(v); !ok || n != want {
			t.Errorf("ParseAttempt(%q) = %d, %v; want %d", v, n, ok, want)
		}
	}
	for _, v := range append(hostile, "0", "1048577") {
		if n, ok := ParseAttempt(v); ok {
			t.Errorf("ParseAttempt(%.40q) = %d, true; want unreadable", v, n)
		}
	}
}

func TestParsePreviousAttempts(t *testing.T) {
	for v, want := range map[string]int{"0": 1, "1": 2, "1048575": MaxAttempt} {
		if n, ok := ParsePreviousAttempts(v); !ok || n != want {
			t.Errorf("ParsePreviousAttempts(%q) = %d, %v; want %d", v, n, ok, want)
		}
	}
	for _, v := range append(hostile, "1048576") {
		if n, ok := ParsePreviousAttempts(v); ok {
			t.Errorf("ParsePreviousAttempts(%.40q) = %d, true; want unreadable", v, n)
		}
	}
}

func TestParseTimeoutMs(t *testing.T) {
	for _, c := range []struct {
		v    string
		max  time.Duration
		want time.Duration
	}{
		{"1", 0, time.Millisecond},
		{"1500", time.Minute, 1500 * time.Millisecond},
		{"999999999999", 0, DefaultMaxTimeout},
		{"999999999999", time.Second, time.Second},
		{"60000", time.Minute, time.Minute},
		{"18446744073709551616", time.Hour, time.Hour},
		{"99999999999999999999999999999999", -1, DefaultMaxTimeout},
	} {
		if d, ok := ParseTimeoutMs(c.v, c.max); !ok || d != c.want {
			t.Errorf("ParseTimeoutMs(%q, %v) = %v, %v; want %v", c.v, c.max, d, ok, c.want)
		}
	}
	for _, v := range hostile {
		if strings.Trim(v, "0123456789") == "" && v != "" && len(v) <= maxDigits {
			continue // digits: clamped above
		}
		if d, ok := ParseTimeoutMs(v, 0); ok {
			t.Errorf("ParseTimeoutMs(%.40q) = %v, true; want unreadable", v, d)
		}
	}
	if d, ok := ParseTimeoutMs("0", 0); ok {
		t.Errorf("ParseTimeoutMs(0) = %v, true; want no deadline of the client's", d)
	}
}

func TestDeadline(t *testing.T) {
	now := time.Unix(1000, 0)
	if dl, ok := Deadline(now, time.Hour, 0, time.Time{}, false); !ok || !dl.Equal(now.Add(DefaultMaxTimeout)) {
		t.Errorf("no own deadline: %v %v, want now+%v", dl, ok, DefaultMaxTimeout)
	}
	own := now.Add(time.Second)
	if dl, ok := Deadline(now, time.Minute, 0, own, true); ok || !dl.Equal(own) {
		t.Errorf("the server's own deadline must win: %v %v", dl, ok)
	}
	if dl, ok := Deadline(now, 10*time.Millisecond, 0, own, true); !ok || !dl.Equal(now.Add(10*time.Millisecond)) {
		t.Errorf("a shorter client timeout shortens: %v %v", dl, ok)
	}
}

func TestValidID(t *testing.T) {
	for _, id := range []string{"a", "order-7", `"8e03978e-40d5"`, "a b", strings.Repeat("x", MaxIDLen)} {
		if !ValidID(id) {
			t.Errorf("ValidID(%q) = false", id)
		}
	}
	for _, id := range []string{"", strings.Repeat("x", MaxIDLen+1), "a\nb", "a\x00", "\xff", "é", "a\x7f", strings.Repeat("y", 1<<20)} {
		if ValidID(id) {
			t.Errorf("ValidID(%.40q) = true", id)
		}
	}
}

// FuzzParse: no input makes a parser panic or return a value out of its
// bounds, and a number that parses reads back as the same text.
func FuzzParse(f *testing.F) {
	for _, v := range hostile[:len(hostile)-1] {
		f.Add(v)
	}
	f.Add("1")
	f.Add("0")
	f.Add("1048576")
	f.Add("300000")
	f.Fuzz(func(t *testing.T, v string) {
		if n, ok := ParseAttempt(v); ok && (n < 1 || n > MaxAttempt || strings.TrimLeft(v, "0") != strconv.Itoa(n)) {
			t.Errorf("ParseAttempt(%q) = %d", v, n)
		}
		if n, ok := ParsePreviousAttempts(v); ok && (n < 1 || n > MaxAttempt) {
			t.Errorf("ParsePreviousAttempts(%q) = %d", v, n)
		}
		for _, max := range []time.Duration{0, time.Second, math.MaxInt64} {
			if d, ok := ParseTimeoutMs(v, max); ok && (d <= 0 || d > MaxTimeout(max)) {
				t.Errorf("ParseTimeoutMs(%q, %v) = %v", v, max, d)
			}
		}
		if n, ok := ParseUint(v, math.MaxUint64); ok && strings.TrimLeft(v, "0") != strings.TrimLeft(strconv.FormatUint(n, 10), "0") {
			t.Errorf("ParseUint(%q) = %d", v, n)
		}
		for _, max := range []int{0, 1, 5, math.MaxInt} {
			if n, ok := ParseMaxAttempts(v, max); ok && (n < 1 || n > MaxBudget(max)) {
				t.Errorf("ParseMaxAttempts(%q, %d) = %d, outside [1, %d]", v, max, n, MaxBudget(max))
			}
		}
		if ValidID(v) && (len(v) > MaxIDLen || strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r > 0x7e })) {
			t.Errorf("ValidID(%q) = true", v)
		}
	})
}
