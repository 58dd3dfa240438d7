package kafka

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/broker/brokertest"
	"github.com/staggerhq/stagger/internal/wait"
	"github.com/staggerhq/stagger/retry"
)

type pipeline struct {
	cluster *kfake.Cluster
	cl      *kgo.Client
	topics  Topics
	dlq     chan *kgo.Record
	groups  map[string]string // topic → the group of its stage
	txn     bool              // forwards are transactional
}

// Settle waits until every stage's group has committed up to the end of
// each partition of its topic, with no transaction open: nothing is left
// to consume. A retry topic written by transactions ends with a commit
// marker, which no consumer commits past: there the end may be one beyond.
func (p *pipeline) Settle(ctx context.Context) error {
	adm := kadm.NewClient(p.cl)
	var w wait.Waiter
	defer w.Stop()
	var last string
	for {
		last = ""
		topics := append([]string{p.topics.Main}, p.topics.Retry...)
		ends, err := adm.ListEndOffsets(ctx, topics...)
		var stable kadm.ListedOffsets
		if err == nil {
			stable, err = adm.ListCommittedOffsets(ctx, topics...)
		}
		if err == nil {
			for topic, group := range p.groups {
				var offs kadm.OffsetResponses
				if offs, err = adm.FetchOffsets(ctx, group); err != nil {
					break
				}
				ends.Each(func(e kadm.ListedOffset) {
					if e.Topic != topic {
						return
					}
					committed := int64(0)
					if o, ok := offs.Lookup(e.Topic, e.Partition); ok {
						committed = o.At
					}
					marker := int64(0)
					if p.txn && e.Topic != p.topics.Main {
						marker = 1
					}
					if lso, ok := stable.Lookup(e.Topic, e.Partition); !ok || lso.Offset != e.Offset {
						last += fmt.Sprintf(" %s/%d has a transaction open;", e.Topic, e.Partition)
					} else if committed < e.Offset-marker {
						last += fmt.Sprintf(" %s/%d committed %d of %d;", e.Topic, e.Partition, committed, e.Offset)
					}
				})
			}
		}
		if err == nil && last == "" {
			return nil
		}
		if err != nil {
			last = err.Error()
		}
		if err := w.Wait(ctx, nil, 50*time.Millisecond); err != nil {
			return fmt.Errorf("%w:%s", err, last)
		}
	}
}

func (p *pipeline) Publish(ctx context.Context, id string, payload []byte) error {
	return Publish(ctx, p.cl, p.topics.Main, id, []byte(id), payload)
}

func (p *pipeline) NextDeadLetter(ctx context.Context) (broker.DeadLetter, error) {
	select {
	case r := <-p.dlq:
		return ParseDeadLetter(r)
	case <-ctx.Done():
		return broker.DeadLetter{}, ctx.Err()
	}
}

// newCluster starts an in-process kfake cluster of one broker seeded with
// topics, parts partitions each, closed when the test ends, and returns it
// and its address. The cluster fences transactional IDs as Kafka does
// (fenceOnInit).
func newCluster(tb testing.TB, parts int32, topics Topics) (*kfake.Cluster, []string) {
	tb.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(parts, topics.All()...))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(cluster.Close)
	addrs := cluster.ListenAddrs()
	fenceOnInit(tb, cluster, addrs)
	return cluster, addrs
}

