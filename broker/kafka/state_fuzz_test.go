package kafka

import (
	"bytes"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/broker/brokertest"
)

// FuzzParseState: any HeaderState value is refused with an error naming
// the header, or gives a state within bounds and coordinates a record can
// have (partition in [0, MaxInt32], offset >= 0, a topic of one line),
// which appendState writes back to the same state and coordinates.
func FuzzParseState(f *testing.F) {
	st := broker.State{Attempts: 2, Prev: 1500 * time.Millisecond, Due: time.UnixMilli(1_700_000_001_000),
		FirstAttempt: time.UnixMilli(1_700_000_000_000), FirstFailure: time.UnixMilli(1_700_000_000_100), Error: "boom:\nsecond ü"}
	f.Add(appendState(nil, st, coords{topic: "orders.v2", partition: 7, offset: 123456789}))
	st.Deadline = time.UnixMilli(1_700_000_100_000)
	f.Add(appendState(nil, st, coords{topic: "orders", partition: math.MaxInt32, offset: math.MaxInt64}))
	for _, s := range []string{"", "1 1 0 0 0 0 0 0 t", "1 1 0 0 0 0 0 0 ", "1 1 0 0 0 0 0 t", "1 1 0 0 0 0 2147483648 0 t",
		"1 1 0 0 0 0 -1 0 t", "1 1 0 0 0 0 0 -1 t", "1 1 0 0 0 0 0 99999999999999999999 t", "1 1 0 0 0 0 0 0 a b",
		"1 1 0 0 0 0 0 0 t\n", "1 1 0 0 0 0  0 0 t", "2 1 0 0 0 0 5 0 0 t\nerr", "1 1 0 0 0 0 0 0 \xff\xfe"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		got, co, err := parseState(v, "orders")
		if err != nil {
			if !strings.Contains(err.Error(), HeaderState) || len(err.Error()) > 400 {
				t.Fatalf("parseState(%q): error %q does not name %s or is unbounded", v, err, HeaderState)
			}
			return
		}
		if err := brokertest.CheckDecoded(got); err != nil {
			t.Fatalf("parseState(%q) accepted %+v: %v", v, got, err)
		}
		if co.partition < 0 || co.offset < 0 || co.topic == "" || strings.Contains(co.topic, "\n") {
			t.Fatalf("parseState(%q) accepted coordinates %+v", v, co)
		}
		again := appendState(nil, got, co)
		st2, co2, err := parseState(again)
		if err != nil {
			t.Fatalf("parseState(%q) = %+v %+v, written back as %q which does not parse: %v", v, got, co, again, err)
		}
		if d := brokertest.DiffState(st2, got); d != "" || co2 != co {
			t.Fatalf("%q: written back as %q: %s; coordinates %+v, want %+v", v, again, d, co2, co)
		}
	})
}

// FuzzForward: a record forwarded with any state in the encoders' domain
// and any coordinates a record can have reads back unchanged: a retry
// through its HeaderState header (parseState), a dead letter through
// ParseDeadLetter, with the original's ID and coordinates as its origin.
// The record's own headers, whatever they hold, travel on and never stand
// in for the state.
func FuzzForward(f *testing.F) {
	f.Add(int64(2), int64(1500), int64(1_700_000_001_000), int64(1_700_000_000_000), int64(1_700_000_000_100), int64(0),
		"boom\nsecond", "exhausted", "orders", int32(7), int64(42), "o-1", broker.HeaderAttempt, "-5")
	f.Add(int64(-1), int64(math.MaxInt64), int64(math.MaxInt64), int64(0), int64(1), int64(math.MinInt64),
		"\xff", "", "t", int32(math.MaxInt32), int64(math.MaxInt64), "", HeaderState, "garbage")
	f.Add(int64(0), int64(0), int64(0), int64(0), int64(0), int64(0), "", "", "a", int32(-1), int64(-1), "", "", "")
	f.Fuzz(func(t *testing.T, attempts, prevMs, due, first, failed, deadline int64, errText, reason, topic string,
		partition int32, offset int64, id, hk, hv string) {
		if topic == "" || strings.ContainsAny(topic, "\n") {
			topic = "t"
		}
		co := coords{topic: topic, partition: max(partition, 0), offset: max(offset, 0)}
		st := brokertest.StateOf(attempts, prevMs, due, first, failed, deadline, errText)
		if hk == broker.HeaderID {
			hk = "k"
		}
		r := &kgo.Record{Topic: topic, Value: []byte("v"), Headers: []kgo.RecordHeader{{Key: hk, Value: []byte(hv)}}}
		if id != "" {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: broker.HeaderID, Value: []byte(id)})
		}
		hasID := id != ""
		if !hasID {
			id = co.String()
		}

		fw := forward(r, "retry", st, co, hasID, false)
		sc := scanHeaders(fw)
		got, gco, err := parseState(sc.state, topic)
		if err != nil || sc.id != id {
			t.Fatalf("retry of %+v at %+v: %v; id %q, want %q", st, co, err, sc.id, id)
		}
		if d := brokertest.DiffState(got, st); d != "" || gco != co {
			t.Fatalf("retry of %+v at %+v reads back %+v at %+v: %s", st, co, got, gco, d)
		}

		st.Reason = reason
		dl, err := ParseDeadLetter(forward(fw, "dlq", st, co, true, true))
		if err != nil {
			t.Fatalf("dead letter of %+v: %v", st, err)
		}
		want := st
		want.Origin = co.String()
		if d := brokertest.DiffState(dl.State, want); d != "" || dl.ID != id || !bytes.Equal(dl.Payload, r.Value) {
			t.Fatalf("dead letter of %+v reads back %+v (ID %q, want %q): %s", st, dl, dl.ID, id, d)
		}
	})
}

