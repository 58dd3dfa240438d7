package rabbitmq

import (
	"math"
	"strconv"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/broker/brokertest"
)

// FuzzParseFields: any adapter fields give the publish tag (the first
// field) and, when they parse, a route that appendFields writes back to
// fields reading as the same tag and route.
func FuzzParseFields(f *testing.F) {
	for _, s := range []string{"17 6 orders eu new", "17 0  q", "17 3 a b  ", "17", "17 ", "17 x a b", "17 -1 a b",
		"17 99999999999999999999 a b", "17 9223372036854775807 a b", "17 6 orders", "17 6 ordersXkey", "17 2 \xff\xfe \x00",
		"", " ", "  ", "17 1", " 00  "} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, extra []byte) {
		tag, r, ok := parseFields(extra)
		if want, _, _ := strings.Cut(string(extra), " "); tag != want {
			t.Fatalf("parseFields(%q): tag %q, want %q", extra, tag, want)
		}
		if !ok {
			if r != (route{}) {
				t.Fatalf("parseFields(%q): no route, yet %+v", extra, r)
			}
			return
		}
		again := appendFields(nil, tag, r, true)
		if tag2, r2, ok := parseFields(again); !ok || tag2 != tag || r2 != r {
			t.Fatalf("parseFields(%q) = %q %+v, written back as %q: %q %+v %v", extra, tag, r, again, tag2, r2, ok)
		}
	})
}

// FuzzWaitHeaders: a forward to a wait queue, with any state in the
// encoders' domain, any route and any headers of the delivery's own,
// reads back (readState) as that state and route, with its publish tag
// (returnTag); its dead letter (forwardHeaders, ParseDeadLetter) reads back
// as the dead letter's state. Stale state headers never survive a forward.
func FuzzWaitHeaders(f *testing.F) {
	f.Add(int64(2), int64(1000), int64(5000), int64(1000), int64(1100), int64(0), "busy\nline 2", "orders", "eu new", uint64(17), broker.HeaderAttempt, "-1", "exhausted")
	f.Add(int64(-1), int64(math.MaxInt64), int64(math.MaxInt64), int64(1), int64(0), int64(math.MinInt64), "\xff", "", " ", uint64(0), broker.HeaderState, "1 x", "")
	f.Add(int64(1), int64(0), int64(0), int64(0), int64(0), int64(9), "", "a\nb", "c", uint64(math.MaxUint64), HeaderExchange, "other", "deadline")
	f.Add(int64(1), int64(0), int64(0), int64(0), int64(0), int64(9), "", "a b", "line\nbreak", uint64(3), "x-death", "", "")
	f.Fuzz(func(t *testing.T, attempts, prevMs, due, first, failed, deadline int64, errText, exchange, key string, tagN uint64, hk, hv, reason string) {
		st := brokertest.StateOf(attempts, prevMs, due, first, failed, deadline, errText)
		r := route{exchange, key}
		tag := strconv.FormatUint(tagN, 10)
		in := amqp.Table{hk: hv}
		h := waitHeaders(in, st, r, tag)
		got, from, err := readState(&amqp.Delivery{Headers: h, Exchange: "main", RoutingKey: "k"})
		if err != nil {
			t.Fatalf("forward of %+v via %+v (headers %q): %v", st, r, h, err)
		}
		if d := brokertest.DiffState(got, st); d != "" || from != r {
			t.Fatalf("forward of %+v via %+v reads back %+v via %+v: %s", st, r, got, from, d)
		}
		if got, ok := returnTag(h); !ok || got != tag {
			t.Fatalf("forward of %+v: publish tag %q, %v; want %q", st, got, ok, tag)
		}

		st.Reason, st.Origin = reason, exchange+"/"+key
		dl, err := ParseDeadLetter(amqp.Delivery{Headers: forwardHeaders(h, st), MessageId: "m", Body: []byte("b")})
		if err != nil {
			t.Fatalf("dead letter of %+v: %v", st, err)
		}
		if d := brokertest.DiffState(dl.State, st); d != "" || dl.ID != "m" || string(dl.Payload) != "b" {
			t.Fatalf("dead letter of %+v reads back %+v: %s", st, dl, d)
		}
	})
}

// FuzzReadState: headers of any AMQP type and value (what a foreign
// producer may send) are refused with an error naming the header at fault,
// or read as a state within bounds; never a panic.
func FuzzReadState(f *testing.F) {
	f.Add(broker.HeaderState, uint8(0), "1 1 0 0 0 0 17 6 orders k", int64(0), 0.0, HeaderExchange, "x")
	f.Add(broker.HeaderAttempt, uint8(1), "", int64(3), 0.0, broker.HeaderFirstFailure, "1700000000100")
	f.Add(broker.HeaderAttempt, uint8(2), "", int64(0), 1e300, broker.HeaderDelay, "-1")
	f.Add(broker.HeaderAttempt, uint8(2), "", int64(0), math.NaN(), broker.HeaderError, "\xff")
	f.Add(broker.HeaderDelay, uint8(1), "", int64(math.MinInt64), 0.0, broker.HeaderDue, "1e3")
	f.Add(broker.HeaderState, uint8(3), "1 1 0 0 0 0", int64(0), 0.0, HeaderRoutingKey, "y")
	f.Add(broker.HeaderDeadline, uint8(4), "", int64(0), 0.0, "", "")
	f.Fuzz(func(t *testing.T, k string, kind uint8, s string, n int64, x float64, k2, v2 string) {
		var v any
		switch kind % 6 {
		case 0:
			v = s
		case 1:
			v = n
		case 2:
			v = x
		case 3:
			v = []byte(s)
		case 4:
			v = nil
		default:
			v = amqp.Table{s: n} // a type no producer of ours writes
		}
		d := &amqp.Delivery{Headers: amqp.Table{k: v, k2: v2}, Exchange: "main", RoutingKey: "k"}
		st, _, err := readState(d)
		if err != nil {
			if !strings.Contains(err.Error(), "x-stagger-") || len(err.Error()) > 400 {
				t.Fatalf("readState(%v): error %q names no header or is unbounded", d.Headers, err)
			}
			return
		}
		if err := brokertest.CheckDecoded(st); err != nil {
			t.Fatalf("readState(%v) accepted %+v: %v", d.Headers, st, err)
		}
		if _, err := ParseDeadLetter(*d); err != nil {
			t.Fatalf("readState(%v) accepts what ParseDeadLetter refuses: %v", d.Headers, err)
		}
	})
}