// fenceOnInit makes cluster abort a transactional ID's open transaction
// when a new producer registers that ID (InitProducerID without a producer
// ID), before it answers, as Kafka's transaction coordinator does (KIP-98;
// TransactionCoordinator.handleInitProducerId aborts an Ongoing
// transaction and answers CONCURRENT_TRANSACTIONS until the abort is
// done). The kfake pinned in go.mod only bumps the epoch there: a crashed
// producer's transaction stays open, the next producer of the same ID
// joins it, and that producer's commit commits the crashed one's records
// too, so a read_committed consumer reads a forward Kafka would have
// aborted.
func fenceOnInit(tb testing.TB, cluster *kfake.Cluster, addrs []string) {
	tb.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(cl.Close) // before cluster.Close: cleanups run last first
	cluster.ControlKey(int16(kmsg.InitProducerID), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		init := req.(*kmsg.InitProducerIDRequest)
		if init.TransactionalID == nil || init.ProducerID >= 0 {
			return nil, nil, false // idempotent only, or the same producer's recovery
		}
		// The abort is a request of its own: the cluster serves it while
		// this control function sleeps.
		done := make(chan error, 1)
		cluster.SleepControl(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			done <- abortOpen(ctx, cl, *init.TransactionalID)
		})
		select {
		case err := <-done:
			if err == nil {
				return nil, nil, false // kfake registers the producer
			}
			// Not swallowed: a failing abort would otherwise show only
			// as the client retrying CONCURRENT_TRANSACTIONS until the
			// test times out.
			tb.Logf("fenceOnInit: aborting %q's open transaction: %v (answering CONCURRENT_TRANSACTIONS)", *init.TransactionalID, err)
		default: // the cluster is closing
		}
		resp := init.ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ErrorCode = kerr.ConcurrentTransactions.Code // the client retries
		return resp, nil, true
	})
}

// abortOpen aborts txnID's transaction if one is open.
func abortOpen(ctx context.Context, cl *kgo.Client, txnID string) error {
	described, err := kadm.NewClient(cl).DescribeTransactions(ctx, txnID)
	if err != nil {
		return err
	}
	d, err := described.On(txnID, nil)
	if err == nil {
		err = d.Err
	}
	switch {
	case errors.Is(err, kerr.TransactionalIDNotFound):
		return nil // the ID's first producer
	case err != nil:
		return err
	case d.State != "Ongoing":
		return nil
	}
	end := kmsg.NewPtrEndTxnRequest()
	end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = txnID, d.ProducerID, d.ProducerEpoch, false
	resp, err := end.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	return kerr.ErrorForCode(resp.ErrorCode)
}

// start runs a Consumer for s on its own in-process kfake cluster.
func start(t *testing.T, s brokertest.Setup, tweak func(*Options)) *pipeline {
	t.Helper()
	topics := NewTopics(s.Name, s.Tiers)
	cluster, addrs := newCluster(t, 2, topics)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	opts := Options{Brokers: addrs, Topics: topics, Group: s.Name, Handler: s.Handler, Policy: s.Policy, Inbox: s.Inbox, Trace: s.Trace}
	var once atomic.Bool
	if s.Crash {
		opts.afterForward = func() bool { return once.CompareAndSwap(false, true) }
	}
	if s.CrashAfterSuccess {
		opts.afterSuccess = func() bool { return once.CompareAndSwap(false, true) }
	}
	if tweak != nil {
		tweak(&opts)
	}
	c, err := NewConsumer(opts)
	if err != nil {
		t.Fatal(err)
	}
	groups := map[string]string{}
	for _, s := range c.stages() {
		groups[s.topic] = s.group
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	dcl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topics.DLQ),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	dlq := make(chan *kgo.Record, 64)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			f := dcl.PollFetches(ctx)
			if ctx.Err() != nil || f.IsClientClosed() {
				return
			}
			f.EachRecord(func(r *kgo.Record) { dlq <- r })
		}
	}()
	t.Cleanup(func() {
		stop()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run returned %v, want context.Canceled", err)
		}
		wg.Wait()
		dcl.Close()
	})
	return &pipeline{cluster: cluster, cl: cl, topics: topics, dlq: dlq, groups: groups, txn: opts.Transactional}
}

func TestConformance(t *testing.T) {
	brokertest.Run(t, func(t *testing.T, s brokertest.Setup) brokertest.Pipeline {
		return start(t, s, nil)
	})
}

func TestConformanceTransactional(t *testing.T) {
	brokertest.Run(t, func(t *testing.T, s brokertest.Setup) brokertest.Pipeline {
		return start(t, s, func(o *Options) { o.Transactional, o.TransactionalID = true, s.Name })
	})
}

