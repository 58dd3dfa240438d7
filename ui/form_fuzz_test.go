package ui

import (
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// An action's form is refused with a message that starts "refused:" and
// quotes at most a clipped, valid-UTF-8 part of the value, or read within
// bounds.
func FuzzRedriveForm(f *testing.F) {
	for _, s := range []string{"reason=permanent&rate=5&limit=10&dry=1&attempts=3&deadline=1h", "rate=NaN", "rate=1e400", "limit=-1", "attempts=0", "deadline=0s", "reason=%ff", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		form, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		rd, err := redriveOf(form)
		if err != nil {
			if msg := err.Error(); !strings.HasPrefix(msg, "refused: ") || !utf8.ValidString(msg) || len(msg) > 300 {
				t.Fatalf("%q: %q", raw, msg)
			}
			return
		}
		if !(rd.Rate > 0 && rd.Rate <= MaxRedriveRate) || rd.Limit < 0 || rd.Grant < 1 || rd.Grant > 1_000_000 ||
			rd.Deadline < time.Second || rd.Deadline > maxAge || (rd.Reason != "" && !validReason(rd.Reason)) {
			t.Fatalf("%q: out of bounds %+v", raw, rd)
		}
	})
}
