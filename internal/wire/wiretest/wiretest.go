// Package wiretest holds the hostile values the servers' tests send for
// every header and metadata key stagger reads, and a raw HTTP/1.1 sender
// that puts any bytes on the wire (net/http's client refuses some).
package wiretest

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"
)

// Values are the worst values of a number, a timeout or an ID: negative,
// huge, beyond int64 and uint64, NaN and infinities, non-numeric, signs,
// spaces, empty, invalid UTF-8, NUL, and a value of 1 MiB.
func Values() []string {
	return []string{
		"", "-1", "-9223372036854775808", "0", "+1", "1e3", "0x10", "1.5", "NaN", "Inf", "-Inf", "abc",
		"9223372036854775807", "9223372036854775808", "18446744073709551616", "999999999999",
		strings.Repeat("9", 40), "\xff\xfe\xfd", "\xc3\x28", "1\x00", "\t1",
		strings.Repeat("x", 256), strings.Repeat("7", 1<<20),
	}
}

// Header is one header line: its name and its value, sent as is.
type Header [2]string

// Cases returns the header sets a hostile-input test sends: each of keys
// with each of Values, then each key repeated with two readable values.
func Cases(keys ...string) [][]Header {
	var out [][]Header
	for _, k := range keys {
		for _, v := range Values() {
			out = append(out, []Header{{k, v}})
		}
		out = append(out, []Header{{k, "1"}, {k, "2"}})
	}
	return out
}

// Send writes a GET request for path with headers h to addr on a new
// connection, byte for byte, and returns the response's status; an error
// when the connection fails or the server closes it without an answer.
func Send(addr, path string, h []Header) (int, error) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	w := bufio.NewWriter(c)
	fmt.Fprintf(w, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n", path, addr)
	for _, x := range h {
		fmt.Fprintf(w, "%s: %s\r\n", x[0], x[1])
	}
	w.WriteString("\r\n")
	if err := w.Flush(); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}
