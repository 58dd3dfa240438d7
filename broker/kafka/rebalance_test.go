package kafka

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/retry"
)

// handled counts, per message and attempt, the handler runs of the
// consumers sharing a group, and which consumer ran them.
type handled struct {
	mu     sync.Mutex
	runs   map[string]map[int]int // id → attempt → runs
	firsts int                    // (id, attempt) pairs run at least once
	by     map[string]int         // consumer → runs
	who    map[string][]string    // id → "consumer:attempt@topic/partition/offset" per run
	change chan struct{}          // closed and replaced on every run
}

func newHandled() *handled {
	return &handled{runs: map[string]map[int]int{}, by: map[string]int{}, who: map[string][]string{}, change: make(chan struct{})}
}

// handler is consumer name's handler: attempt 1 of every tenth message
// fails transiently; everything else succeeds after a short piece of work
// (so that a poll's records are still being handled when the group
// rebalances).
func (h *handled) handler(name string) retry.Handler {
	return func(ctx context.Context, payload []byte) error {
		d, _ := retry.DeliveryFrom(ctx)
		time.Sleep(time.Millisecond) // work, not a timing assertion
		h.mu.Lock()
		if h.runs[d.ID] == nil {
			h.runs[d.ID] = map[int]int{}
		}
		if h.runs[d.ID][d.Attempt]++; h.runs[d.ID][d.Attempt] == 1 {
			h.firsts++
		}
		h.by[name]++
		h.who[d.ID] = append(h.who[d.ID], fmt.Sprintf("%s:%d@%s", name, d.Attempt, time.Now().Format("05.000")))
		close(h.change)
		h.change = make(chan struct{})
		h.mu.Unlock()
		if d.Attempt == 1 && string(payload) == "fail-once" {
			return retry.Retryable(errors.New("transient"))
		}
		return nil
	}
}

// waitFor blocks until cond (called under the lock) holds or ctx ends.
func (h *handled) waitFor(ctx context.Context, what string, cond func() bool) error {
	for {
		h.mu.Lock()
		ok, ch := cond(), h.change
		h.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		}
	}
}

// TestRebalanceNeitherLosesNorDuplicates forces rebalances while a stage's
// polls are in flight, with records arriving all along: a second consumer
// joins the group (each stage's partitions are split between the two), and
// later the first one leaves (its partitions move to the second). Before a
// partition moves, the member that loses it finishes the polls it holds,
// waits for their forwards and commits (OnPartitionsRevoked); the member
// that gains it starts at that commit. So every message's every attempt
// runs exactly once: none lost, none duplicated by the handover.
func TestRebalanceNeitherLosesNorDuplicates(t *testing.T) { testRebalance(t, false) }

// TestRebalanceTransactional is the same handover in transactional mode. A
// transaction that a rebalance overtakes is aborted (GroupTransactSession),
// so its records are polled again by their new owner: an attempt may run
// twice, but none is lost, and a retry is forwarded once (the aborted
// forward is never read), so no message runs more attempts than it needs.
func TestRebalanceTransactional(t *testing.T) { testRebalance(t, true) }

