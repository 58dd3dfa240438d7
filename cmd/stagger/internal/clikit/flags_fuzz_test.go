package clikit

import (
	"testing"
	"time"
)

// FuzzFlagValues: every checked flag value (whole numbers, durations,
// latency) refuses a bad value or stores one within its bounds, and what it
// prints (String) sets the same value again.
func FuzzFlagValues(f *testing.F) {
	for _, s := range []string{"0", "1", " 7 ", "-1", "+5", "1000000", "1000001", "9223372036854775807", "9223372036854775808",
		"18446744073709551615", "18446744073709551616", "1.5", "1e3", "0x10", "auto", "700ms", "1.5s", "0s", "-1ns", "8761h",
		"2562047h47m16.854775807s", "2562047h47m16.854775808s", "1µs", "", " ", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var n int
		iv := IntValue{P: &n, Min: -5, Max: 1_000_000}
		if iv.Set(s) == nil {
			if n < iv.Min || n > iv.Max {
				t.Fatalf("IntValue.Set(%q) stored %d", s, n)
			}
			if m := n; iv.Set(iv.String()) != nil || n != m {
				t.Fatalf("IntValue %d does not set again from %q", m, iv.String())
			}
		}
		var u uint64
		uv := UintValue{P: &u}
		if uv.Set(s) == nil {
			if w := u; uv.Set(uv.String()) != nil || u != w {
				t.Fatalf("UintValue %d does not set again", w)
			}
		}
		var d time.Duration
		for _, dv := range []DurationValue{{P: &d, Positive: true, Max: time.Hour}, {P: &d, Max: 100 * 365 * 24 * time.Hour}} {
			d = 0
			if dv.Set(s) == nil {
				if (dv.Positive && d <= 0) || d < 0 || d > dv.Max {
					t.Fatalf("DurationValue%+v.Set(%q) stored %v", dv, s, d)
				}
				if w := d; dv.Set(dv.String()) != nil || d != w {
					t.Fatalf("DurationValue %v does not set again from %q", w, dv.String())
				}
			}
		}
		var lat time.Duration
		auto := true
		lv := LatencyValue{D: &lat, Auto: &auto, Max: time.Minute}
		if lv.Set(s) == nil {
			if !auto && (lat < 0 || lat > time.Minute) {
				t.Fatalf("LatencyValue.Set(%q) stored %v", s, lat)
			}
			if w, wa := lat, auto; lv.Set(lv.String()) != nil || lat != w || auto != wa {
				t.Fatalf("LatencyValue %v/%v does not set again from %q", w, wa, lv.String())
			}
		}
	})
}