// FuzzParseDeadLetter: a DLQ record with headers of any value is refused
// with an error naming the header at fault, or gives a state within
// bounds, its ID and its payload.
func FuzzParseDeadLetter(f *testing.F) {
	f.Add(broker.HeaderAttempt, "3", broker.HeaderFirstFailure, "1700000000100", broker.HeaderID, "o-1")
	f.Add(broker.HeaderAttempt, "99999999999", broker.HeaderDelay, "-1", broker.HeaderDue, "1e3")
	f.Add(broker.HeaderDelay, "9223372036854775807", broker.HeaderError, "\xff", broker.HeaderAttempt, "")
	f.Add(broker.HeaderDeadline, "+0", broker.HeaderReason, strings.Repeat("r", 4096), HeaderState, "1 1 0 0 0 0 0 0 t")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, k3, v3 string) {
		r := &kgo.Record{Value: []byte("payload"), Headers: []kgo.RecordHeader{
			{Key: k1, Value: []byte(v1)}, {Key: k2, Value: []byte(v2)}, {Key: k3, Value: []byte(v3)}}}
		dl, err := ParseDeadLetter(r)
		if err != nil {
			if !strings.Contains(err.Error(), "x-stagger-") || len(err.Error()) > 400 {
				t.Fatalf("ParseDeadLetter(%q=%q %q=%q %q=%q): error %q names no header or is unbounded", k1, v1, k2, v2, k3, v3, err)
			}
			return
		}
		if err := brokertest.CheckDecoded(dl.State); err != nil {
			t.Fatalf("ParseDeadLetter(%q=%q %q=%q %q=%q) accepted %+v: %v", k1, v1, k2, v2, k3, v3, dl.State, err)
		}
		if id, _ := headerGetter(r)(broker.HeaderID); dl.ID != id || string(dl.Payload) != "payload" {
			t.Fatalf("ParseDeadLetter: ID %q, payload %q", dl.ID, dl.Payload)
		}
	})
}

// FuzzLegacyCoords: the coordinates headers of the nine-header form give
// the coordinates they spell (a topic, a partition in [0, MaxInt32], an
// offset >= 0, all decimal digits) or none, so that the record's own are
// used: a malformed value never becomes partition or
// offset 0, which would give the record another record's ID.
func FuzzLegacyCoords(f *testing.F) {
	f.Add("orders", "7", "42", true)
	f.Add("orders", "7", "42", false)
	f.Add("orders", "007", "0042", true)
	f.Fuzz(func(t *testing.T, topic, partition, offset string, hasTopic bool) {
		r := &kgo.Record{Headers: []kgo.RecordHeader{{Key: HeaderPartition, Value: []byte(partition)}, {Key: HeaderOffset, Value: []byte(offset)}}}
		if hasTopic {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderTopic, Value: []byte(topic)})
		}
		co, ok := legacyCoords(headerGetter(r))
		if !ok {
			return
		}
		pn, perr := strconv.ParseInt(partition, 10, 32)
		on, oerr := strconv.ParseInt(offset, 10, 64)
		digits := !strings.ContainsAny(partition+offset, "+-")
		if !hasTopic || topic == "" || co.topic != topic || perr != nil || oerr != nil || !digits || pn < 0 || on < 0 ||
			int64(co.partition) != pn || co.offset != on {
			t.Fatalf("legacyCoords(%q, %q, %q) = %+v", topic, partition, offset, co)
		}
	})
}
