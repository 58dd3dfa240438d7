package timeline

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzDecodeStrict: a window line decodeStrict accepts is one that
// encoding/json also reads to the same value; one it refuses gets a rule.
func FuzzDecodeStrict(f *testing.F) {
	for _, s := range []string{
		`{"start_ms":0,"arrivals":4,"originals":4,"status":{"200":4},"p50_ms":2,"p99_ms":5}`,
		`{"end":{"windows":5,"arrivals":20}}`, `{"start_ms":"0"}`, `{"start_ms":1e999}`,
		`{"arrivals":true}`, `{"nope":1}`, `{}{}`, `{`, ``, `null`, `[1]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var got lineJSON
		field, rule := decodeStrict(b, &got)
		if rule != "" {
			return
		}
		if field != "" {
			t.Fatalf("decodeStrict(%q): field %q without a rule", b, field)
		}
		var want lineJSON
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("decodeStrict(%q) accepted what encoding/json refuses: %v", b, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("decodeStrict(%q) = %+v, encoding/json %+v", b, got, want)
		}
	})
}