func uniqueName(t *testing.T) string {
	return fmt.Sprintf("stg-%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), time.Now().UnixNano()%1e9)
}

// lockedBuffer is a bytes.Buffer safe for concurrent writes (a log).
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestTransactionalCrashForwardsOnce: with transactions, a consumer killed
// between forward and commit leaves its transaction open; the next
// producer of its transactional ID fences it and the broker aborts it
// (fenceOnInit gives kfake that rule). The record is handled again, but the
// retry topic holds one committed forward, so the retry attempt runs once.
func TestTransactionalCrashForwardsOnce(t *testing.T) {
	type run struct {
		id      string
		attempt int
	}
	var mu sync.Mutex
	runs := map[run]int{}
	count := func(id string, attempt int) int {
		mu.Lock()
		defer mu.Unlock()
		return runs[run{id, attempt}]
	}
	h := func(ctx context.Context, _ []byte) error {
		d, _ := retry.DeliveryFrom(ctx)
		mu.Lock()
		runs[run{d.ID, d.Attempt}]++
		mu.Unlock()
		if d.Attempt == 1 {
			return retry.Retryable(errors.New("once"))
		}
		return nil
	}
	name := uniqueName(t)
	logs := &lockedBuffer{}
	p := start(t, brokertest.Setup{Name: name, Handler: h, Policy: brokertest.Policy(), Tiers: brokertest.Tiers, Crash: true},
		func(o *Options) {
			o.Transactional, o.TransactionalID = true, name
			o.Logger = slog.New(slog.NewTextHandler(logs, nil))
		})
	defer func() {
		if t.Failed() {
			t.Logf("consumer log:\n%s", logs.String())
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waitFor := func(id string, attempt int) {
		t.Helper()
		var w wait.Waiter
		defer w.Stop()
		for count(id, attempt) == 0 {
			if err := w.Wait(ctx, nil, 20*time.Millisecond); err != nil {
				t.Fatalf("attempt %d of %s never ran: %v", attempt, id, err)
			}
		}
	}
	// Both messages have key k: the same partition of the main topic and
	// of the retry topic, where the sentinel's forward lands behind every
	// forward of t1, so once its retry attempt ran, t1's forwards were all
	// handled.
	key := []byte("k")
	if err := Publish(ctx, p.cl, p.topics.Main, "t1", key, []byte("x")); err != nil {
		t.Fatal(err)
	}
	waitFor("t1", 2)
	if err := Publish(ctx, p.cl, p.topics.Main, "s", key, []byte("x")); err != nil {
		t.Fatal(err)
	}
	waitFor("s", 2)
	// What the transactions guarantee: the retry topic holds one committed
	// forward of t1 (the crashed transaction's was aborted) and one of s.
	if got := committedIDs(ctx, t, p, p.topics.Retry[0], "s"); got["t1"] != 1 || got["s"] != 1 {
		t.Errorf("committed forwards in %s: %v, want t1 and s once each", p.topics.Retry[0], got)
	}
	// A handler runs once per delivery, and a stage's transaction that
	// aborts (its group rebalanced, its offsets could not be committed:
	// kgo's GroupTransactSession.End) or fails delivers its poll again:
	// more runs than the minimum are allowed only with such an abort or
	// restart logged for that stage. A read of the crashed transaction's
	// forward would add a run of attempt 2 without one.
	redelivered := func(topic string) bool {
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "topic="+topic) && (strings.Contains(l, "transaction aborted") || strings.Contains(l, "stage restarting")) {
				return true
			}
		}
		return false
	}
	for _, c := range []struct {
		id      string
		attempt int
		min     int
		topic   string
	}{{"t1", 1, 2, p.topics.Main}, {"t1", 2, 1, p.topics.Retry[0]}, {"s", 1, 1, p.topics.Main}, {"s", 2, 1, p.topics.Retry[0]}} {
		if n := count(c.id, c.attempt); n < c.min || n > c.min && !redelivered(c.topic) {
			t.Errorf("attempt %d of %s ran %d times, want %d (more only after a logged abort or restart of the stage of %s)", c.attempt, c.id, n, c.min, c.topic)
		}
	}
}

// committedIDs reads topic from the start, read_committed, until a record
// of last, and counts its records by x-stagger-id.
func committedIDs(ctx context.Context, t *testing.T, p *pipeline, topic, last string) map[string]int {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.cluster.ListenAddrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := map[string]int{}
	for got[last] == 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("reading %s: %v (read %v)", topic, err, got)
		}
		fs.EachRecord(func(r *kgo.Record) {
			for _, h := range r.Headers {
				if h.Key == "x-stagger-id" {
					got[string(h.Value)]++
				}
			}
		})
	}
	return got
}

