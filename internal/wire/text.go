package wire

import (
	"fmt"
	"strconv"
)

// Cut cuts s to at most n bytes, on a rune boundary.
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

// QuoteShort quotes v for an error message, cut to 64 bytes: a header
// value can be as large as the message that carries it.
func QuoteShort(v string) string {
	const max = 64
	if len(v) <= max {
		return strconv.Quote(v)
	}
	return strconv.Quote(Cut(v, max)) + fmt.Sprintf("… (%d bytes)", len(v))
}
