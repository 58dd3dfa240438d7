package broker

import (
	"math"
	"testing"
	"time"
)

// TestDueAfter holds dueAfter to the rule it replaces: now+d cut to a
// whole millisecond, plus one when the cut removed anything; the same
// instant, location and monotonic reading (kept only when nothing was
// cut).
func TestDueAfter(t *testing.T) {
	ref := func(now time.Time, d time.Duration) time.Time {
		due := now.Add(d)
		if c := due.Truncate(time.Millisecond); !c.Equal(due) {
			due = c.Add(time.Millisecond)
		}
		return due
	}
	wall := time.Date(2026, 12, 7, 3, 4, 5, 0, time.UTC)
	nows := []time.Time{time.Now(), wall, wall.Add(999_999), wall.Add(1), wall.Add(-1),
		wall.Add(123_456_789), time.Unix(-5, 999_999_999).In(time.FixedZone("x", 3600)),
		time.Now().Add(500 * time.Microsecond)}
	ds := []time.Duration{0, 1, -1, time.Millisecond, time.Millisecond - 1, 999_999_999, time.Second,
		-time.Second - 1, 7*time.Hour + 3, math.MaxInt64, math.MaxInt64 - 1, math.MinInt64 + 5}
	for _, now := range nows {
		for _, d := range ds {
			got, want := dueAfter(now, d), ref(now, d)
			if got != want { // ==: instant, location and monotonic reading
				t.Errorf("dueAfter(%v, %v) = %v, want %v", now, d, got, want)
			}
		}
	}
}
