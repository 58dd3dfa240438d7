package jetstream

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/broker/brokertest"
	"github.com/staggerhq/stagger/internal/wait"
	"github.com/staggerhq/stagger/retry"
)

func natsURL() string {
	if u := os.Getenv("STAGGER_NATS_URL"); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}

// connect reaches the test NATS server, skipping (failing under CI=true)
// when it or its JetStream is unavailable.
func connect(t testing.TB) jetstream.JetStream {
	t.Helper()
	fail := func(err error) {
		msg := fmt.Sprintf("NATS JetStream unreachable at STAGGER_NATS_URL (default nats://127.0.0.1:4222): %v", err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	nc, err := nats.Connect(natsURL(), nats.Timeout(3*time.Second), nats.Name("stagger-test"))
	if err != nil {
		fail(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := js.AccountInfo(ctx); err != nil {
		fail(err)
	}
	return js
}

// createStream creates the work stream name on subject name.in; it and the
// DLQ and advisory streams a Consumer's Setup makes beside it are deleted
// when the test ends.
func createStream(t testing.TB, js jetstream.JetStream, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".in"}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, s := range []string{name, name + "_DLQ", name + "_ADV"} {
			if err := js.DeleteStream(ctx, s); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
				t.Errorf("delete stream %s: %v", s, err)
			}
		}
	})
}

type pipeline struct {
	js       jetstream.JetStream
	subject  string
	dlq      chan jetstream.Msg
	stream   string
	consumer string
}

// Settle waits until the durable consumer has nothing pending delivery or
// acknowledgement: the server will deliver nothing more.
func (p *pipeline) Settle(ctx context.Context) error {
	var w wait.Waiter
	defer w.Stop()
	var last string
	for {
		c, err := p.js.Consumer(ctx, p.stream, p.consumer)
		if err == nil {
			var info *jetstream.ConsumerInfo
			if info, err = c.Info(ctx); err == nil {
				if info.NumPending == 0 && info.NumAckPending == 0 {
					return nil
				}
				last = fmt.Sprintf("pending %d, ack pending %d, redelivered %d", info.NumPending, info.NumAckPending, info.NumRedelivered)
			}
		}
		if err != nil {
			last = err.Error()
		}
		if err := w.Wait(ctx, nil, 50*time.Millisecond); err != nil {
			return fmt.Errorf("consumer %s on %s: %w (last: %s)", p.consumer, p.stream, err, last)
		}
	}
}

func (p *pipeline) Publish(ctx context.Context, id string, payload []byte) error {
	_, err := p.js.Publish(ctx, p.subject, payload, jetstream.WithMsgID(id))
	return err
}

func (p *pipeline) NextDeadLetter(ctx context.Context) (broker.DeadLetter, error) {
	select {
	case m := <-p.dlq:
		return ParseDeadLetter(m)
	case <-ctx.Done():
		return broker.DeadLetter{}, ctx.Err()
	}
}

// start creates s's streams, runs a Consumer on them and returns the
// pipeline; streams are deleted when the test ends.
func start(t *testing.T, s brokertest.Setup, tweak func(*Options)) *pipeline {
	t.Helper()
	js := connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	createStream(t, js, s.Name)
	opts := Options{Stream: s.Name, Consumer: "work", Handler: s.Handler, Policy: s.Policy, Inbox: s.Inbox, Trace: s.Trace, AckWait: time.Second}
	if s.Crash || s.CrashAfterSuccess {
		var once sync.Once
		opts.afterHandle = func(success bool) (crash bool) {
			if s.Crash || success {
				once.Do(func() { crash = true })
			}
			return crash
		}
	}
	if tweak != nil {
		tweak(&opts)
	}
	c, err := NewConsumer(js, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(rctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run returned %v, want context.Canceled", err)
		}
	})
	dc, err := js.OrderedConsumer(ctx, c.opts.DLQStream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	dlq := make(chan jetstream.Msg, 64)
	cc, err := dc.Consume(func(m jetstream.Msg) { dlq <- m })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	return &pipeline{js: js, subject: s.Name + ".in", dlq: dlq, stream: s.Name, consumer: opts.Consumer}
}

func TestConformance(t *testing.T) {
	brokertest.Run(t, func(t *testing.T, s brokertest.Setup) brokertest.Pipeline {
		return start(t, s, nil)
	})
}

