package broker_test

import (
	"strings"
	"testing"
	"time"

	"github.com/staggerhq/stagger/broker"
)

func TestCompactRoundTrip(t *testing.T) {
	for _, st := range []broker.State{
		{},
		{Attempts: 3, Prev: 2500 * time.Millisecond, Due: time.UnixMilli(1_700_000_002_500), FirstAttempt: time.UnixMilli(1_700_000_000_000),
			FirstFailure: time.UnixMilli(1_700_000_000_001), Error: "a\nb c"},
	} {
		for _, extra := range []string{"", "7 x.y"} {
			var ext func([]byte) []byte
			if extra != "" {
				ext = func(b []byte) []byte { return append(b, extra...) }
			}
			v := st.AppendCompact(nil, ext)
			got, rest, err := broker.ParseCompact(v)
			if err != nil || got != st || string(rest) != extra {
				t.Errorf("%q: %+v %q %v; want %+v %q", v, got, rest, err, st, extra)
			}
		}
	}
	long := broker.State{Attempts: 1, Error: strings.Repeat("é", broker.MaxErrorLen)}
	if got, _, _ := broker.ParseCompact(long.AppendCompact(nil, nil)); len(got.Error) > broker.MaxErrorLen {
		t.Errorf("error text of %d bytes read back, want at most %d", len(got.Error), broker.MaxErrorLen)
	}
}

func TestCompactMalformed(t *testing.T) {
	for _, c := range []struct{ v, field string }{
		{"", "version"}, {"2 0 0 0 0 0", "version"}, {"1 a 0 0 0 0", "attempts"}, {"1 1 0 0 0", "first failure"},
		{"1 1 -5 0 0 0", "delay"}, {"1 3000000000 0 0 0 0", "attempts"}, {"1 1 0 0 0 99999999999999999999", "first failure"},
	} {
		_, _, err := broker.ParseCompact([]byte(c.v))
		if err == nil || !strings.Contains(err.Error(), broker.HeaderState) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%q: err %v, want one naming %s and %s", c.v, err, broker.HeaderState, c.field)
		}
	}
}
