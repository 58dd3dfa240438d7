package retryconfig

import (
	"encoding/json"
	"testing"
)

// FuzzParts feeds a service config's pieces — a status code, a duration,
// one retryPolicy object — to their parsers directly: each value is
// accepted or refused with a message, never a panic.
func FuzzParts(f *testing.F) {
	for _, s := range []string{`"UNAVAILABLE"`, `14`, `"1.5s"`, `{"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}`, `-1`, `"1e400s"`, `null`, `{`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		raw := json.RawMessage(b)
		if _, err := parseCode(raw); err != nil && err.Error() == "" {
			t.Fatal("parseCode: an error with no text")
		}
		if _, err := parseDuration(string(b)); err != nil && err.Error() == "" {
			t.Fatal("parseDuration: an error with no text")
		}
		if _, err := parseRetryPolicy("retryPolicy", raw); err != nil && err.Error() == "" {
			t.Fatal("parseRetryPolicy: an error with no text")
		}
	})
}
