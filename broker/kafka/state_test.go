package kafka

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/broker/brokertest"
	"github.com/staggerhq/stagger/retry"
)

func TestStateRoundTrip(t *testing.T) {
	ms := func(n int64) time.Time { return time.UnixMilli(n) }
	for _, st := range []broker.State{
		{},
		{Attempts: 2, Prev: 1500 * time.Millisecond, Due: ms(1_700_000_001_000), FirstAttempt: ms(1_700_000_000_000),
			FirstFailure: ms(1_700_000_000_100), Error: "boom:\nsecond line ü"},
		{Attempts: 1, FirstFailure: ms(5)},
	} {
		co := coords{topic: "orders.v2", partition: 7, offset: 123456789}
		v := appendState(nil, st, co)
		got, gco, err := parseState(v)
		if err != nil {
			t.Fatalf("%q: %v", v, err)
		}
		want := st // Origin unset: a dead letter writes it from the coordinates
		if got != want || gco != co {
			t.Errorf("%q: got %+v %+v, want %+v %+v", v, got, gco, want, co)
		}
	}
}

func TestStateMalformed(t *testing.T) {
	for _, c := range []struct{ v, field string }{
		{"", "version"},
		{"4 1 0 0 0 0 0 0 0 0 t", "version"},
		{"1 x 0 0 0 0 0 0 t", "attempts"},
		{"1 -1 0 0 0 0 0 0 t", "attempts"},
		{"1 1 0 0 0 0 0 t", "offset"},
		{"1 1 0 0 0 0 0 0 ", "topic"},
		{"1 99999999999 0 0 0 0 0 0 t", "attempts"},
		{"1 1 0 0 0 0 0 99999999999999999999 t", "offset"},
		{"1 1 0 1e3 0 0 0 0 t", "due"},
	} {
		_, _, err := parseState([]byte(c.v))
		if err == nil || !strings.Contains(err.Error(), HeaderState) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%q: err %v, want one naming %s and %s", c.v, err, HeaderState, c.field)
		}
	}
}

// TestForwardHeaders: a retry carries the record's own headers and one
// state header; a dead letter the readable ones.
func TestForwardHeaders(t *testing.T) {
	r := &kgo.Record{Topic: "orders", Partition: 1, Offset: 42, Value: []byte("v"),
		Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("t1")}, {Key: broker.HeaderID, Value: []byte("o-1")}}}
	st := broker.State{Attempts: 1, Prev: time.Second, Due: time.UnixMilli(2000), FirstAttempt: time.UnixMilli(900), FirstFailure: time.UnixMilli(1000), Error: "e"}
	co := recordCoords(r)
	fw := forward(r, "orders-retry-1s", st, co, true, false)
	var keys []string
	for _, h := range fw.Headers {
		keys = append(keys, h.Key)
	}
	if strings.Join(keys, ",") != "trace,x-stagger-id,"+HeaderState {
		t.Fatalf("retry headers %v, want trace, x-stagger-id and %s only", keys, HeaderState)
	}
	if got, gco, err := parseState(fw.Headers[2].Value); err != nil || got.Attempts != 1 || gco != co || got.Error != "e" {
		t.Fatalf("retry state %+v %+v %v", got, gco, err)
	}
	dl := forward(fw, "orders-dlq", broker.State{Attempts: 2, Reason: "exhausted", Error: "e2", FirstFailure: st.FirstFailure}, co, true, true)
	d, err := ParseDeadLetter(dl)
	if err != nil {
		t.Fatal(err)
	}
	if d.ID != "o-1" || d.Attempts != 2 || d.Reason != "exhausted" || d.Origin != "orders/1/42" || !d.FirstFailure.Equal(st.FirstFailure) {
		t.Errorf("dead letter %+v", d)
	}
	for _, h := range dl.Headers {
		if h.Key == HeaderState {
			t.Errorf("a dead letter carries %s: %q", HeaderState, h.Value)
		}
	}
	if tp, _ := headerGetter(dl)(HeaderTopic); tp != "orders" {
		t.Errorf("dead letter %s = %q", HeaderTopic, tp)
	}
}

