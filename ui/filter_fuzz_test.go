package ui_test

import (
	"errors"
	"net/url"
	"testing"

	"github.com/staggerhq/stagger/ui"
)

// A job filter from a query string is refused naming the field (ErrInvalid)
// or read within bounds, and the query it writes reads back the same.
func FuzzParseJobFilter(f *testing.F) {
	for _, s := range []string{"state=dead&queue=mail&reason=permanent&age=15m&prefix=order-&after=x&limit=10", "limit=0", "age=-1h", "state=a&state=b", "prefix=%ff", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		flt, err := ui.ParseJobFilter(q)
		if err != nil {
			if !errors.Is(err, ui.ErrInvalid) {
				t.Fatalf("%q: error not ErrInvalid: %v", raw, err)
			}
			return
		}
		if flt.Limit < 1 || flt.Limit > ui.MaxPageSize || flt.OlderThan < 0 {
			t.Fatalf("%q: out of bounds %+v", raw, flt)
		}
		// The query it writes reads back the same.
		back, err := ui.ParseJobFilter(flt.Query())
		flt.After = ""
		if err != nil || back != flt {
			t.Fatalf("%q: round trip %+v -> %+v, %v", raw, flt, back, err)
		}
	})
}
