package queuetest

import (
	"context"
	"errors"
	"testing"

	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/retry"
)

// EnqueueTx enqueues jobs with the store's EnqueueTx inside a new
// transaction on the store's database, then commits it (commit true) or
// rolls it back, returning EnqueueTx's results or the first error.
type EnqueueTx func(ctx context.Context, q *queue.Queue, commit bool, jobs ...queue.NewJob) ([]queue.Inserted, error)

// NewTxStore returns a fresh store for one test and its EnqueueTx.
type NewTxStore func(t *testing.T) (queue.Store, EnqueueTx)

// RunEnqueueTx is the conformance suite of transactional enqueue: a
// rolled-back transaction leaves no job, a committed one a claimable job;
// an existing ID is returned unchanged; an invalid job writes nothing.
func RunEnqueueTx(t *testing.T, newStore NewTxStore) {
	for name, fn := range map[string]func(*testing.T, queue.Store, EnqueueTx){
		"RollbackLeavesNoJob":  testTxRollback,
		"CommitMakesClaimable": testTxCommit,
		"ExistingIDUnchanged":  testTxExisting,
		"InvalidWritesNothing": testTxInvalid,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, tx := newStore(t)
			fn(t, s, tx)
		})
	}
}

func testTxRollback(t *testing.T, s queue.Store, enqueueTx EnqueueTx) {
	e := newEnv(t, s, nil)
	res, err := enqueueTx(e.ctx, e.q, false, queue.NewJob{ID: "rolled", Payload: []byte("x")}, queue.NewJob{ID: "back"})
	if err != nil || len(res) != 2 || !res[0].Created || !res[1].Created {
		t.Fatalf("EnqueueTx = %+v, %v", res, err)
	}
	for _, id := range []string{"rolled", "back"} {
		if _, err := e.q.Get(e.ctx, id); !errors.Is(err, queue.ErrNotFound) {
			t.Fatalf("after rollback Get(%q) = %v, want ErrNotFound", id, err)
		}
	}
	if j := e.runOnce(ok); j != nil {
		t.Fatalf("a rolled-back job was claimed: %+v", j)
	}
	// The ID is free: a later enqueue creates it.
	e.enqueue(queue.NewJob{ID: "rolled"})
}

func testTxCommit(t *testing.T, s queue.Store, enqueueTx EnqueueTx) {
	e := newEnv(t, s, nil)
	res, err := enqueueTx(e.ctx, e.q, true, queue.NewJob{ID: "c", Payload: []byte("hello"), MaxAttempts: 3})
	if err != nil || len(res) != 1 || !res[0].Created || res[0].Job.State != queue.Pending || res[0].Job.Deadline != Start+int64(e.q.Config().Policy.Timeout.Milliseconds()) {
		t.Fatalf("EnqueueTx = %+v, %v", res, err)
	}
	var got string
	j := e.runOnce(func(_ context.Context, p []byte) error { got = string(p); return nil })
	if j == nil || j.ID != "c" || j.State != queue.Done || j.Attempts != 1 || got != "hello" {
		t.Fatalf("RunOnce after commit = %+v (payload %q)", j, got)
	}
}

func testTxExisting(t *testing.T, s queue.Store, enqueueTx EnqueueTx) {
	e := newEnv(t, s, nil)
	e.enqueue(queue.NewJob{ID: "old", Payload: []byte("first"), MaxAttempts: 2})
	e.runOnce(fail(retry.Retryable(errBoom))) // an attempt spent
	res, err := enqueueTx(e.ctx, e.q, true, queue.NewJob{ID: "old", Payload: []byte("second"), MaxAttempts: 9})
	if err != nil || len(res) != 1 || res[0].Created || string(res[0].Job.Payload) != "first" || res[0].Job.Attempts != 1 || res[0].Job.MaxAttempts != 2 {
		t.Fatalf("EnqueueTx of an existing ID = %+v, %v", res, err)
	}
}

func testTxInvalid(t *testing.T, s queue.Store, enqueueTx EnqueueTx) {
	e := newEnv(t, s, nil)
	_, err := enqueueTx(e.ctx, e.q, true, queue.NewJob{ID: "fine"}, queue.NewJob{ID: ""})
	if !errors.Is(err, queue.ErrInvalid) || err.Error() != "job 2: queue: invalid: id must not be empty" {
		t.Fatalf("EnqueueTx with an invalid job = %v", err)
	}
	if _, err := e.q.Get(e.ctx, "fine"); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("the valid job of a refused call was written: %v", err)
	}
}
