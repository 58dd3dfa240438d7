package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/broker/brokertest"
	"github.com/staggerhq/stagger/retry"
)

// TestPermanentRunsOnce dead-letters 20 permanent messages with MaxAttempts
// 5 and a short AckWait: each handler must run once, and each message must
// reach the DLQ once. A termination the server ignores leaves the message
// pending, so the server redelivers it up to MaxDeliver times.
func TestPermanentRunsOnce(t *testing.T) {
	const n = 20
	var (
		mu   sync.Mutex
		runs = map[string]int{}
	)
	h := func(ctx context.Context, _ []byte) error {
		d, _ := retry.DeliveryFrom(ctx)
		mu.Lock()
		runs[d.ID]++
		mu.Unlock()
		return retry.Permanent(errors.New("bad order"))
	}
	name := uniqueName(t)
	p := start(t, brokertest.Setup{Name: name, Handler: h, Policy: &retry.Policy{MaxAttempts: 5}},
		func(o *Options) { o.AckWait = 300 * time.Millisecond; o.Concurrency = 4 })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range n {
		if err := p.Publish(ctx, fmt.Sprintf("m%d", i), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	dead := map[string]int{}
	for range n {
		dl, err := p.NextDeadLetter(ctx)
		if err != nil {
			t.Fatal(err)
		}
		dead[dl.ID]++
		if dl.Reason != "permanent" || dl.Attempts != 1 {
			t.Errorf("dead letter %s: reason %q after %d attempts, want permanent after 1", dl.ID, dl.Reason, dl.Attempts)
		}
	}
	if err := p.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	total := 0
	for i := range n {
		id := fmt.Sprintf("m%d", i)
		total += runs[id]
		if runs[id] != 1 || dead[id] != 1 {
			t.Errorf("%s: handler ran %d times, dead-lettered %d times; want 1 and 1", id, runs[id], dead[id])
		}
	}
	if total != n {
		t.Errorf("%d handler runs for %d permanent messages, want %d", total, n, n)
	}
	select {
	case m := <-p.dlq:
		dl, _ := ParseDeadLetter(m)
		t.Errorf("a further dead letter after every message settled: %s (reason %q)", dl.ID, dl.Reason)
	default:
	}
}

// TestDeadLetterOnceOutsideDuplicateWindow dead-letters one message three
// times: from the consumer's view (ack metadata), from the advisory mover's
// (the stored message), and once more with the Nats-Msg-Id deduplication
// out of play (the first copy published without it, as after the DLQ
// stream's duplicate window): the DLQ must hold one copy.
func TestDeadLetterOnceOutsideDuplicateWindow(t *testing.T) {
	js := connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := uniqueName(t)
	createStream(t, js, name)
	h := func(context.Context, []byte) error { return nil }
	c, err := NewConsumer(js, Options{Stream: name, Consumer: "work", Handler: h, AckWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cons, _, err := c.Setup(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, name+".in", []byte("x"), jetstream.WithMsgID("m1")); err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	m := <-batch.Messages()
	if m == nil {
		t.Fatal("no message fetched")
	}
	md, ok := parseAckReply(m.Reply())
	if !ok {
		t.Fatalf("ack reply %q", m.Reply())
	}
	key := name + ".work." + fmt.Sprint(md.streamSeq) + "." + fmt.Sprint(md.timestamp)
	// The first copy, without a Nats-Msg-Id: as if the window had passed.
	first := nats.NewMsg(c.opts.DLQSubject + "." + key)
	first.Data = []byte("x")
	if _, err := js.PublishMsg(ctx, first); err != nil {
		t.Fatal(err)
	}
	st := broker.State{Attempts: 1, Reason: "permanent"}
	if err := c.deadLetter(ctx, "m1", md.stream, md.streamSeq, md.timestamp, m.Subject(), m.Headers(), m.Data(), st); err != nil {
		t.Fatalf("consumer's copy: %v", err)
	}
	stream, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := stream.GetMsg(ctx, md.streamSeq)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.deadLetter(ctx, "m1", name, raw.Sequence, raw.Time.UnixNano(), raw.Subject, raw.Header, raw.Data, st); err != nil {
		t.Fatalf("mover's copy: %v", err)
	}
	dlq, err := js.Stream(ctx, c.opts.DLQStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := dlq.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("DLQ stream holds %d messages, want 1 (one dead letter per message)", info.State.Msgs)
	}
}

// TestAttemptBoundedByAckWait: without an AttemptTimeout, the handler's
// context ends before its delivery's ack wait, so an attempt cannot succeed
// after the server gave up on the message; the last delivery's message is
// dead-lettered once, by the advisory mover, and the handler ran once.
func TestAttemptBoundedByAckWait(t *testing.T) {
	const ackWait = 400 * time.Millisecond
	var (
		mu    sync.Mutex
		runs  int
		bound time.Duration
	)
	h := func(ctx context.Context, _ []byte) error {
		start := time.Now()
		dl, ok := ctx.Deadline()
		mu.Lock()
		runs++
		if ok {
			bound = dl.Sub(start)
		}
		mu.Unlock()
		<-ctx.Done()
		return ctx.Err()
	}
	p := start(t, brokertest.Setup{Name: uniqueName(t), Handler: h, Policy: &retry.Policy{MaxAttempts: 1}},
		func(o *Options) { o.AckWait = ackWait })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Publish(ctx, "slow", []byte("x")); err != nil {
		t.Fatal(err)
	}
	dl, err := p.NextDeadLetter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if dl.ID != "slow" || dl.Reason != ReasonMaxDeliveries {
		t.Fatalf("dead letter %+v, want slow with reason %s", dl, ReasonMaxDeliveries)
	}
	if err := p.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if runs != 1 {
		t.Errorf("handler ran %d times, want once (MaxAttempts 1)", runs)
	}
	if bound <= 0 || bound >= ackWait {
		t.Errorf("the handler's context had %v left, want a deadline inside the ack wait %v", bound, ackWait)
	}
}

// TestMoverFiltersAndStaleAdvisory: the mover's consumer reads only its
// own consumer's advisories, and an advisory older than the message now
// stored at its sequence (the stream was recreated) does not dead-letter
// that message: it is recorded as gone.
func TestMoverFiltersAndStaleAdvisory(t *testing.T) {
	ok := func(context.Context, []byte) error { return nil }
	name := uniqueName(t)
	p := start(t, brokertest.Setup{Name: name, Handler: ok, Policy: &retry.Policy{MaxAttempts: 3}}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mover, err := p.js.Consumer(ctx, name+"_ADV", "work_dlq")
	if err != nil {
		t.Fatal(err)
	}
	if f := mover.CachedInfo().Config.FilterSubject; f != AdvisorySubject(name, "work") {
		t.Errorf("mover FilterSubject %q, want %q", f, AdvisorySubject(name, "work"))
	}
	if err := p.Publish(ctx, "fresh", []byte("payload")); err != nil {
		t.Fatal(err)
	}
	if err := p.Settle(ctx); err != nil { // handled and acknowledged
		t.Fatal(err)
	}
	adv := fmt.Sprintf(`{"type":"io.nats.jetstream.advisory.v1.max_deliver","stream":%q,"consumer":"work","stream_seq":1,"deliveries":3,"timestamp":%q}`,
		name, time.Now().Add(-time.Hour).UTC().Format(time.RFC3339Nano))
	if _, err := p.js.Publish(ctx, AdvisorySubject(name, "work"), []byte(adv)); err != nil {
		t.Fatal(err)
	}
	dl, err := p.NextDeadLetter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(dl.Payload) != 0 || dl.ID == "fresh" || !strings.Contains(dl.Error, "no longer in the stream") {
		t.Fatalf("a stale advisory dead-lettered %+v (payload %q): want a record of a message gone, not the new message", dl, dl.Payload)
	}
}

// TestCarriedDeadline: a message whose producer handed over a ledger with
// a deadline that has passed (x-stagger-deadline) is dead-lettered with
// reason "deadline" without running the handler; one with a deadline ahead
// runs.
func TestCarriedDeadline(t *testing.T) {
	var runs sync.Map
	h := func(ctx context.Context, _ []byte) error {
		d, _ := retry.DeliveryFrom(ctx)
		runs.Store(d.ID, d.Deadline)
		return nil
	}
	name := uniqueName(t)
	p := start(t, brokertest.Setup{Name: name, Handler: h, Policy: &retry.Policy{MaxAttempts: 3}}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	publish := func(id string, deadline time.Time) {
		m := nats.NewMsg(p.subject)
		m.Data = []byte("x")
		broker.StateFrom(retry.Delivery{Deadline: deadline}).Encode(func(k, v string) { m.Header.Set(k, v) })
		if _, err := p.js.PublishMsg(ctx, m, jetstream.WithMsgID(id)); err != nil {
			t.Fatal(err)
		}
	}
	ahead := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	publish("late", time.Now().Add(-time.Minute))
	publish("ontime", ahead)
	dl, err := p.NextDeadLetter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if dl.ID != "late" || dl.Reason != "deadline" {
		t.Errorf("dead letter %s reason %q, want late with reason deadline", dl.ID, dl.Reason)
	}
	if err := p.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ran := runs.Load("late"); ran {
		t.Error("the handler ran for a message past its carried deadline")
	}
	if d, ran := runs.Load("ontime"); !ran || !d.(time.Time).Equal(ahead) {
		t.Errorf("ontime: ran %v with deadline %v, want the carried %v", ran, d, ahead)
	}
}
