package labkit

import (
	"strconv"
	"testing"
)

// FuzzParseBytes: a size is a whole number of bytes in [0, maxFaultSize],
// and the plain number it returns reads back the same.
func FuzzParseBytes(f *testing.F) {
	for _, s := range []string{"1024", "64KB", "2MB", "7B", "0", "-1", "1e3", "", "KB", "99999999999999999999MB", "1099511627776"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		n, err := parseBytes(v)
		if err != nil {
			return
		}
		if n < 0 || n > maxFaultSize {
			t.Fatalf("parseBytes(%q) = %d, outside [0, %d]", v, n, int64(maxFaultSize))
		}
		if m, err := parseBytes(strconv.FormatInt(n, 10)); err != nil || m != n {
			t.Fatalf("parseBytes(%q) = %d, which reads back as %d, %v", v, n, m, err)
		}
	})
}
