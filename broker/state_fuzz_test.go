package broker_test

import (
	"bytes"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/broker/brokertest"
	"github.com/staggerhq/stagger/internal/brokerwire"
)

// FuzzParseDecimal: ParseDecimal agrees with strconv.ParseInt on every
// input: it accepts exactly the runs of 1 to 19 ASCII digits that fit an
// int64 (no sign, no space; 20 digits are refused even when zero-padded),
// and returns their value.
func FuzzParseDecimal(f *testing.F) {
	for _, s := range []string{"0", "7", "1700000000000", "9223372036854775807", "9223372036854775808",
		"99999999999999999999", "18446744073709551616", "", "-1", "+1", " 1", "1 ", "1e3", "0x10", "007", "١٢", "00000000000000000000", "0000000000000000001"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		n, ok := brokerwire.ParseDecimal(b)
		digits := len(b) > 0 && len(b) <= 19
		for _, c := range b {
			digits = digits && c >= '0' && c <= '9'
		}
		want, err := strconv.ParseInt(string(b), 10, 64)
		wantOK := digits && err == nil
		if ok != wantOK || (ok && n != want) || (!ok && n != 0) {
			t.Fatalf("ParseDecimal(%q) = %d, %v; want %d, %v", b, n, ok, want, wantOK)
		}
	})
}

// FuzzParseCompact: any header value either is refused with an error
// naming HeaderState, or decodes to a state within bounds that
// AppendCompact writes back to a value decoding to the same state and the
// same adapter fields.
func FuzzParseCompact(f *testing.F) {
	st := broker.State{Attempts: 2, Prev: 1500 * time.Millisecond, Due: time.UnixMilli(1_700_000_001_000),
		FirstAttempt: time.UnixMilli(1_700_000_000_000), FirstFailure: time.UnixMilli(1_700_000_000_100), Error: "boom:\nsecond ü"}
	f.Add(brokerwire.AppendCompact(nil, st, nil))
	f.Add(brokerwire.AppendCompact(nil, st, func(b []byte) []byte { return append(b, "7 42 orders"...) }))
	st.Deadline = time.UnixMilli(1_700_000_100_000)
	f.Add(brokerwire.AppendCompact(nil, st, nil))
	for _, s := range []string{"", "1", "1 ", "1 0 0 0 0 0", "2 0 0 0 0 0", "2 0 0 0 0 0 0", "3 1 0 0 0 0",
		"1 -1 0 0 0 0", "1 2147483648 0 0 0 0", "1 1 9223372036854775807 9223372036854775807 0 0",
		"1 1 0 0 0 99999999999999999999", "1 1 0 1e3 0 0", "1 1 0 0 0 0 \n", "1  1 0 0 0 0",
		"1 1 0 0 0 0\n\xff\xfe", "1 1 0 0 0 0\n" + strings.Repeat("é", broker.MaxErrorLen), "1 NaN 0 0 0 0"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		got, extra, err := brokerwire.ParseCompact(v)
		if err != nil {
			if !strings.Contains(err.Error(), broker.HeaderState) || len(err.Error()) > 400 {
				t.Fatalf("ParseCompact(%q): error %q does not name %s or is unbounded", v, err, broker.HeaderState)
			}
			return
		}
		if err := brokertest.CheckDecoded(got); err != nil {
			t.Fatalf("ParseCompact(%q) accepted %+v: %v", v, got, err)
		}
		if bytes.IndexByte(extra, '\n') >= 0 {
			t.Fatalf("ParseCompact(%q): adapter fields %q span a line", v, extra)
		}
		var fields func([]byte) []byte
		if extra != nil {
			fields = func(b []byte) []byte { return append(b, extra...) }
		}
		again := brokerwire.AppendCompact(nil, got, fields)
		st2, extra2, err := brokerwire.ParseCompact(again)
		if err != nil {
			t.Fatalf("ParseCompact(%q) = %+v, written back as %q which does not parse: %v", v, got, again, err)
		}
		if d := brokertest.DiffState(st2, got); d != "" || !bytes.Equal(extra2, extra) {
			t.Fatalf("%q decodes to %+v, written back as %q: %s; fields %q, want %q", v, got, again, d, extra2, extra)
		}
	})
}

