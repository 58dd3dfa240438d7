package jetstream

import (
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/broker/brokertest"
)

// libraryMeta is what the client library reads from an ack reply subject.
func libraryMeta(reply string) (ackMeta, bool) {
	md, err := (&nats.Msg{Reply: reply, Sub: &nats.Subscription{}}).Metadata()
	if err != nil {
		return ackMeta{}, false
	}
	return ackMeta{md.Stream, md.NumDelivered, md.Sequence.Stream, md.Timestamp.UnixNano()}, true
}

// FuzzParseAckReply: whatever subject the fast parser accepts, the client
// library accepts too and reads the same stream, delivery count, stream
// sequence and timestamp; and what it accepts is usable: a stream name, a
// delivery count of at least 1, a timestamp >= 0.
func FuzzParseAckReply(f *testing.F) {
	for _, s := range []string{
		"$JS.ACK.ORDERS.work.3.1042.1040.1700000000123456789.7",
		"$JS.ACK._.ACCHASH.ORDERS.work.1.5.5.1700000000000000001.0.rnd",
		"$JS.ACK.hub.ACCHASH.ORDERS.work.2.6.6.1700000000000000001.0",
		"$JS.ACK.hub.ACCHASH.ORDERS.work.2.6.6.1700000000000000001.0.rnd.more.and.more",
		"$JS.ACK.ORDERS.work.0.1042.1040.1700000000123456789.7",
		"$JS.ACK.ORDERS.work.18446744073709551615.1.1.1.1",
		"$JS.ACK.ORDERS.work.9999999999999999999.9999999999999999999.1.9223372036854775807.1",
		"$JS.ACK.ORDERS.work.1.1.1.9223372036854775808.1",
		"$JS.ACK.ORDERS.work.1.1.1.99999999999999999999.1",
		"$JS.ACK..work.1.1.1.1.1", "$JS.ACK.ORDERS.work.-1.1.1.1.1", "$JS.ACK.ORDERS.work.+1.1.1.1.1",
		"$JS.ACK.b.ORDERS.work.3.1042.1040.17.7", "$JS.ACK.", "$JS.ACK", "", "_INBOX.abc", "$JS.ACK.\xff.w.1.1.1.1.1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, reply string) {
		got, ok := parseAckReply(reply)
		if !ok {
			return
		}
		if got.stream == "" || got.delivered < 1 || got.timestamp < 0 {
			t.Fatalf("parseAckReply(%q) accepted %+v", reply, got)
		}
		want, libOK := libraryMeta(reply)
		if !libOK || got != want {
			t.Fatalf("parseAckReply(%q) = %+v; the client library reads %+v, %v", reply, got, want, libOK)
		}
	})
}

// FuzzAckReplyRoundTrip: the subject the server writes for any delivery,
// in either form, reads back as that delivery.
func FuzzAckReplyRoundTrip(f *testing.F) {
	f.Add("ORDERS", "work", uint64(3), uint64(1042), uint64(1040), int64(1_700_000_000_123_456_789), uint64(7), "", "rnd")
	f.Add("S", "c", uint64(math.MaxUint64), uint64(math.MaxUint64), uint64(0), int64(math.MaxInt64), uint64(math.MaxUint64), "hub", "")
	f.Add("s", "c", uint64(1), uint64(0), uint64(0), int64(0), uint64(0), "_", "x.y")
	f.Fuzz(func(t *testing.T, stream, consumer string, delivered, sseq, cseq uint64, ts int64, pending uint64, domain, tail string) {
		clean := func(s, or string) string {
			if s = strings.NewReplacer(".", "", " ", "").Replace(s); s == "" {
				return or
			}
			return s
		}
		stream, consumer = clean(stream, "s"), clean(consumer, "c")
		delivered, ts = max(delivered, 1), max(ts, 0)
		u := func(n uint64) string { return strconv.FormatUint(n, 10) }
		rest := strings.Join([]string{stream, consumer, u(delivered), u(sseq), u(cseq), strconv.FormatInt(ts, 10), u(pending)}, ".")
		reply := "$JS.ACK." + rest
		if domain != "" {
			reply = "$JS.ACK." + clean(domain, "_") + ".ACCHASH." + rest
			if tail != "" {
				reply += "." + tail
			}
		}
		want := ackMeta{stream, delivered, sseq, ts}
		got, ok := parseAckReply(reply)
		if delivered > 9_999_999_999_999_999_999 || sseq > 9_999_999_999_999_999_999 {
			// 20 digits: refused (the caller then asks the client library).
			if ok {
				t.Fatalf("parseAckReply(%q) = %+v: accepted a 20-digit number", reply, got)
			}
			return
		}
		if !ok || got != want {
			t.Fatalf("parseAckReply(%q) = %+v, %v; want %+v", reply, got, ok, want)
		}
	})
}

// FuzzParseDeadLetter: a DLQ message with headers of any value is refused
// with an error naming the header at fault, or gives a state within bounds
// and its ID; a dead letter written by forward's encoder (State.Encode)
// reads back unchanged.
func FuzzParseDeadLetter(f *testing.F) {
	f.Add(broker.HeaderAttempt, "3", broker.HeaderFirstFailure, "1700000000100", "o-1", int64(2), int64(1500), "boom", "exhausted")
	f.Add(broker.HeaderAttempt, "99999999999", broker.HeaderDelay, "-1", "", int64(-1), int64(math.MaxInt64), "\xff", "")
	f.Add(broker.HeaderDue, "1e3", broker.HeaderDeadline, "+0", strings.Repeat("i", 300), int64(math.MaxInt32), int64(0), "", "deadline")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, id string, attempts, prevMs int64, errText, reason string) {
		h := nats.Header{}
		h.Add(k1, v1)
		h.Add(k2, v2)
		h.Set(broker.HeaderID, id)
		dl, err := parseDeadLetter(h, []byte("payload"))
		if err != nil {
			if !strings.Contains(err.Error(), "x-stagger-") || len(err.Error()) > 400 {
				t.Fatalf("parseDeadLetter(%q): error %q names no header or is unbounded", h, err)
			}
		} else if err := brokertest.CheckDecoded(dl.State); err != nil || dl.ID != id || string(dl.Payload) != "payload" {
			t.Fatalf("parseDeadLetter(%q) accepted %+v: %v", h, dl, err)
		}

		st := brokertest.StateOf(attempts, prevMs, 1_700_000_001_000, 1_700_000_000_000, 1_700_000_000_100, 0, errText)
		st.Reason, st.Origin = reason, "orders.in"
		h = nats.Header{}
		st.Encode(h.Set)
		h.Set(broker.HeaderID, id)
		dl, err = parseDeadLetter(h, []byte("payload"))
		if err != nil {
			t.Fatalf("dead letter of %+v: %v", st, err)
		}
		if d := brokertest.DiffState(dl.State, st); d != "" || dl.ID != id {
			t.Fatalf("dead letter of %+v reads back %+v: %s", st, dl, d)
		}
	})
}
