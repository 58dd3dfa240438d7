package kafka

import (
	"context"
	"errors"
	"maps"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/staggerhq/stagger/broker"
)

func readyOffsets(t *tracker) map[int32]int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[int32]int64{}
	for p, o := range t.ready {
		out[p] = o.Offset
	}
	return out
}

// TestTrackerCommitsInPollOrder: a poll's offsets become committable only
// when its forwards and every earlier poll's are acknowledged; after a
// failed forward nothing more becomes committable.
func TestTrackerCommitsInPollOrder(t *testing.T) {
	tr := newTracker("orders")
	p1 := tr.open()
	p1.offsets[0] = kgo.EpochOffset{Offset: 10}
	tr.forward(p1)
	tr.seal(p1)
	p2 := tr.open()
	p2.offsets[0] = kgo.EpochOffset{Offset: 20}
	p2.offsets[1] = kgo.EpochOffset{Offset: 5}
	tr.forward(p2)
	tr.seal(p2)
	tr.forwarded(p2, nil)
	if got := readyOffsets(tr); len(got) != 0 {
		t.Fatalf("committable %v while poll 1's forward is in flight", got)
	}
	p3 := tr.open() // not sealed: still being handled
	p3.offsets[0] = kgo.EpochOffset{Offset: 30}
	tr.forwarded(p1, nil)
	if got, want := readyOffsets(tr), map[int32]int64{0: 20, 1: 5}; !maps.Equal(got, want) {
		t.Fatalf("committable %v, want %v (polls 1 and 2, not the unsealed poll 3)", got, want)
	}
	tr.forward(p3)
	tr.seal(p3)
	p4 := tr.open()
	p4.offsets[0] = kgo.EpochOffset{Offset: 40}
	tr.seal(p4) // successes only, but behind poll 3
	tr.forwarded(p3, errors.New("refused"))
	if got, want := readyOffsets(tr), map[int32]int64{0: 20, 1: 5}; !maps.Equal(got, want) {
		t.Fatalf("committable %v after a failed forward, want still %v", got, want)
	}
	if err := tr.wait(context.Background(), 100); err == nil {
		t.Fatal("wait after a failed forward returned nil, want the forward's error")
	}
}

// TestTrackerHaltedDrainReturns: after a crash or a failure the session
// halts its tracker before closing the client; the close's revoke callback
// must neither wait for forwards in flight nor commit.
func TestTrackerHaltedDrainReturns(t *testing.T) {
	tr := newTracker("orders")
	p := tr.open()
	p.offsets[0] = kgo.EpochOffset{Offset: 10}
	tr.forward(p) // never acknowledged
	tr.seal(p)
	tr.halt()
	done := make(chan error, 1)
	go func() { done <- tr.drain(context.Background(), nil, nil, nil) }() // a nil client: any commit would panic
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("drain of a halted tracker waited for a forward")
	}
}

// TestTrackerKeepsOffsetsOfAFailedCommit: a commit that fails, or that the
// session's end cuts short, puts its offsets back, so that the final drain
// commits them (before, they were dropped, and the partition's next owner
// handled those records again); an offset that became committable since
// is kept.
func TestTrackerKeepsOffsetsOfAFailedCommit(t *testing.T) {
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1")) // no group: every commit fails
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	tr := newTracker("orders")
	p := tr.open()
	p.offsets[0] = kgo.EpochOffset{Offset: 10}
	p.offsets[1] = kgo.EpochOffset{Offset: 7}
	tr.seal(p)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := tr.commit(ctx, cl, nil, nil); err == nil {
		t.Fatal("commit without a group returned nil")
	}
	if got, want := readyOffsets(tr), map[int32]int64{0: 10, 1: 7}; !maps.Equal(got, want) {
		t.Fatalf("committable after a failed commit %v, want %v", got, want)
	}
	// A poll sealed while a commit of older offsets is in flight: the
	// failed commit must not put partition 0 back to 10.
	tr.mu.Lock()
	offs := tr.ready
	tr.ready = nil
	tr.mu.Unlock()
	p2 := tr.open()
	p2.offsets[0] = kgo.EpochOffset{Offset: 20}
	tr.seal(p2)
	tr.restore(offs, false, false)
	if got, want := readyOffsets(tr), map[int32]int64{0: 20, 1: 7}; !maps.Equal(got, want) {
		t.Fatalf("committable after restoring behind a newer poll %v, want %v", got, want)
	}
	// Partition 1 moved to another member after its commit failed: its
	// offset must not be committed later.
	tr.forget([]int32{1})
	if got, want := readyOffsets(tr), map[int32]int64{0: 20}; !maps.Equal(got, want) {
		t.Fatalf("committable after forgetting partition 1: %v, want %v", got, want)
	}
}

