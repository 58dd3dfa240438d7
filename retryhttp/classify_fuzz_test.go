package retryhttp

import (
	"math"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"
)

// FuzzParseRetryAfter: any header value gives either false and 0, or a
// wait in [0, MaxInt64]; a run of digits is that many seconds (saturating),
// and an HTTP-date is its distance from now (0 when past). Every accepted
// value is one of the two forms.
func FuzzParseRetryAfter(f *testing.F) {
	now := time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)
	for _, v := range []string{"0", "120", " 7 ", "007", "9223372036", "9223372037", "18446744073709551616",
		strings.Repeat("9", 400), "", " ", "-1", "+1", "1.5", "1e3", "0x10", "NaN", "Infinity", "1 2", "\xff",
		now.Add(90 * time.Second).Format(http.TimeFormat), now.Add(-time.Hour).Format(http.TimeFormat),
		"Fri, 31 Dec 9999 23:59:59 GMT", "Mon, 01 Jan 0001 00:00:00 GMT", "Sunday, 06-Nov-94 08:49:37 GMT",
		"Sun Nov  6 08:49:37 1994", "Fri, 02 Jan 2026 15:04:05 PST"} {
		f.Add(v, now.Unix())
	}
	f.Add("60", int64(math.MinInt64))
	f.Add("Fri, 31 Dec 9999 23:59:59 GMT", int64(math.MinInt64/2))
	f.Fuzz(func(t *testing.T, v string, nowSec int64) {
		now := time.Unix(nowSec, 0)
		d, ok := ParseRetryAfter(v, now)
		if !ok {
			if d != 0 {
				t.Fatalf("ParseRetryAfter(%q) = %v, false; want 0 with false", v, d)
			}
			return
		}
		if d < 0 {
			t.Fatalf("ParseRetryAfter(%q) = %v: negative", v, d)
		}
		s := strings.TrimSpace(v)
		if n, digits := new(big.Int).SetString(s, 10); digits && s[0] >= '0' && s[0] <= '9' {
			want := n.Mul(n, big.NewInt(int64(time.Second)))
			if !want.IsInt64() {
				want.SetInt64(math.MaxInt64)
			}
			if int64(d) != want.Int64() {
				t.Fatalf("ParseRetryAfter(%q) = %v, want %v", v, d, time.Duration(want.Int64()))
			}
			return
		}
		at, err := http.ParseTime(s)
		if err != nil {
			t.Fatalf("ParseRetryAfter(%q) = %v, true: neither delay-seconds nor an HTTP-date", v, d)
		}
		if want := max(0, at.Sub(now)); d != want {
			t.Fatalf("ParseRetryAfter(%q) at %v = %v, want %v", v, now, d, want)
		}
	})
}