func TestBadOptions(t *testing.T) {
	h := func(context.Context, []byte) error { return nil }
	good := Options{Brokers: []string{"127.0.0.1:9092"}, Topics: NewTopics("orders", nil), Group: "g", Handler: h}
	for _, c := range []struct {
		mod  func(*Options)
		want string
	}{
		{func(o *Options) { o.Brokers = nil }, "Brokers must"},
		{func(o *Options) { o.Brokers = []string{"127.0.0.1:9092", ""} }, "Brokers[1] must be a host:port"},
		{func(o *Options) { o.Brokers = []string{"u:Pw-s3cr3t@127.0.0.1:9092"} }, "without user:password@"},
		{func(o *Options) { o.Brokers = []string{"nats://Tk-s3cr3t@h /x"} }, "Brokers[0] must be a host:port"},
		{func(o *Options) { o.Topics.Main = "a b" }, "Topics.Main must be 1..249"},
		{func(o *Options) { o.Topics.Retry[2] = "x/y" }, "Topics.Retry[2] must be 1..249"},
		{func(o *Options) { o.Topics.DLQ = o.Topics.Main }, "Topics.DLQ must differ from Topics.Main"},
		{func(o *Options) { o.Topics.Retry[1] = o.Topics.DLQ }, "Topics.Retry[1] must differ from Topics.DLQ"},
		{func(o *Options) { o.Topics.Retry = o.Topics.Retry[:1] }, "one topic per tier"},
		{func(o *Options) { o.Group = "" }, "Group must"},
		{func(o *Options) { o.Handler = nil }, "Handler must not be nil"},
		{func(o *Options) { o.Transactional = true }, "TransactionalID must"},
		{func(o *Options) { o.MaxPollRecords = -1 }, "MaxPollRecords must"},
		{func(o *Options) { o.ClientOpts = []kgo.Opt{kgo.BrokerMaxWriteBytes(10)} }, "ClientOpts"},
	} {
		o := good
		o.Topics.Retry = append([]string(nil), good.Topics.Retry...) // cases may change it
		c.mod(&o)
		if _, err := NewConsumer(o); err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("err = %v, want %q and no secret", err, c.want)
		}
	}
	_, err := NewRedriveSource(context.Background(), RedriveSourceOptions{Brokers: []string{"u:Pw-s3cr3t@127.0.0.1:1"}, DLQ: "d", Group: "g"})
	if err == nil || strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("NewRedriveSource with user:password@ in a seed: %v", err)
	}
	if got := strings.Join(NewTopics("orders", nil).All(), ","); got != "orders,orders-retry-10s,orders-retry-1m,orders-retry-10m,orders-dlq" {
		t.Errorf("topics %s", got)
	}
}

