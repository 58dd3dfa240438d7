package kafka

import (
	"context"
	"errors"
	"maps"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
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
