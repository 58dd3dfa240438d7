package queuesql

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzPrefixEnd: the bound PrefixEnd returns is valid UTF-8, above every
// string that starts with the prefix and not above the prefix's own
// successors that do not start with it.
func FuzzPrefixEnd(f *testing.F) {
	for _, s := range []string{"a", "job-", "é", "\U0010FFFF", "a\U0010FFFF", "\uD7FF", "\uFFFF"} {
		f.Add(s, "x")
	}
	f.Fuzz(func(t *testing.T, prefix, rest string) {
		if prefix == "" || !utf8.ValidString(prefix) || !utf8.ValidString(rest) {
			return
		}
		end, ok := PrefixEnd(prefix)
		if !ok {
			if strings.Trim(prefix, "\U0010FFFF") != "" {
				t.Fatalf("PrefixEnd(%q) found no bound", prefix)
			}
			return
		}
		if !utf8.ValidString(end) {
			t.Fatalf("PrefixEnd(%q) = %q, not valid UTF-8", prefix, end)
		}
		if s := prefix + rest; s >= end {
			t.Fatalf("%q starts with %q but is not below its bound %q", s, prefix, end)
		}
		if strings.HasPrefix(end, prefix) {
			t.Fatalf("the bound %q of %q starts with it", end, prefix)
		}
	})
}