func testRebalance(t *testing.T, transactional bool) {
	const (
		parts      = 2
		sentinelID = "sentinel-"
	)
	topics := NewTopics(uniqueName(t), broker.Tiers{50 * time.Millisecond})
	_, addrs := newCluster(t, parts, topics)
	producer, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(producer.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	record := func(id string, part int32, value string) *kgo.Record {
		return &kgo.Record{Topic: topics.Main, Partition: part, Key: []byte(id), Value: []byte(value),
			Headers: []kgo.RecordHeader{{Key: broker.HeaderID, Value: []byte(id)}}}
	}

	// Records arrive all along, one per partition every 2 ms (about the
	// rate the consumers handle them), until the producer is stopped; every
	// tenth fails once.
	var produced int // written by the producer goroutine, read after it ended
	pctx, stopProducer := context.WithCancel(ctx)
	producerDone := make(chan error, 1)
	go func() {
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-pctx.Done():
				producerDone <- nil
				return
			case <-tick.C:
			}
			var rs []*kgo.Record
			for p := range int32(parts) {
				v := "ok"
				if produced%10 == 0 {
					v = "fail-once"
				}
				rs = append(rs, record(fmt.Sprintf("m%d", produced), p, v))
				produced++
			}
			if err := producer.ProduceSync(ctx, rs...).FirstErr(); err != nil {
				producerDone <- err
				return
			}
		}
	}()
	stopProducing := func() {
		stopProducer()
		if err := <-producerDone; err != nil {
			t.Fatal(err)
		}
	}

	var logs syncBuffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("consumer logs:\n%s", logs.String())
		}
	})
	h := newHandled()
	policy := &retry.Policy{MaxAttempts: 2, Schedule: backoff.Constant(50 * time.Millisecond)}
	run := func(name string) (stop func()) {
		c, err := NewConsumer(Options{Brokers: addrs, Topics: topics, Group: "g", Handler: h.handler(name), Policy: policy,
			Transactional: transactional, TransactionalID: "rebalance-" + name,
			MaxPollRecords: 20, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})).With("consumer", name)})
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- c.Run(cctx) }()
		var once sync.Once
		return func() {
			once.Do(func() {
				cancel()
				if err := <-done; !errors.Is(err, context.Canceled) {
					t.Errorf("%s: Run returned %v, want context.Canceled", name, err)
				}
			})
		}
	}
	total := func() (runs int) {
		for _, a := range h.runs {
			for _, r := range a {
				runs += r
			}
		}
		return runs
	}
	fail := func(err error) {
		stopProducer()
		h.mu.Lock()
		defer h.mu.Unlock()
		t.Fatalf("%v: %d runs (a %d, b %d)", err, total(), h.by["a"], h.by["b"])
	}

	stopA := run("a")
	defer stopA()
	if err := h.waitFor(ctx, "a to start", func() bool { return h.by["a"] >= 100 }); err != nil {
		fail(err)
	}
	stopB := run("b") // joins: the group rebalances with a's polls in flight
	defer stopB()
	if err := h.waitFor(ctx, "b to take over a partition", func() bool { return h.by["b"] >= 100 }); err != nil {
		fail(err)
	}
	var aBefore int
	h.mu.Lock()
	aBefore = h.by["a"]
	h.mu.Unlock()
	if err := h.waitFor(ctx, "a to go on after the rebalance", func() bool { return h.by["a"] >= aBefore+100 }); err != nil {
		fail(err)
	}
	stopA() // leaves: its partitions move to b
	h.mu.Lock()
	bBefore := h.by["b"]
	h.mu.Unlock()
	if err := h.waitFor(ctx, "b to go on alone", func() bool { return h.by["b"] >= bBefore+200 }); err != nil {
		fail(err)
	}
	stopProducing()
	// A sentinel on each partition, behind everything: once b has handled
	// both, b has read every partition from where it was committed, so any
	// record handed over without a commit has run twice by now.
	if err := producer.ProduceSync(ctx, record(sentinelID+"0", 0, "ok"), record(sentinelID+"1", 1, "ok")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	want := produced + (produced+9)/10 + parts // every message once, every tenth twice (its retry), the sentinels
	if err := h.waitFor(ctx, "every attempt and both sentinels", func() bool {
		return h.firsts >= want && h.runs[sentinelID+"0"] != nil && h.runs[sentinelID+"1"] != nil
	}); err != nil {
		fail(err)
	}

	h.mu.Lock()
	defer h.mu.Unlock()
	dups := 0
	for i := range produced {
		id := fmt.Sprintf("m%d", i)
		wantRuns := map[int]int{1: 1}
		if i%10 == 0 {
			wantRuns[2] = 1
		}
		got := h.runs[id]
		if !transactional {
			if fmt.Sprint(got) != fmt.Sprint(wantRuns) {
				t.Errorf("%s: runs per attempt %v, want %v (%v)", id, got, wantRuns, h.who[id])
			}
			continue
		}
		// Transactional: at least the attempts it needs, and no more.
		for a := range wantRuns {
			if got[a] < 1 {
				t.Errorf("%s: attempt %d never ran (runs %v): lost", id, a, got)
			}
			dups += got[a] - 1
		}
		if len(got) != len(wantRuns) {
			t.Errorf("%s: runs per attempt %v, want attempts %v only: a retry was forwarded twice", id, got, wantRuns)
		}
	}
	if got := total(); !transactional && got != want {
		t.Errorf("%d handler runs, want %d", got, want)
	}
	t.Logf("%d messages; runs by a %d, by b %d; attempts run again after an aborted transaction: %d", produced, h.by["a"], h.by["b"], dups)
}

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
