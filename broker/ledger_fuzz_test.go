package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/internal/brokerwire"
	"github.com/staggerhq/stagger/retry"
)

// FuzzLedgerState: no HeaderState value or ledger header makes the
// parsers panic, and no state they accept gives a Processor more attempts
// than its Policy allows; a compact state read back writes the same
// budget again.
func FuzzLedgerState(f *testing.F) {
	for _, v := range []string{"3 2 0 0 0 0 1700000020000 5", "2 1 0 0 0 0 1700000020000", "1 0 0 0 0 0",
		"3 0 0 0 0 0 0 99999999999", "3 1 2 3 4 5 6 7 extra\nerr", "4 0 0 0 0 0 0 0", "3 -1 0 0 0 0 0 1"} {
		f.Add(v)
	}
	p := &broker.Processor{Policy: &retry.Policy{MaxAttempts: 3}, Now: func() time.Time { return time.Unix(1_700_000_000, 0) },
		Handler: func(context.Context, []byte) error { return nil }}
	f.Fuzz(func(t *testing.T, v string) {
		st, _, err := brokerwire.ParseCompact([]byte(v))
		if err == nil {
			if st.MaxAttempts < 0 || st.Attempts < 0 {
				t.Errorf("%q: negative counts %+v", v, st)
			}
			if n := p.Budget(st); n < 1 || n > 3 {
				t.Errorf("%q: budget %d beyond the Policy's 3", v, n)
			}
			back, _, err := brokerwire.ParseCompact(brokerwire.AppendCompact(nil, st, nil))
			if err != nil || back.MaxAttempts != st.MaxAttempts || back.Attempts != st.Attempts {
				t.Errorf("%q: read back as %+v, %v", v, back, err)
			}
		}
		ds, err := broker.DecodeState(func(k string) (string, bool) { return v, k == broker.HeaderMaxAttempts })
		if err == nil && (ds.MaxAttempts < 0 || p.Budget(ds) > 3) {
			t.Errorf("%s=%q: %+v", broker.HeaderMaxAttempts, v, ds)
		}
	})
}
