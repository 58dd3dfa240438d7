package faultproxy

import "testing"

// FuzzParseClauseBody: any body a control client sends to the fault routes
// is parsed or refused with a message, never a panic.
func FuzzParseClauseBody(f *testing.F) {
	for _, s := range []string{`{"clause":"status 503 p=0.5"}`, `status 503`, `{}`, `{"clause":1}`, `{"clause":"x"}}`, ``, `null`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := parseClauseBody(b); err != nil && err.Error() == "" {
			t.Fatalf("%q: an error with no text", b)
		}
	})
}
