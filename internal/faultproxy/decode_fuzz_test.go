package faultproxy

import (
	"encoding/json"
	"testing"
)

// FuzzDecodeJSON: a control request body decodeJSON accepts is exactly one
// JSON object encoding/json reads to the same value; any other gets an
// error, never a panic.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{
		`{"name":"a","clause":"status 503 p=0.5"}`, `{"clause":1}`, `{"nope":1}`,
		`{"clause":"x"}{}`, `{`, ``, `null`, `[]`, `{"name":"\u0000"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var got FaultRequest
		if err := decodeJSON(b, &got); err != nil {
			if err.Error() == "" {
				t.Fatalf("decodeJSON(%q): an empty error", b)
			}
			return
		}
		var want FaultRequest
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("decodeJSON(%q) accepted what encoding/json refuses: %v", b, err)
		}
		if got != want {
			t.Fatalf("decodeJSON(%q) = %+v, encoding/json %+v", b, got, want)
		}
	})
}