// TestReadsNineHeaderState puts a record in the retry topic as an earlier
// version forwarded it (nine readable headers): the consumer continues its
// attempts from there, and its dead letter keeps the original's
// coordinates and first failure.
func TestReadsNineHeaderState(t *testing.T) {
	var (
		mu   sync.Mutex
		seen []retry.Delivery
	)
	h := func(ctx context.Context, _ []byte) error {
		d, _ := retry.DeliveryFrom(ctx)
		mu.Lock()
		seen = append(seen, d)
		mu.Unlock()
		return retry.Permanent(errors.New("still bad"))
	}
	name := uniqueName(t)
	p := start(t, brokertest.Setup{Name: name, Handler: h, Policy: brokertest.Policy(), Tiers: brokertest.Tiers}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	old := &kgo.Record{Topic: p.topics.Retry[0], Value: []byte("x")}
	for _, kv := range [][2]string{
		{broker.HeaderID, "legacy-1"}, {HeaderTopic, p.topics.Main}, {HeaderPartition, "1"}, {HeaderOffset, "17"},
		{broker.HeaderAttempt, "1"}, {broker.HeaderDelay, "200"}, {broker.HeaderDue, strconv.FormatInt(time.Now().UnixMilli(), 10)},
		{broker.HeaderFirstAttempt, strconv.FormatInt(first.UnixMilli(), 10)}, {broker.HeaderFirstFailure, strconv.FormatInt(first.UnixMilli(), 10)},
		{broker.HeaderError, "transient"}, {broker.HeaderOrigin, p.topics.Main + "/1/17"},
	} {
		old.Headers = append(old.Headers, kgo.RecordHeader{Key: kv[0], Value: []byte(kv[1])})
	}
	if err := p.cl.ProduceSync(ctx, old).FirstErr(); err != nil {
		t.Fatal(err)
	}
	dl, err := p.NextDeadLetter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if dl.ID != "legacy-1" || dl.Attempts != 2 || dl.Reason != "permanent" || dl.Origin != p.topics.Main+"/1/17" || !dl.FirstFailure.Equal(first) {
		t.Fatalf("dead letter %+v: want legacy-1 after attempt 2, origin %s/1/17, first failure %v", dl, p.topics.Main, first)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen[0].Attempt != 2 || seen[0].ID != "legacy-1" {
		t.Errorf("deliveries %+v, want attempt 2 of legacy-1 once", seen)
	}
}

// BenchmarkForwardRetry is a retry's header work: read the state of a
// forwarded record, and write the next forward.
func BenchmarkForwardRetry(b *testing.B) {
	r := &kgo.Record{Topic: "orders-retry-1s", Partition: 1, Offset: 42, Value: []byte("payload"),
		Headers: []kgo.RecordHeader{{Key: broker.HeaderID, Value: []byte("m1")}}}
	st := broker.State{Attempts: 1, Prev: time.Second, Due: time.UnixMilli(2000), FirstAttempt: time.UnixMilli(900), FirstFailure: time.UnixMilli(1000), Error: "transient failure on attempt 1"}
	r = forward(r, r.Topic, st, coords{topic: "orders", partition: 1, offset: 41}, true, false)
	b.ReportAllocs()
	for b.Loop() {
		sc := scanHeaders(r)
		got, co, err := parseState(sc.state, "orders")
		if err != nil {
			b.Fatal(err)
		}
		got.Attempts++
		_ = forward(r, "orders-retry-1m", got, co, true, false)
	}
}

// TestIDCutter: idCutter reads each record as scanHeaders does, its IDs
// cut from one string, with one allocation per batch once its buffers
// have grown.
func TestIDCutter(t *testing.T) {
	h := func(kv ...string) []kgo.RecordHeader {
		var hs []kgo.RecordHeader
		for i := 0; i < len(kv); i += 2 {
			hs = append(hs, kgo.RecordHeader{Key: kv[i], Value: []byte(kv[i+1])})
		}
		return hs
	}
	rs := []*kgo.Record{
		{Headers: h(broker.HeaderID, "m1")},
		{},                                // no headers
		{Headers: h(broker.HeaderID, "")}, // an empty ID
		{Headers: h("other", "x", broker.HeaderID, "m-long-id-4", broker.HeaderID, "second")},
		{Headers: h(HeaderState, "1;2", broker.HeaderID, "m5")},
		{Headers: h(broker.HeaderAttempt, "2")}, // a legacy header, no ID
	}
	var c idCutter
	for _, batch := range [][]*kgo.Record{rs, rs[3:], rs[:1], nil} {
		c.cut(batch)
		for i, r := range batch {
			want := scanHeaders(r)
			if got := c.scan(i); got.id != want.id || string(got.state) != string(want.state) ||
				(got.state == nil) != (want.state == nil) || got.legacy != want.legacy {
				t.Errorf("record %d of %d: idCutter %+v, scanHeaders %+v", i, len(batch), got, want)
			}
		}
	}
	c.cut(rs)
	if n := testing.AllocsPerRun(100, func() { c.cut(rs) }); n > 1 {
		t.Errorf("idCutter.cut of %d records: %v allocs, want at most 1 (the IDs)", len(rs), n)
	}
}

// TestForwardRetryAllocs: a retry of a record with an ID, a topic name of
// 40 bytes and a short error is one allocation; a topic and an error too
// long for its room still make a forward that reads back.
func TestForwardRetryAllocs(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	st := broker.State{Attempts: 1, Prev: time.Millisecond, Due: now.Add(time.Millisecond), FirstAttempt: now, FirstFailure: now,
		Error: "brokertest: transient"}
	r := &kgo.Record{Key: []byte("m1"), Value: []byte("payload"),
		Headers: []kgo.RecordHeader{{Key: broker.HeaderID, Value: []byte("m1")}}}
	co := coords{topic: "stg-bench-1796000000000000000-11-main", partition: 1, offset: 123456}
	if n := testing.AllocsPerRun(100, func() { _ = forward(r, "retry", st, co, true, false) }); n != 1 {
		t.Errorf("forward of a retry: %v allocs, want 1", n)
	}
	long := st
	long.Error = strings.Repeat("e", 300)
	lco := coords{topic: strings.Repeat("t", 249), partition: 7, offset: 1 << 40}
	noID := &kgo.Record{Key: r.Key, Value: r.Value}
	for _, in := range []*kgo.Record{r, noID} {
		hasID := in == r
		fw := forward(in, "retry", long, lco, hasID, false)
		sc := scanHeaders(fw)
		got, gco, err := parseState(sc.state)
		if err != nil || got.Error != long.Error || got.Attempts != 1 || !got.Due.Equal(long.Due) || gco != lco {
			t.Errorf("hasID %v: parseState = %+v, %+v, %v", hasID, got, gco, err)
		}
		want := "m1"
		if !hasID {
			want = lco.String()
		}
		if sc.id != want {
			t.Errorf("hasID %v: ID %q, want %q", hasID, sc.id, want)
		}
	}
}