// TestPausedPartitionDoesNotBlockOthers: a retry stage waits for a record
// that is not due by pausing its partition, not by sleeping, so a record
// due sooner on another partition of the same retry topic is handled first.
func TestPausedPartitionDoesNotBlockOthers(t *testing.T) {
	// Two keys the client's default (murmur2) partitioner puts on different
	// partitions of a two-partition topic.
	part := kgo.StickyKeyPartitioner(nil).ForTopic("any")
	slowKey, fastKey := "", ""
	for i := 0; fastKey == "" && i < 100; i++ {
		k := fmt.Sprintf("k%d", i)
		switch p := part.Partition(&kgo.Record{Key: []byte(k)}, 2); {
		case slowKey == "" && p == 0:
			slowKey = k
		case slowKey != "" && p == 1:
			fastKey = k
		}
	}
	var (
		mu   sync.Mutex
		done = map[string]time.Time{}
		both = make(chan struct{})
	)
	h := func(ctx context.Context, payload []byte) error {
		d, _ := retry.DeliveryFrom(ctx)
		if d.Attempt == 1 {
			wait, _ := time.ParseDuration(string(payload))
			return retry.After(errors.New("later"), wait)
		}
		mu.Lock()
		defer mu.Unlock()
		done[d.ID] = time.Now()
		if len(done) == 2 {
			close(both)
		}
		return nil
	}
	p := start(t, brokertest.Setup{Name: uniqueName(t), Handler: h, Tiers: broker.Tiers{200 * time.Millisecond, 2 * time.Second},
		Policy: &retry.Policy{MaxAttempts: 2, Schedule: backoff.Constant(time.Millisecond), MaxAfter: 10 * time.Second}}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Both wait in the 2s retry topic: slow until +1.5s, fast until +0.3s.
	if err := Publish(ctx, p.cl, p.topics.Main, "slow", []byte(slowKey), []byte("1500ms")); err != nil {
		t.Fatal(err)
	}
	if err := Publish(ctx, p.cl, p.topics.Main, "fast", []byte(fastKey), []byte("300ms")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-both:
	case <-ctx.Done():
		t.Fatal("retries never ran")
	}
	mu.Lock()
	defer mu.Unlock()
	if !done["fast"].Before(done["slow"]) {
		t.Fatalf("the record due at +0.3s on partition 1 ran after the one due at +1.5s on partition 0 (%v vs %v): the stage blocked instead of pausing one partition",
			done["fast"].Format(time.StampMilli), done["slow"].Format(time.StampMilli))
	}
}

// TestFailedForwardIsNotCommitted: forwards are produced without waiting,
// but the original's offset is committed only after its forward is
// acknowledged. A forward the broker refuses ends the session before any
// commit past it; the next session handles the record again and forwards
// it: a duplicate attempt, never a lost retry.
func TestFailedForwardIsNotCommitted(t *testing.T) {
	var mu sync.Mutex
	attempts := map[int]int{}
	retried := make(chan struct{})
	h := func(ctx context.Context, _ []byte) error {
		d, _ := retry.DeliveryFrom(ctx)
		mu.Lock()
		defer mu.Unlock()
		attempts[d.Attempt]++
		if d.Attempt == 1 {
			return retry.Retryable(errors.New("once"))
		}
		if attempts[2] == 1 {
			close(retried)
		}
		return nil
	}
	name := uniqueName(t)
	p := start(t, brokertest.Setup{Name: name, Handler: h, Policy: brokertest.Policy(), Tiers: brokertest.Tiers}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Newer produce requests name topics by ID.
	retryTopic := p.topics.Retry[0]
	mreq := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(retryTopic)
	mreq.Topics = append(mreq.Topics, mt)
	mresp, err := mreq.RequestWith(ctx, p.cl)
	if err != nil || len(mresp.Topics) != 1 {
		t.Fatalf("metadata of %s: %v", retryTopic, err)
	}
	retryID := mresp.Topics[0].TopicID
	var refused atomic.Int32
	p.cluster.ControlKey(kmsg.Produce.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.ProduceRequest)
		if len(req.Topics) == 0 || (req.Topics[0].Topic != retryTopic && req.Topics[0].TopicID != retryID) {
			return nil, nil, false // not a forward: handled as usual
		}
		refused.Add(1)
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.InvalidRecord.Code // not retriable: the forward fails
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true // one refusal, then the control is dropped
	})
	if err := p.Publish(ctx, "f1", []byte("x")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-retried:
	case <-ctx.Done():
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("the retry never ran after a refused forward (attempts %v, refusals %d): lost", attempts, refused.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	if refused.Load() != 1 || attempts[1] != 2 {
		t.Fatalf("refusals %d, attempt 1 ran %d times; want 1 refusal and attempt 1 twice (the original handled again, not committed)", refused.Load(), attempts[1])
	}
}

// TestShutdownDuringHandlerKeepsRecord stops the consumer while a handler
// runs; the handler returns its context's error (as any ctx-aware handler
// does). That failure is the shutdown, not an attempt: the record must be
// neither dead-lettered nor forwarded, and not committed, so the next
// consumer of the group handles it as attempt 1.
func TestShutdownDuringHandlerKeepsRecord(t *testing.T) {
	name := uniqueName(t)
	topics := NewTopics(name, brokertest.Tiers)
	_, addrs := newCluster(t, 1, topics)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	entered := make(chan struct{})
	first, err := NewConsumer(Options{Brokers: addrs, Topics: topics, Group: name, Handler: func(ctx context.Context, _ []byte) error {
		close(entered)
		<-ctx.Done()
		return ctx.Err()
	}})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- first.Run(rctx) }()
	if err := Publish(ctx, cl, topics.Main, "m", nil, []byte("x")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the record never reached the first consumer's handler")
	}
	stop()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}

	got := make(chan retry.Delivery, 1)
	second, err := NewConsumer(Options{Brokers: addrs, Topics: topics, Group: name, Handler: func(ctx context.Context, _ []byte) error {
		d, _ := retry.DeliveryFrom(ctx)
		got <- d
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	rctx2, stop2 := context.WithCancel(ctx)
	done2 := make(chan error, 1)
	go func() { done2 <- second.Run(rctx2) }()
	defer func() { stop2(); <-done2 }()
	select {
	case d := <-got:
		if d.ID != "m" || d.Attempt != 1 {
			t.Fatalf("the next consumer got %+v, want m as attempt 1", d)
		}
	case <-ctx.Done():
		t.Fatal("the record interrupted by the shutdown was committed: the next consumer never saw it")
	}
	// Nothing was forwarded or dead-lettered.
	fctx, fcancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer fcancel()
	rcl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(append([]string{topics.DLQ}, topics.Retry...)...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer rcl.Close()
	if f := rcl.PollFetches(fctx); f.NumRecords() > 0 {
		r := f.Records()[0]
		t.Fatalf("the shutdown produced %d forwards, the first to %s", f.NumRecords(), r.Topic)
	}
}

// TestForeignDueDoesNotStallRetryTopic: a producer that writes
// x-stagger-due in the wrong unit (Unix nanoseconds: a due time tens of
// thousands of years ahead) must not pause a retry partition for ever,
// holding every retry behind it: the record is dead-lettered as malformed.
func TestForeignDueDoesNotStallRetryTopic(t *testing.T) {
	retried := make(chan struct{})
	h := func(ctx context.Context, payload []byte) error {
		d, _ := retry.DeliveryFrom(ctx)
		if d.Attempt == 1 {
			return retry.Retryable(errors.New("once"))
		}
		close(retried)
		return nil
	}
	name := uniqueName(t)
	p := start(t, brokertest.Setup{Name: name, Handler: h, Tiers: broker.Tiers{200 * time.Millisecond},
		Policy: &retry.Policy{MaxAttempts: 2, Schedule: backoff.Constant(200 * time.Millisecond)}}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	now := time.Now()
	bad := &kgo.Record{Topic: p.topics.Main, Key: []byte("k"), Value: []byte("x"), Headers: []kgo.RecordHeader{
		{Key: broker.HeaderID, Value: []byte("bad")},
		{Key: broker.HeaderAttempt, Value: []byte("1")},
		{Key: broker.HeaderDue, Value: fmt.Appendf(nil, "%d", now.Add(time.Second).UnixNano())},
	}}
	if err := p.cl.ProduceSync(ctx, bad).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := Publish(ctx, p.cl, p.topics.Main, "victim", []byte("k"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	dl, err := p.NextDeadLetter(ctx)
	if err != nil {
		t.Fatalf("no dead letter: %v", err)
	}
	if dl.ID != "bad" || dl.Reason != "malformed" || !strings.Contains(dl.Error, broker.HeaderDue) {
		t.Fatalf("dead letter %+v, want bad with reason malformed naming %s", dl, broker.HeaderDue)
	}
	select {
	case <-retried:
	case <-ctx.Done():
		t.Fatal("the victim's retry never ran")
	}
}

// TestTransactionSpansFetchedPolls: a backlog fetched at once is handled in
// transactions of several polls (up to maxTxnPolls), and a consumer killed
// between such a transaction's forward and its commit leaves one committed
// forward of each failed record: the whole transaction is aborted and
// handled again.
func TestTransactionSpansFetchedPolls(t *testing.T) {
	const n, perPoll = 60, 5
	var (
		mu        sync.Mutex
		inTxn     int                // records handled since the last transaction's end
		largest   int                // the most records of one transaction
		attempts  = map[string]int{} // ID → attempt-2 runs
		succeeded = map[string]bool{}
		done      = make(chan struct{})
		left      = n
	)
	fails := func(id string) bool { return id[len(id)-1] == '3' } // b3, b13, …
	h := func(ctx context.Context, _ []byte) error {
		d, _ := retry.DeliveryFrom(ctx)
		mu.Lock()
		defer mu.Unlock()
		inTxn++
		if d.Attempt == 1 && fails(d.ID) {
			return retry.Retryable(errors.New("once"))
		}
		if d.Attempt == 2 {
			attempts[d.ID]++
		}
		if !succeeded[d.ID] {
			succeeded[d.ID] = true
			if left--; left == 0 {
				close(done)
			}
		}
		return nil
	}
	endTxn := func() {
		mu.Lock()
		largest, inTxn = max(largest, inTxn), 0
		mu.Unlock()
	}
	name := uniqueName(t)
	var crashed atomic.Bool
	p := start(t, brokertest.Setup{Name: name, Handler: h, Policy: brokertest.Policy(), Tiers: brokertest.Tiers},
		func(o *Options) {
			o.Transactional, o.TransactionalID, o.MaxPollRecords = true, name, perPoll
			o.afterForward = func() bool {
				endTxn()
				return crashed.CompareAndSwap(false, true)
			}
			o.afterSuccess = func() bool { endTxn(); return false }
		})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// One produce: one batch, fetched whole, so the stage's client holds
	// the polls after the first.
	var rs []*kgo.Record
	for i := range n {
		rs = append(rs, NewRecord(ctx, p.topics.Main, fmt.Sprintf("b%d", i), []byte("k"), []byte("x")))
	}
	if err := p.cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatalf("%d records never succeeded", left)
	}
	// Every forward is committed: each attempt 2 read one.
	got := committedIDs(ctx, t, p, p.topics.Retry[0], "b53")
	mu.Lock()
	defer mu.Unlock()
	if largest <= perPoll {
		t.Errorf("the largest transaction handled %d records, want more than a poll's %d", largest, perPoll)
	}
	if !crashed.Load() {
		t.Error("no transaction forwarded")
	}
	for i := range n {
		id := fmt.Sprintf("b%d", i)
		if want := map[bool]int{true: 1}[fails(id)]; got[id] != want {
			t.Errorf("committed forwards of %s: %d, want %d", id, got[id], want)
		}
		if fails(id) && attempts[id] != 1 {
			t.Errorf("attempt 2 of %s ran %d times, want 1", id, attempts[id])
		}
	}
}