// FuzzStateEncodings: every state in the encoders' domain round-trips
// unchanged through both of its encodings: the readable headers
// (Encode, DecodeState) and HeaderState (AppendCompact, ParseCompact,
// which leaves out Reason and Origin).
func FuzzStateEncodings(f *testing.F) {
	f.Add(int64(2), int64(1500), int64(1_700_000_001_000), int64(1_700_000_000_000), int64(1_700_000_000_100), int64(0), "boom:\nsecond ü", "exhausted", "orders")
	f.Add(int64(math.MaxInt32), int64(math.MaxInt64), int64(math.MaxInt64), int64(1), int64(-1), int64(math.MinInt64), "\xff\x00", "", "a b\nc")
	f.Add(int64(0), int64(0), int64(0), int64(0), int64(0), int64(1), "", "deadline", "")
	f.Add(int64(-7), int64(-1), int64(253402300799999), int64(-253402300799999), int64(5), int64(6), strings.Repeat("x", 3000), "r", "o")
	f.Fuzz(func(t *testing.T, attempts, prevMs, due, first, failed, deadline int64, errText, reason, origin string) {
		st := brokertest.StateOf(attempts, prevMs, due, first, failed, deadline, errText)
		st.Reason, st.Origin = reason, origin

		h := map[string]string{}
		st.Encode(func(k, v string) { h[k] = v })
		got, err := broker.DecodeState(func(k string) (string, bool) { v, ok := h[k]; return v, ok })
		if err != nil {
			t.Fatalf("%+v encoded as %q does not decode: %v", st, h, err)
		}
		if d := brokertest.DiffState(got, st); d != "" {
			t.Fatalf("%+v encoded as %q decodes to %+v: %s", st, h, got, d)
		}

		v := brokerwire.AppendCompact(nil, st, nil)
		got, extra, err := brokerwire.ParseCompact(v)
		if err != nil {
			t.Fatalf("%+v written as %q does not parse: %v", st, v, err)
		}
		want := st
		want.Reason, want.Origin = "", ""
		if d := brokertest.DiffState(got, want); d != "" || extra != nil {
			t.Fatalf("%+v written as %q parses to %+v (fields %q): %s", st, v, got, extra, d)
		}
	})
}

// FuzzDecodeState: headers of any value either decode to a state within
// bounds, which Encode writes back to headers decoding to the same state,
// or are refused with an error naming the header at fault.
func FuzzDecodeState(f *testing.F) {
	f.Add("2", "1500", "1700000001000", "1700000000000", "1700000000100", "", "boom", "exhausted", "orders")
	f.Add("", "", "", "", "", "", "", "", "")
	f.Add("-1", "0", "0", "0", "0", "0", "", "", "")
	f.Add("2147483648", "", "", "", "", "", "", "", "")
	f.Add("9223372036854775807", "9223372036854775807", "9223372036854775807", "", "", "9223372036854775807", "", "", "")
	f.Add("1", "99999999999999999999", "", "", "", "", "", "", "")
	f.Add(" 3 ", "+5", "1e3", "0x10", "NaN", "-0", "\xff", "\x00", strings.Repeat("o", 5000))
	f.Add("1", "2", "1.5", "", "", "", strings.Repeat("é", 2000), "", "")
	f.Fuzz(func(t *testing.T, attempt, delay, due, first, failed, deadline, errText, reason, origin string) {
		h := map[string]string{}
		for k, v := range map[string]string{broker.HeaderAttempt: attempt, broker.HeaderDelay: delay, broker.HeaderDue: due,
			broker.HeaderFirstAttempt: first, broker.HeaderFirstFailure: failed, broker.HeaderDeadline: deadline,
			broker.HeaderError: errText, broker.HeaderReason: reason, broker.HeaderOrigin: origin} {
			if v != "" {
				h[k] = v
			}
		}
		get := func(k string) (string, bool) { v, ok := h[k]; return v, ok }
		got, err := broker.DecodeState(get)
		if err != nil {
			named := false
			for _, k := range []string{broker.HeaderAttempt, broker.HeaderDelay, broker.HeaderDue, broker.HeaderFirstAttempt,
				broker.HeaderFirstFailure, broker.HeaderDeadline} {
				named = named || strings.Contains(err.Error(), "header "+k+" ")
			}
			if !named || len(err.Error()) > 400 {
				t.Fatalf("DecodeState(%q): error %q names no header or is unbounded", h, err)
			}
			return
		}
		if err := brokertest.CheckDecoded(got); err != nil {
			t.Fatalf("DecodeState(%q) accepted %+v: %v", h, got, err)
		}
		h2 := map[string]string{}
		got.Encode(func(k, v string) { h2[k] = v })
		again, err := broker.DecodeState(func(k string) (string, bool) { v, ok := h2[k]; return v, ok })
		if err != nil {
			t.Fatalf("DecodeState(%q) = %+v, encoded back as %q which does not decode: %v", h, got, h2, err)
		}
		if d := brokertest.DiffState(again, got); d != "" {
			t.Fatalf("DecodeState(%q) = %+v, encoded back as %q: %s", h, got, h2, d)
		}
	})
}