func uniqueName(t *testing.T) string {
	return fmt.Sprintf("stg-%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), time.Now().UnixNano()%1e9)
}

// TestMaxDeliveriesAdvisory never acknowledges (a consumer that keeps
// crashing after its handler): the server gives up at MaxDeliver, emits the
// MAX_DELIVERIES advisory, and the mover copies the original to the DLQ.
func TestMaxDeliveriesAdvisory(t *testing.T) {
	var mu sync.Mutex
	n := 0
	h := func(ctx context.Context, _ []byte) error { mu.Lock(); n++; mu.Unlock(); return nil }
	p := start(t, brokertest.Setup{Name: uniqueName(t), Handler: h, Policy: &retry.Policy{MaxAttempts: 3}},
		func(o *Options) {
			o.AckWait = 300 * time.Millisecond
			o.Policy.Schedule = nil
			o.afterHandle = func(bool) bool { return true }
		})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Publish(ctx, "stuck", []byte("payload")); err != nil {
		t.Fatal(err)
	}
	dl, err := p.NextDeadLetter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if dl.ID != "stuck" || dl.Reason != ReasonMaxDeliveries || dl.Attempts != 3 || string(dl.Payload) != "payload" || dl.Origin != p.subject {
		t.Fatalf("dead letter %+v", dl)
	}
	mu.Lock()
	defer mu.Unlock()
	if n != 3 {
		t.Errorf("handler ran %d times, want MaxDeliver = 3", n)
	}
}

func TestConsumerConfig(t *testing.T) {
	h := func(context.Context, []byte) error { return nil }
	c, err := NewConsumer(nopJS{}, Options{Stream: "S", Consumer: "C", Handler: h, AckWait: 15 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cfg := c.ConsumerConfig()
	// Default policy: the default cascade, 4 attempts.
	want := []time.Duration{15 * time.Second, time.Minute, 10 * time.Minute}
	if cfg.MaxDeliver != 4 || fmt.Sprint(cfg.BackOff) != fmt.Sprint(want) || cfg.AckPolicy != jetstream.AckExplicitPolicy {
		t.Fatalf("config %+v", cfg)
	}
	if c.opts.DLQStream != "S_DLQ" || c.opts.DLQSubject != "dlq.S.C" || c.opts.AdvisoryStream != "S_ADV" {
		t.Fatalf("defaults %+v", c.opts)
	}
}

func TestBadOptions(t *testing.T) {
	h := func(context.Context, []byte) error { return nil }
	good := Options{Stream: "S", Consumer: "C", Handler: h}
	for _, c := range []struct {
		mod  func(*Options)
		want string
	}{
		{func(o *Options) { o.Stream = "a.b" }, "Stream must be"},
		{func(o *Options) { o.Consumer = "" }, "Consumer must be"},
		{func(o *Options) { o.Handler = nil }, "Handler must not be nil"},
		{func(o *Options) { o.AckWait = -time.Second }, "AckWait must be"},
		{func(o *Options) { o.MaxAckPending = -1 }, "MaxAckPending must be"},
		{func(o *Options) { o.MaxAckPending, o.Concurrency = 10, 11 }, "Concurrency must be"},
		{func(o *Options) {
			o.AckWait, o.Policy = time.Second, &retry.Policy{MaxAttempts: 3, AttemptTimeout: time.Second}
		}, "Policy.AttemptTimeout must be below AckWait"},
		{func(o *Options) { o.DLQStream = "x y" }, "DLQStream must be"},
		{func(o *Options) { o.DLQStream = "S" }, "DLQStream must differ from Stream"},
		{func(o *Options) { o.AdvisoryStream = "S" }, "AdvisoryStream must differ from Stream"},
		{func(o *Options) { o.AdvisoryStream = "S_DLQ" }, "DLQStream must differ from AdvisoryStream"},
		{func(o *Options) { o.DLQSubject = "dlq.*" }, "DLQSubject must be a literal subject"},
		{func(o *Options) { o.DLQSubject = "dlq..x" }, "DLQSubject must be dot-separated"},
		{func(o *Options) { o.DLQSubject = "dlq x" }, "DLQSubject must be free of whitespace"},
		{func(o *Options) { o.FilterSubject = "orders.>.x" }, "FilterSubject must be a subject whose wildcards"},
		{func(o *Options) { o.FilterSubject = "orders.a*" }, "FilterSubject must be a subject whose wildcards"},
		{func(o *Options) { o.Policy = &retry.Policy{MaxAttempts: -2} }, "MaxAttempts must be"},
	} {
		o := good
		c.mod(&o)
		if _, err := NewConsumer(nopJS{}, o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("err = %v, want %q", err, c.want)
		}
	}
	if _, err := NewConsumer(nil, good); err == nil {
		t.Error("nil JetStream accepted")
	}
}

// nopJS satisfies jetstream.JetStream for option tests.
type nopJS struct{ jetstream.JetStream }

// TestConformanceConcurrent runs the suite with handler goroutines (the
// callback hands messages over) rather than in the consume callback.
func TestConformanceConcurrent(t *testing.T) {
	brokertest.Run(t, func(t *testing.T, s brokertest.Setup) brokertest.Pipeline {
		return start(t, s, func(o *Options) { o.Concurrency = 4 })
	})
}

func TestParseAckReply(t *testing.T) {
	for _, c := range []struct {
		reply string
		want  ackMeta
		ok    bool
	}{
		{"$JS.ACK.ORDERS.work.3.1042.1040.1700000000123456789.7", ackMeta{"ORDERS", 3, 1042, 1700000000123456789}, true},
		{"$JS.ACK._.ACCHASH.ORDERS.work.1.5.5.1700000000000000001.0.rnd", ackMeta{"ORDERS", 1, 5, 1700000000000000001}, true},
		{"$JS.ACK.hub.ACCHASH.ORDERS.work.2.6.6.1700000000000000001.0", ackMeta{"ORDERS", 2, 6, 1700000000000000001}, true},
		{"$JS.ACK.hub.ACCHASH.ORDERS.work.2.6.6.1700000000000000001.0.rnd.more", ackMeta{"ORDERS", 2, 6, 1700000000000000001}, true},
		{"$JS.ACK.ORDERS.work.x.1042.1040.1700000000123456789.7", ackMeta{}, false},  // not a number
		{"$JS.ACK.ORDERS.work.0.1042.1040.1700000000123456789.7", ackMeta{}, false},  // delivered 0
		{"$JS.ACK.ORDERS.work.3.1042.1040.1700000000123456789", ackMeta{}, false},    // 8 tokens
		{"$JS.ACK.b.ORDERS.work.3.1042.1040.17.7", ackMeta{}, false},                 // 10 tokens
		{"$JS.ACK.ORDERS.work.3.1042.1040.99999999999999999999.7", ackMeta{}, false}, // overflows
		{"_INBOX.abc", ackMeta{}, false},
		{"", ackMeta{}, false},
	} {
		got, ok := parseAckReply(c.reply)
		if ok != c.ok || (ok && got != c.want) {
			t.Errorf("parseAckReply(%q) = %+v, %v; want %+v, %v", c.reply, got, ok, c.want, c.ok)
		}
	}
}

// TestParseAckReplyMatchesServer compares the fast parser with the client
// library's on messages from the running server.
func TestParseAckReplyMatchesServer(t *testing.T) {
	js := connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	name := uniqueName(t)
	createStream(t, js, name)
	for i := range 3 {
		if _, err := js.Publish(ctx, name+".in", []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, name, jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	for round := 1; round <= 2; round++ { // delivered 1, then 2 after a nak
		batch, err := cons.Fetch(3, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				t.Fatal(err)
			}
			got, ok := parseAckReply(m.Reply())
			want := ackMeta{md.Stream, md.NumDelivered, md.Sequence.Stream, md.Timestamp.UnixNano()}
			if !ok || got != want || got.delivered != uint64(round) {
				t.Errorf("round %d: parseAckReply(%q) = %+v, %v; the client library reads %+v", round, m.Reply(), got, ok, want)
			}
			_ = m.Nak()
		}
		if n != 3 {
			t.Fatalf("round %d: fetched %d messages, want 3", round, n)
		}
	}
}

// TestConsumerDeletedRecovers deletes the durable consumer under a running
// Consumer (an operator's mistake, a stream restored from a backup): the
// client library stops consuming, and Run must create the consumer again
// and go on.
func TestConsumerDeletedRecovers(t *testing.T) {
	seen := make(chan string, 4)
	h := func(ctx context.Context, _ []byte) error {
		d, _ := retry.DeliveryFrom(ctx)
		seen <- d.ID
		return nil
	}
	name := uniqueName(t)
	p := start(t, brokertest.Setup{Name: name, Handler: h}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waitID := func(id string) {
		t.Helper()
		for {
			select {
			case got := <-seen:
				if got == id {
					return
				}
			case <-ctx.Done():
				t.Fatalf("%s never reached the handler", id)
			}
		}
	}
	if err := p.Publish(ctx, "before", []byte("x")); err != nil {
		t.Fatal(err)
	}
	waitID("before")
	if err := p.js.DeleteConsumer(ctx, name, "work"); err != nil {
		t.Fatal(err)
	}
	if err := p.Publish(ctx, "after", []byte("x")); err != nil {
		t.Fatal(err)
	}
	waitID("after")
}

// TestClosedConnectionEndsRun: once the nats.Conn is closed for good
// (closed by its owner, or out of reconnect attempts) nothing can consume
// any more, and Run says so instead of blocking until its ctx ends.
func TestClosedConnectionEndsRun(t *testing.T) {
	admin := connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := uniqueName(t)
	createStream(t, admin, name)
	nc, err := nats.Connect(natsURL(), nats.Timeout(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	handled := make(chan struct{}, 1)
	h := func(context.Context, []byte) error { handled <- struct{}{}; return nil }
	c, err := NewConsumer(js, Options{Stream: name, Consumer: "work", Handler: h})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	if _, err := admin.Publish(ctx, name+".in", []byte("x")); err != nil {
		t.Fatal(err)
	}
	select { // Run is consuming
	case <-handled:
	case <-ctx.Done():
		t.Fatal("the message never reached the handler")
	}
	nc.Close()
	select {
	case err := <-done:
		if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "connection closed") {
			t.Fatalf("Run = %v, want a connection-closed error", err)
		}
	case <-ctx.Done():
		t.Fatal("Run went on after its connection was closed")
	}
}

// TestTwoConsumersShareDLQStream runs two durable consumers on one stream
// with the default DLQ and advisory streams (Stream_DLQ, Stream_ADV), each
// with a subject of its own: the second Setup must not take the first
// one's subject away, and existing streams keep their configuration.
func TestTwoConsumersShareDLQStream(t *testing.T) {
	js := connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := uniqueName(t)
	createStream(t, js, name)
	// The operator made the DLQ stream beforehand, keeping dead letters a week.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name + "_DLQ", Subjects: []string{"dlq." + name + ".a"}, MaxAge: 7 * 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	perm := func(context.Context, []byte) error { return retry.Permanent(errors.New("no")) }
	var cs []*Consumer
	for _, cn := range []string{"a", "b"} {
		c, err := NewConsumer(js, Options{Stream: name, Consumer: cn, FilterSubject: name + ".in", Handler: perm, AckWait: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.Setup(ctx); err != nil {
			t.Fatalf("Setup %s: %v", cn, err)
		}
		cs = append(cs, c)
	}
	for _, s := range []struct {
		stream   string
		subjects []string
	}{
		{name + "_DLQ", []string{"dlq." + name + ".a", "dlq." + name + ".a.>", "dlq." + name + ".b.>"}},
		{name + "_ADV", []string{AdvisorySubject(name, "a"), AdvisorySubject(name, "b")}},
	} {
		st, err := js.Stream(ctx, s.stream)
		if err != nil {
			t.Fatal(err)
		}
		cfg := st.CachedInfo().Config
		for _, subj := range s.subjects {
			if !slices.Contains(cfg.Subjects, subj) {
				t.Errorf("stream %s has subjects %v: %s lost", s.stream, cfg.Subjects, subj)
			}
		}
		if s.stream == name+"_DLQ" && cfg.MaxAge != 7*24*time.Hour {
			t.Errorf("Setup changed the existing DLQ stream's MaxAge to %v", cfg.MaxAge)
		}
		if s.stream == name+"_ADV" && cfg.MaxAge != AdvisoryMaxAge {
			t.Errorf("the advisory stream Setup created has MaxAge %v, want %v (handled advisories must not pile up)", cfg.MaxAge, AdvisoryMaxAge)
		}
	}
	// Both consumers' dead letters arrive.
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Add(1)
		go func() { defer wg.Done(); _ = c.Run(rctx) }()
	}
	defer func() { stop(); wg.Wait() }()
	if _, err := js.Publish(ctx, name+".in", []byte("x"), jetstream.WithMsgID("m")); err != nil {
		t.Fatal(err)
	}
	dc, err := js.OrderedConsumer(ctx, name+"_DLQ", jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for len(seen) < 2 {
		m, err := dc.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatalf("dead letters of %v only: %v", seen, err)
		}
		seen[m.Subject()] = true
	}
}

func TestSubjectCovers(t *testing.T) {
	for _, c := range []struct {
		pattern, subject string
		want             bool
	}{
		{"dlq.S.a", "dlq.S.a", true},
		{"dlq.S.a", "dlq.S.b", false},
		{"dlq.S.*", "dlq.S.a", true},
		{"dlq.S.*", "dlq.S.a.b", false},
		{"dlq.S.*", "dlq.S.>", false},
		{"dlq.S.>", "dlq.S.>", true},
		{"dlq.*.>", "dlq.S.a.>", true},
		{"dlq.>", "dlq.S.a", true},
		{"dlq.>", "dlq", false},
		{">", "x", true},
		{"dlq.S", "dlq.S.a", false},
		{"dlq.S.a", "dlq.S", false},
	} {
		if got := subjectCovers(c.pattern, c.subject); got != c.want {
			t.Errorf("subjectCovers(%q, %q) = %v, want %v", c.pattern, c.subject, got, c.want)
		}
	}
}