// TestWaitDue: a retry stage waits in place only for a record due within
// min(fetch wait, waitInPlace), and never returns before its due time.
func TestWaitDue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &Consumer{}
		p := &pauser{maxWait: 500 * time.Millisecond}
		defer p.w.Stop()
		ctx := context.Background()
		start := time.Now()
		if c.waitDue(ctx, p, start.Add(waitInPlace+time.Millisecond)) || time.Since(start) != 0 {
			t.Fatal("waited for a record due beyond waitInPlace: it must pause its partition")
		}
		if !c.waitDue(ctx, p, start.Add(-time.Second)) || time.Since(start) != 0 {
			t.Fatal("a record already due was not handled at once")
		}
		due := start.Add(3 * time.Millisecond)
		if !c.waitDue(ctx, p, due) || time.Now().Before(due) {
			t.Fatalf("waitDue returned at %v, before the due time %v", time.Since(start), due.Sub(start))
		}
		p.maxWait = time.Millisecond // a stage whose fetch wait is shorter still
		if c.waitDue(ctx, p, time.Now().Add(2*time.Millisecond)) {
			t.Fatal("waited in place longer than the stage's fetch wait")
		}
		cctx, cancel := context.WithCancel(ctx)
		p.maxWait = time.Second
		go func() { time.Sleep(time.Millisecond); cancel() }()
		if c.waitDue(cctx, p, time.Now().Add(5*time.Millisecond)) {
			t.Fatal("waitDue reported the due time reached after its context ended")
		}
	})
}

// TestSessionEndDoesNotReorderCommits: a commit in flight when the session
// ends is finished, not abandoned. The client gives up a request whose
// context ends by closing its connection, but the broker may still apply
// it; the final drain's commit goes out on a new connection and can be
// applied first, and the abandoned, older commit would then move the
// partition back: its next owner would handle again records already
// handled. The broker here holds the first commit until the second one
// arrives (or, when none can arrive before the first is answered, for a
// while), so the order does not depend on the scheduler.
func TestSessionEndDoesNotReorderCommits(t *testing.T) {
	topics := NewTopics(uniqueName(t), broker.Tiers{time.Second})
	cluster, addrs := newCluster(t, 1, topics)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	group := uniqueName(t) + "-g"
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topics.Main),
		kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topics.Main, Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	for got := 0; got == 0; { // joined: the group's commits are accepted
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatal("no record polled: the client did not join its group")
		}
		got = fs.NumRecords()
	}

	var (
		calls                   atomic.Int32
		arrived, second, c1Done = make(chan struct{}), make(chan struct{}), make(chan struct{})
		release                 = make(chan struct{})
	)
	cluster.ControlKey(int16(kmsg.OffsetCommit), func(kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		switch calls.Add(1) {
		case 1:
			close(arrived)
			cluster.SleepControl(func() { <-release })
			close(c1Done)
		case 2:
			close(second)
		}
		return nil, nil, false // applied as usual
	})

	tr := newTracker(topics.Main)
	seal := func(off int64) {
		p := tr.open()
		p.offsets[0] = kgo.EpochOffset{Epoch: -1, Offset: off}
		tr.seal(p)
	}
	seal(5)
	sctx, stop := context.WithCancelCause(ctx)
	loopDone := make(chan struct{})
	go func() { defer close(loopDone); tr.commitLoop(sctx, cl, stop, nil, nil) }()
	select {
	case <-arrived:
	case <-ctx.Done():
		t.Fatal("the commit loop's commit never reached the broker")
	}
	seal(10)
	stop(errSessionEnded) // shutdown while the commit of 5 is in flight
	drained := make(chan error, 1)
	go func() { drained <- tr.drain(ctx, cl, nil, nil) }()
	select {
	case <-second: // the drain's commit overtook the first one
	case <-time.After(time.Second): // it waits for the first one's answer
	}
	close(release)
	<-c1Done
	if err := <-drained; err != nil {
		t.Fatalf("drain: %v", err)
	}
	<-loopDone
	offs, err := kadm.NewClient(cl).FetchOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := offs.Lookup(topics.Main, 0); !ok || o.At != 10 {
		t.Fatalf("committed offset %+v (found %v), want 10: an older commit was applied after a newer one", o, ok)
	}
}
