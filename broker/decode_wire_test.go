package broker_test

import (
	"testing"

	"github.com/staggerhq/stagger/broker"
)

// TestDecodeStateWireNumbers: state headers are read by the one rule for
// numbers from the wire — ASCII digits only, overflow checked — so a sign,
// a space or a value beyond int64 is an error naming the header, never a
// wrapped or truncated count.
func TestDecodeStateWireNumbers(t *testing.T) {
	for _, v := range []string{"+1", " 1", "1 ", "-0", "0x10", "1e3", "9223372036854775808", "18446744073709551616"} {
		for _, k := range []string{broker.HeaderAttempt, broker.HeaderDelay, broker.HeaderDeadline} {
			if st, err := broker.DecodeState(func(key string) (string, bool) { return v, key == k }); err == nil {
				t.Errorf("%s: %q accepted as %+v", k, v, st)
			}
		}
	}
	if st, err := broker.DecodeState(func(key string) (string, bool) { return "9223372036854775807", key == broker.HeaderDeadline }); err != nil || st.Deadline.UnixMilli() != 9223372036854775807 {
		t.Errorf("the largest int64 deadline: %+v, %v", st, err)
	}
}
