// Package queuetest is the conformance suite every queue.Store must pass:
// the store's atomic transitions (Insert, Claim, Record, Extend, Bury,
// Requeue, Stats) and, on top of them, the contract of queue.Queue
// driven by a fake clock. A store module calls Run from its tests.
package queuetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retry/drivertest"
)

// NewStore returns a fresh, empty store for one test; the store must be
// closed (and its database objects dropped) by t.Cleanup.
type NewStore func(t *testing.T) queue.Store

// Run runs every conformance test against stores made by newStore. Tests
// run in parallel with each other, each on its own store.
func Run(t *testing.T, newStore NewStore) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s queue.Store)
	}{
		{"StoreInsert", testStoreInsert},
		{"StoreClaimOrderAndEligibility", testStoreClaim},
		{"StoreRecordFencing", testStoreRecord},
		{"StoreExtend", testStoreExtend},
		{"StoreExpiredLeaseNotExtended", testLeaseExpiredNotExtended},
		{"StoreBury", testStoreBury},
		{"StoreListAndGet", testStoreList},
		{"StoreRequeue", testStoreRequeue},
		{"StoreStats", testStoreStats},
		{"StoreStatsDueToDie", testStoreStatsDueToDie},
		{"StoreConcurrentClaims", testStoreConcurrentClaims},
		{"StoreRecordAndClaim", testStoreRecordAndClaim},
		{"StorePurge", testStorePurge},
		{"StoreLimitsInFlight", testLimitsInFlight},
		{"StoreLimitsRate", testLimitsRate},
		{"StoreLimitsConcurrent", testLimitsConcurrent},
		{"QueuePurge", testQueuePurge},
		{"EnqueueIdempotent", testEnqueueIdempotent},
		{"EnqueueValidation", testEnqueueValidation},
		{"RunOnceNothingDue", testNothingDue},
		{"RunOnceSuccess", testSuccess},
		{"RetryDelayRatios", testRetryDelay},
		{"AfterRaisesDelay", testAfter},
		{"DeadlineEquality", testDeadline},
		{"DeadlineCheckedAtStart", testDeadlineAtStart},
		{"Exhausted", testExhausted},
		{"Permanent", testPermanent},
		{"Snooze", testSnooze},
		{"SnoozeBounded", testSnoozeBounded},
		{"UnknownStaysLeased", testUnknown},
		{"ErrorTextStorable", testErrorText},
		{"CrashAfterClaimSpendsAttempt", testCrash},
		{"ClockBackwards", testClockBackwards},
		{"LeaseLost", testLeaseLost},
		{"ShutdownReleases", testShutdownRelease},
		{"Requeue", testRequeue},
		{"Redrive", testRedrive},
		{"NamedQueues", testNamedQueues},
		{"TraceContext", testTrace},
		{"DeadList", testDeadList},
		{"Stats", testStats},
		{"RunOnceBuriesBeforeClaiming", testRunOnceBuries},
		{"ConcurrentRunOnce", testConcurrentRunOnce},
		{"WorkerQueues", testWorkerQueues},
		{"FleetLimitPausedWorker", testFleetPausedWorker},
		{"StatsByQueue", testStatsByQueue},
	}
	for _, a := range adminTests {
		tests = append(tests, struct {
			name string
			fn   func(t *testing.T, s queue.Store)
		}{a.name, func(t *testing.T, s queue.Store) {
			if err := a.check(s); err != nil {
				t.Fatal(err)
			}
		}})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newStore(t))
		})
	}
}

// env is a queue with a fake clock and a fixed retry ratio.
type env struct {
	t     *testing.T
	s     queue.Store
	q     *queue.Queue
	clock *Clock
	ctx   context.Context
}

// base 100ms, cap 1000ms, ratio 0.5: 50 ms after the first failure.
func newEnv(t *testing.T, s queue.Store, mod func(*queue.Config)) *env {
	t.Helper()
	clock := NewClock(Start)
	cfg := queue.Config{
		Policy: &retry.Policy{Schedule: backoff.Ratio{Base: 100 * time.Millisecond, Cap: time.Second}, Rand: FixedRatio(0.5)},
		Lease:  30 * time.Second, Now: clock.Now,
	}
	if mod != nil {
		mod(&cfg)
	}
	q, err := queue.New(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, s: s, q: q, clock: clock, ctx: context.Background()}
}

func (e *env) enqueue(j queue.NewJob) queue.Job {
	e.t.Helper()
	job, created, err := e.q.Enqueue(e.ctx, j)
	if err != nil {
		e.t.Fatalf("Enqueue(%q): %v", j.ID, err)
	}
	if !created {
		e.t.Fatalf("Enqueue(%q): not created", j.ID)
	}
	return job
}

func (e *env) get(id string) queue.Job {
	e.t.Helper()
	j, err := e.q.Get(e.ctx, id)
	if err != nil {
		e.t.Fatalf("Get(%q): %v", id, err)
	}
	return j
}

// runOnce runs one job with h and fails the test on an unexpected error.
func (e *env) runOnce(h retry.Handler) *queue.Job {
	e.t.Helper()
	j, err := e.q.RunOnce(e.ctx, h)
	if err != nil {
		e.t.Fatalf("RunOnce: %v", err)
	}
	return j
}

func fail(err error) retry.Handler {
	return func(context.Context, []byte) error { return err }
}

func ok(context.Context, []byte) error { return nil }

var errBoom = errors.New("boom")

// expect compares the fields of got that the contract fixes.
func expect(t *testing.T, what string, got queue.Job, state queue.State, attempts int, availableAt int64, reason queue.DeadReason) {
	t.Helper()
	if got.State != state || got.Attempts != attempts || got.DeadReason != reason || (availableAt >= 0 && got.AvailableAt != availableAt) {
		t.Fatalf("%s: got state=%s attempts=%d available_at=%d reason=%q; want state=%s attempts=%d available_at=%d reason=%q",
			what, got.State, got.Attempts, got.AvailableAt, got.DeadReason, state, attempts, availableAt, reason)
	}
}

// row is a complete pending row for direct store tests.
func row(id string, availableAt, deadline int64, maxAttempts int) queue.Job {
	return queue.Job{
		ID: id, Queue: queue.DefaultQueue, Payload: []byte("p-" + id), MaxAttempts: maxAttempts, AvailableAt: availableAt,
		Deadline: deadline, State: queue.Pending, CreatedAt: Start, UpdatedAt: Start,
	}
}

func insert(t *testing.T, s queue.Store, jobs ...queue.Job) {
	t.Helper()
	res, err := s.Insert(context.Background(), jobs)
	if err != nil {
		t.Fatalf("Insert: %v", err)
	}
	for i, r := range res {
		if !r.Created {
			t.Fatalf("Insert: %q not created", jobs[i].ID)
		}
	}
}

func ids(jobs []queue.Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

// ---- store transitions ----

func testStoreInsert(t *testing.T, s queue.Store) {
	ctx := context.Background()
	bin := []byte{0, 1, 2, 0xff, 0xfe, '\n', 0}
	big := bytes.Repeat([]byte("x"), 256<<10)
	a, b, c := row("a", Start, Start+1000, 3), row("b", Start, Start+1000, 3), row("c", Start, Start+1000, 3)
	a.Payload, b.Payload, c.Payload = bin, big, nil
	res, err := s.Insert(ctx, []queue.Job{a, b, c, row("a", Start+5, Start+9999, 7)})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 4 || !res[0].Created || !res[1].Created || !res[2].Created || res[3].Created {
		t.Fatalf("created flags: %+v", res)
	}
	if !bytes.Equal(res[3].Job.Payload, bin) || res[3].Job.Deadline != Start+1000 || res[3].Job.MaxAttempts != 3 {
		t.Fatalf("duplicate in one call must return the first row, got %+v", res[3].Job)
	}
	for _, want := range []queue.Job{a, b, c} {
		got, err := s.Get(ctx, want.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Payload, want.Payload) || got.State != queue.Pending || got.Attempts != 0 ||
			got.MaxAttempts != 3 || got.AvailableAt != Start || got.Deadline != Start+1000 || got.CreatedAt != Start {
			t.Fatalf("Get(%s) = %+v", want.ID, got)
		}
	}
	// Spend an attempt, then re-insert: nothing is reset.
	if _, err := s.Claim(ctx, queue.DefaultQueue, Start, Start+100, 1); err != nil {
		t.Fatal(err)
	}
	res, err = s.Insert(ctx, []queue.Job{row("a", Start+50, Start+50000, 9), row("d", Start, Start+1000, 1)})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Created || res[0].Job.Attempts != 1 || res[0].Job.Deadline != Start+1000 || res[0].Job.State != queue.Leased || !res[1].Created {
		t.Fatalf("re-insert reset the job: %+v", res)
	}
	if _, err := s.Get(ctx, "nope"); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("Get(missing) = %v, want ErrNotFound", err)
	}
}

func testStoreClaim(t *testing.T, s queue.Store) {
	ctx := context.Background()
	insert(t, s,
		row("late", Start+10, Start+1000, 3),
		row("b", Start, Start+1000, 3),
		row("a", Start, Start+1000, 3),
		row("early", Start-5, Start+1000, 3),
		row("future", Start+500, Start+1000, 3),
		row("spent", Start, Start+1000, 0), // attempts >= max: never claimable
		row("expired", Start-10, Start, 3), // deadline == now: never claimable
	)
	got, err := s.Claim(ctx, queue.DefaultQueue, Start+10, Start+110, 3)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"early", "a", "b"}; !slices.Equal(ids(got), want) {
		t.Fatalf("claim order = %v, want %v", ids(got), want)
	}
	for _, j := range got {
		if j.State != queue.Leased || j.Attempts != 1 || j.LeaseUntil != Start+110 || j.AvailableAt != Start+110 || j.UpdatedAt != Start+10 {
			t.Fatalf("claimed row %+v", j)
		}
		if !bytes.Equal(j.Payload, []byte("p-"+j.ID)) {
			t.Fatalf("claimed payload %q", j.Payload)
		}
	}
	got, err = s.Claim(ctx, queue.DefaultQueue, Start+10, Start+110, 10)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"late"}; !slices.Equal(ids(got), want) {
		t.Fatalf("second claim = %v, want %v", ids(got), want)
	}
	// An expired lease is claimable again, with the next attempt.
	got, err = s.Claim(ctx, queue.DefaultQueue, Start+110, Start+220, 10)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a", "b", "early", "late"}; !slices.Equal(ids(got), want) {
		t.Fatalf("after lease expiry = %v, want %v", ids(got), want)
	}
	for _, j := range got {
		if j.Attempts != 2 {
			t.Fatalf("%s: attempts %d after second claim, want 2", j.ID, j.Attempts)
		}
	}
	if got, err = s.Claim(ctx, queue.DefaultQueue, Start+219, Start+300, 10); err != nil || len(got) != 0 {
		t.Fatalf("claim of held leases = %v, %v", ids(got), err)
	}
}

func testStoreRecord(t *testing.T, s queue.Store) {
	ctx := context.Background()
	insert(t, s, row("d", Start, Start+10000, 5), row("p", Start, Start+10000, 5),
		row("x", Start, Start+10000, 5), row("l", Start, Start+10000, 5))
	if _, err := s.Claim(ctx, queue.DefaultQueue, Start, Start+100, 10); err != nil {
		t.Fatal(err)
	}
	outs := []queue.Outcome{
		{ID: "d", Attempt: 1, State: queue.Done, Now: Start + 1},
		{ID: "p", Attempt: 1, State: queue.Pending, AvailableAt: Start + 500, LastError: "try later", Now: Start + 2},
		{ID: "x", Attempt: 1, State: queue.Dead, DeadReason: queue.PermanentFailure, LastError: "bad", Now: Start + 3},
		{ID: "l", Attempt: 1, State: queue.Leased, LastError: "unknown", Now: Start + 4},
		{ID: "d", Attempt: 2, State: queue.Done, Now: Start + 5},       // wrong attempt
		{ID: "missing", Attempt: 1, State: queue.Done, Now: Start + 5}, // no such job
	}
	if err := s.Record(ctx, outs); err != nil {
		t.Fatal(err)
	}
	if want := []bool{true, true, true, true, false, false}; !slices.Equal(applied(outs), want) {
		t.Fatalf("applied = %v, want %v", applied(outs), want)
	}
	d, _ := s.Get(ctx, "d")
	if d.State != queue.Done || d.FinishedAt != Start+1 || d.UpdatedAt != Start+1 || d.LeaseUntil != 0 || d.Attempts != 1 {
		t.Fatalf("done row %+v", d)
	}
	p, _ := s.Get(ctx, "p")
	if p.State != queue.Pending || p.AvailableAt != Start+500 || p.LastError != "try later" || p.LeaseUntil != 0 || p.Attempts != 1 || p.FinishedAt != 0 {
		t.Fatalf("pending row %+v", p)
	}
	x, _ := s.Get(ctx, "x")
	if x.State != queue.Dead || x.DeadReason != queue.PermanentFailure || x.LastError != "bad" || x.FinishedAt != Start+3 || x.LeaseUntil != 0 {
		t.Fatalf("dead row %+v", x)
	}
	l, _ := s.Get(ctx, "l")
	if l.State != queue.Leased || l.LastError != "unknown" || l.LeaseUntil != Start+100 || l.AvailableAt != Start+100 {
		t.Fatalf("leased row %+v", l)
	}
	// A finished job cannot be finished again.
	again := []queue.Outcome{{ID: "d", Attempt: 1, State: queue.Dead, DeadReason: queue.Exhausted, Now: Start + 9}}
	if err := s.Record(ctx, again); err != nil || again[0].Applied {
		t.Fatalf("second outcome for a done job applied=%v err=%v", again[0].Applied, err)
	}
	// A lease taken over by a newer claim fences the old attempt out.
	if _, err := s.Claim(ctx, queue.DefaultQueue, Start+100, Start+200, 10); err != nil { // "l" again, attempt 2
		t.Fatal(err)
	}
	stale := []queue.Outcome{{ID: "l", Attempt: 1, State: queue.Done, Now: Start + 101}}
	if err := s.Record(ctx, stale); err != nil || stale[0].Applied {
		t.Fatalf("stale attempt applied=%v err=%v", stale[0].Applied, err)
	}
	if l, _ = s.Get(ctx, "l"); l.State != queue.Leased || l.Attempts != 2 {
		t.Fatalf("stale outcome changed the row: %+v", l)
	}
}

func applied(outs []queue.Outcome) []bool {
	b := make([]bool, len(outs))
	for i, o := range outs {
		b[i] = o.Applied
	}
	return b
}

func testStoreExtend(t *testing.T, s queue.Store) {
	ctx := context.Background()
	insert(t, s, row("a", Start, Start+10000, 5), row("b", Start, Start+10000, 5))
	if _, err := s.Claim(ctx, queue.DefaultQueue, Start, Start+100, 10); err != nil {
		t.Fatal(err)
	}
	leases := []queue.Lease{{ID: "a", Attempt: 1}, {ID: "b", Attempt: 2}, {ID: "zz", Attempt: 1}}
	if err := s.Extend(ctx, leases, Start+50, Start+150); err != nil {
		t.Fatal(err)
	}
	if !leases[0].Held || leases[1].Held || leases[2].Held {
		t.Fatalf("held = %+v", leases)
	}
	a, _ := s.Get(ctx, "a")
	b, _ := s.Get(ctx, "b")
	if a.LeaseUntil != Start+150 || a.AvailableAt != Start+150 || b.LeaseUntil != Start+100 {
		t.Fatalf("after extend a=%+v b=%+v", a, b)
	}
	// The extended lease is not claimable at the old expiry.
	got, err := s.Claim(ctx, queue.DefaultQueue, Start+120, Start+300, 10)
	if err != nil || !slices.Equal(ids(got), []string{"b"}) {
		t.Fatalf("claim after extend = %v, %v; want [b]", ids(got), err)
	}
}

func testStoreBury(t *testing.T, s queue.Store) {
	ctx := context.Background()
	insert(t, s,
		row("last", Start, Start+10000, 1),    // will be claimed and its lease expire
		row("held", Start, Start+10000, 1),    // claimed, lease not expired: untouched
		row("late", Start, Start+100, 5),      // deadline passes
		row("fine", Start, Start+10000, 5),    // untouched
		row("noted", Start, Start+10000, 1),   // last attempt with a recorded error
		row("future", Start+50, Start+100, 5), // deadline passes while scheduled
	)
	// Claimed in (available_at, id) order: fine, held, last, late, noted.
	if c, err := s.Claim(ctx, queue.DefaultQueue, Start, Start+100, 5); err != nil || len(c) != 5 {
		t.Fatal(ids(c), err)
	}
	outs := []queue.Outcome{
		{ID: "fine", Attempt: 1, State: queue.Pending, AvailableAt: Start + 10, Now: Start},
		{ID: "late", Attempt: 1, State: queue.Pending, AvailableAt: Start + 10, Now: Start},
		{ID: "noted", Attempt: 1, State: queue.Leased, LastError: "handler said ???", Now: Start},
	}
	if err := s.Record(ctx, outs); err != nil {
		t.Fatal(err)
	}
	if err := s.Extend(ctx, []queue.Lease{{ID: "held", Attempt: 1}}, Start, Start+5000); err != nil {
		t.Fatal(err)
	}
	n, err := s.Bury(ctx, Start+100, 100)
	if err != nil {
		t.Fatal(err)
	}
	if n != 4 {
		t.Fatalf("Bury moved %d jobs, want 4 (last, late, noted, future)", n)
	}
	for id, want := range map[string]struct {
		state  queue.State
		reason queue.DeadReason
		errMsg string
	}{
		"last":   {queue.Dead, queue.Exhausted, queue.UnknownOutcome},
		"noted":  {queue.Dead, queue.Exhausted, "handler said ???"},
		"late":   {queue.Dead, queue.DeadlineReached, ""},
		"future": {queue.Dead, queue.DeadlineReached, ""},
		"held":   {queue.Leased, "", ""},
		"fine":   {queue.Pending, "", ""},
	} {
		j, err := s.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if j.State != want.state || j.DeadReason != want.reason || (want.errMsg != "" && j.LastError != want.errMsg) {
			t.Fatalf("%s after Bury: %+v, want %+v", id, j, want)
		}
		if j.State == queue.Dead && (j.FinishedAt != Start+100 || j.LeaseUntil != 0) {
			t.Fatalf("%s: buried row %+v", id, j)
		}
	}
	if n, err := s.Bury(ctx, Start+100, 100); err != nil || n != 0 {
		t.Fatalf("second Bury = %d, %v", n, err)
	}
	// Limit is honoured.
	insert(t, s, row("x1", Start, Start+200, 3), row("x2", Start, Start+200, 3), row("x3", Start, Start+200, 3))
	if n, err := s.Bury(ctx, Start+300, 2); err != nil || n != 2 {
		t.Fatalf("Bury(limit 2) = %d, %v", n, err)
	}
}

func testStoreList(t *testing.T, s queue.Store) {
	ctx := context.Background()
	var rows []queue.Job
	for i := range 7 {
		rows = append(rows, row(fmt.Sprintf("j%d", i), Start, Start+1000, 1))
	}
	insert(t, s, rows...)
	if _, err := s.Claim(ctx, queue.DefaultQueue, Start, Start+10, 7); err != nil {
		t.Fatal(err)
	}
	var outs []queue.Outcome
	for _, i := range []int{6, 1, 4, 2} {
		outs = append(outs, queue.Outcome{ID: fmt.Sprintf("j%d", i), Attempt: 1, State: queue.Dead, DeadReason: queue.PermanentFailure, LastError: fmt.Sprintf("e%d", i), Now: Start})
	}
	if err := s.Record(ctx, outs); err != nil {
		t.Fatal(err)
	}
	page, err := s.List(ctx, queue.DefaultQueue, queue.Dead, "", 3)
	if err != nil || !slices.Equal(ids(page), []string{"j1", "j2", "j4"}) {
		t.Fatalf("List page 1 = %v, %v", ids(page), err)
	}
	if page[0].LastError != "e1" || page[0].DeadReason != queue.PermanentFailure {
		t.Fatalf("listed job %+v", page[0])
	}
	page, err = s.List(ctx, queue.DefaultQueue, queue.Dead, "j4", 3)
	if err != nil || !slices.Equal(ids(page), []string{"j6"}) {
		t.Fatalf("List page 2 = %v, %v", ids(page), err)
	}
	page, err = s.List(ctx, queue.DefaultQueue, queue.Leased, "", 10)
	if err != nil || !slices.Equal(ids(page), []string{"j0", "j3", "j5"}) {
		t.Fatalf("List leased = %v, %v", ids(page), err)
	}
}

func testStoreRequeue(t *testing.T, s queue.Store) {
	ctx := context.Background()
	insert(t, s, row("d", Start, Start+1000, 2), row("live", Start, Start+1000, 2))
	if _, err := s.Claim(ctx, queue.DefaultQueue, Start, Start+10, 1); err != nil {
		t.Fatal(err)
	}
	outs := []queue.Outcome{{ID: "d", Attempt: 1, State: queue.Dead, DeadReason: queue.Exhausted, LastError: "last", Now: Start + 1}}
	if err := s.Record(ctx, outs); err != nil || !outs[0].Applied {
		t.Fatal(err)
	}
	j, err := s.Requeue(ctx, "d", 3, Start+9000, Start+2)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != queue.Pending || j.Attempts != 1 || j.MaxAttempts != 4 || j.Deadline != Start+9000 ||
		j.AvailableAt != Start+2 || j.DeadReason != "" || j.FinishedAt != 0 || j.LastError != "last" {
		t.Fatalf("requeued %+v", j)
	}
	if g, _ := s.Get(ctx, "d"); g.MaxAttempts != 4 || g.State != queue.Pending {
		t.Fatalf("stored after requeue %+v", g)
	}
	if _, err := s.Requeue(ctx, "live", 3, Start+9000, Start+2); !errors.Is(err, queue.ErrNotDead) {
		t.Fatalf("Requeue(pending) = %v, want ErrNotDead", err)
	}
	if _, err := s.Requeue(ctx, "nope", 3, Start+9000, Start+2); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("Requeue(missing) = %v, want ErrNotFound", err)
	}
}

func testStoreStats(t *testing.T, s queue.Store) {
	ctx := context.Background()
	insert(t, s,
		row("due1", Start-30, Start+1000, 3), row("due2", Start-10, Start+1000, 3),
		row("sched", Start+50, Start+1000, 3),
		row("l1", Start-100, Start+1000, 3), row("l2", Start-99, Start+1000, 3),
		row("ok", Start-98, Start+1000, 3), row("dx", Start-97, Start+1000, 3),
		row("dd", Start-96, Start+1000, 3), row("dp", Start-95, Start+1000, 3),
	)
	if _, err := s.Claim(ctx, queue.DefaultQueue, Start-30, Start+5, 7); err != nil { // l1 l2 ok dx dd dp due1
		t.Fatal(err)
	}
	outs := []queue.Outcome{
		{ID: "due1", Attempt: 1, State: queue.Pending, AvailableAt: Start - 30, Now: Start - 90},
		{ID: "ok", Attempt: 1, State: queue.Done, Now: Start - 90},
		{ID: "dx", Attempt: 1, State: queue.Dead, DeadReason: queue.Exhausted, Now: Start - 90},
		{ID: "dd", Attempt: 1, State: queue.Dead, DeadReason: queue.DeadlineReached, Now: Start - 90},
		{ID: "dp", Attempt: 1, State: queue.Dead, DeadReason: queue.PermanentFailure, Now: Start - 90},
	}
	if err := s.Record(ctx, outs); err != nil {
		t.Fatal(err)
	}
	if err := s.Extend(ctx, []queue.Lease{{ID: "l2", Attempt: 1}}, Start-90, Start-1); err != nil {
		t.Fatal(err)
	}
	st, err := s.Stats(ctx, queue.DefaultQueue, Start)
	if err != nil {
		t.Fatal(err)
	}
	want := queue.Stats{PendingDue: 2, PendingScheduled: 1, Leased: 2, LeasedExpired: 1, Done: 1,
		DeadExhausted: 1, DeadDeadline: 1, DeadPermanent: 1, OldestDueAt: Start - 30, Now: Start}
	if st != want {
		t.Fatalf("Stats = %+v\nwant    %+v", st, want)
	}
	if st.OldestPendingAge() != 30 || st.Pending() != 3 || st.Dead() != 3 {
		t.Fatalf("derived stats: age %d pending %d dead %d", st.OldestPendingAge(), st.Pending(), st.Dead())
	}
}

// testStoreStatsDueToDie: jobs Bury would move are counted as due to die,
// not as pending or leased, and do not age "oldest due".
func testStoreStatsDueToDie(t *testing.T, s queue.Store) {
	ctx := context.Background()
	insert(t, s,
		row("spent", Start-400, Start+1000, 1),   // claimed below, lease expires, last attempt
		row("running", Start-300, Start+1000, 1), // claimed, lease held: not dying yet
		row("live", Start-20, Start+1000, 3),     // the only runnable due job
	)
	if c, err := s.Claim(ctx, queue.DefaultQueue, Start-300, Start-10, 2); err != nil || !slices.Equal(ids(c), []string{"spent", "running"}) {
		t.Fatalf("claim: %v %v", ids(c), err)
	}
	insert(t, s,
		row("past", Start-500, Start-1, 3),    // deadline passed while pending
		row("late-sched", Start+50, Start, 3), // scheduled, deadline passed
	)
	if err := s.Extend(ctx, []queue.Lease{{ID: "running", Attempt: 1}}, Start-300, Start+500); err != nil {
		t.Fatal(err)
	}
	st, err := s.Stats(ctx, queue.DefaultQueue, Start)
	if err != nil {
		t.Fatal(err)
	}
	want := queue.Stats{PendingDue: 1, Leased: 1, DueToDie: 3, OldestDueAt: Start - 20, Now: Start}
	if st != want {
		t.Fatalf("Stats = %+v\nwant    %+v", st, want)
	}
	if st.OldestPendingAge() != 20 {
		t.Fatalf("oldest due age %d ms, want 20 (the dying jobs must not count)", st.OldestPendingAge())
	}
	if od, ok := s.(queue.OldestDuer); ok { // the gauge's lookup agrees with Stats
		if at, due, err := od.OldestDue(ctx, queue.DefaultQueue, Start); err != nil || !due || at != Start-20 {
			t.Fatalf("OldestDue = %d, %v, %v; want %d, true (the dying jobs must not count)", at, due, err, Start-20)
		}
		if _, due, err := od.OldestDue(ctx, "other", Start); err != nil || due {
			t.Fatalf("OldestDue of an empty queue = %v, %v; want false", due, err)
		}
	}
	if n, err := s.Bury(ctx, Start, 100); err != nil || n != 3 {
		t.Fatalf("Bury = %d, %v; want the 3 jobs Stats counted as due to die", n, err)
	}
	if st, _ := s.Stats(ctx, queue.DefaultQueue, Start); st.DueToDie != 0 || st.Dead() != 3 {
		t.Fatalf("after Bury: %+v", st)
	}
}

func purger(t *testing.T, s queue.Store) queue.Purger {
	t.Helper()
	p, ok := s.(queue.Purger)
	if !ok {
		t.Fatalf("%T does not implement queue.Purger (retention)", s)
	}
	return p
}

// finish claims jobs and records them with the given states at the given
// times.
func finish(t *testing.T, s queue.Store, at map[string]int64, state map[string]queue.State) {
	t.Helper()
	ctx := context.Background()
	var rows []queue.Job
	for id := range at {
		rows = append(rows, row(id, Start, Start+1e6, 3))
	}
	insert(t, s, rows...)
	if c, err := s.Claim(ctx, queue.DefaultQueue, Start, Start+1e6, len(rows)); err != nil || len(c) != len(rows) {
		t.Fatalf("claim: %v %v", ids(c), err)
	}
	var outs []queue.Outcome
	for id, now := range at {
		o := queue.Outcome{ID: id, Attempt: 1, State: state[id], Now: now}
		if o.State == queue.Dead {
			o.DeadReason, o.LastError = queue.PermanentFailure, "no"
		}
		outs = append(outs, o)
	}
	if err := s.Record(ctx, outs); err != nil {
		t.Fatal(err)
	}
}

// testStorePurge: Purge deletes only jobs of its state finished before the
// bound, the longest finished first, at most limit; CountFinished agrees.
func testStorePurge(t *testing.T, s queue.Store) {
	ctx := context.Background()
	p := purger(t, s)
	at := map[string]int64{"d1": Start + 10, "d2": Start + 20, "d3": Start + 30, "d4": Start + 40, "x1": Start + 5, "x2": Start + 50}
	state := map[string]queue.State{"d1": queue.Done, "d2": queue.Done, "d3": queue.Done, "d4": queue.Done, "x1": queue.Dead, "x2": queue.Dead}
	finish(t, s, at, state)
	insert(t, s, row("waiting", Start, Start+1e6, 3))
	if n, err := p.CountFinished(ctx, queue.Done, Start+40); err != nil || n != 3 {
		t.Fatalf("CountFinished(done, <40) = %d, %v; want 3", n, err)
	}
	if n, err := p.Purge(ctx, queue.Done, Start+40, 2); err != nil || n != 2 {
		t.Fatalf("Purge(done, <40, limit 2) = %d, %v", n, err)
	}
	for id, gone := range map[string]bool{"d1": true, "d2": true, "d3": false, "d4": false, "x1": false, "waiting": false} {
		_, err := s.Get(ctx, id)
		if gone != errors.Is(err, queue.ErrNotFound) {
			t.Fatalf("after Purge: %s gone=%v (err %v), want gone=%v", id, !gone, err, gone)
		}
	}
	if n, err := p.Purge(ctx, queue.Done, Start+40, 10); err != nil || n != 1 {
		t.Fatalf("second Purge = %d, %v; want d3 only", n, err)
	}
	if n, err := p.Purge(ctx, queue.Dead, Start+100, 10); err != nil || n != 2 {
		t.Fatalf("Purge(dead) = %d, %v", n, err)
	}
	if n, err := p.CountFinished(ctx, queue.Dead, Start+100); err != nil || n != 0 {
		t.Fatalf("CountFinished(dead) after purge = %d, %v", n, err)
	}
	// Pending and leased jobs are never deleted, whatever the bound.
	for _, st := range []queue.State{queue.Pending, queue.Leased} {
		if n, err := p.Purge(ctx, st, queue.MaxTime, 10); err != nil || n != 0 {
			t.Fatalf("Purge(%s) = %d, %v", st, n, err)
		}
	}
	if _, err := s.Get(ctx, "waiting"); err != nil {
		t.Fatal(err)
	}
	// A deleted done job's ID is free again.
	insert(t, s, row("d1", Start+100, Start+1e6, 3))
}

// testQueuePurge: Queue.Purge deletes in batches until none is left and
// Purgeable counts what it would delete; bad arguments name the rule.
func testQueuePurge(t *testing.T, s queue.Store) {
	e := newEnv(t, s, nil)
	for i := range 7 {
		e.enqueue(queue.NewJob{ID: fmt.Sprintf("j%d", i)})
		e.runOnce(ok)
		e.clock.Advance(1000)
	}
	// Finished at Start, +1s, ... +6s; now Start+7s.
	if n, err := e.q.Purgeable(e.ctx, queue.Done, 2500*time.Millisecond); err != nil || n != 5 {
		t.Fatalf("Purgeable(done, 2.5s) = %d, %v; want 5", n, err)
	}
	if n, err := e.q.Purge(e.ctx, queue.Done, 2500*time.Millisecond, 2); err != nil || n != 5 {
		t.Fatalf("Purge(done, 2.5s, batch 2) = %d, %v; want 5", n, err)
	}
	if st, _ := e.q.Stats(e.ctx); st.Done != 2 {
		t.Fatalf("after Purge: %+v", st)
	}
	for _, bad := range []struct {
		state queue.State
		d     time.Duration
		batch int
		want  string
	}{
		{queue.Pending, time.Hour, 10, "state must be done or dead"},
		{queue.Done, -time.Hour, 10, "older-than must be in"},
		{queue.Dead, time.Hour, 0, "batch must be in"},
		{queue.Dead, time.Hour, queue.MaxPurgeBatch + 1, "batch must be in"},
	} {
		if _, err := e.q.Purge(e.ctx, bad.state, bad.d, bad.batch); !errors.Is(err, queue.ErrInvalid) || !strings.Contains(err.Error(), bad.want) {
			t.Fatalf("Purge(%v) = %v, want %q", bad, err, bad.want)
		}
	}
}

func limited(t *testing.T, s queue.Store) queue.LimitedClaimer {
	t.Helper()
	lc, ok := s.(queue.LimitedClaimer)
	if !ok {
		t.Fatalf("%T does not implement queue.LimitedClaimer", s)
	}
	return lc
}

// testLimitsInFlight: a claim takes at most MaxInFlight minus the jobs
// already leased (expired leases do not count), across claims.
func testLimitsInFlight(t *testing.T, s queue.Store) {
	ctx := context.Background()
	lc := limited(t, s)
	var rows []queue.Job
	for i := range 6 {
		rows = append(rows, row(fmt.Sprintf("f%d", i), Start, Start+100000, 5))
	}
	insert(t, s, rows...)
	lim := queue.Limits{MaxInFlight: 3}
	got, err := lc.ClaimLimited(ctx, queue.DefaultQueue, lim, Start, Start+1000, 5)
	if err != nil || len(got) != 3 {
		t.Fatalf("first claim: %d jobs, %v; want 3", len(got), err)
	}
	if more, _ := lc.ClaimLimited(ctx, queue.DefaultQueue, lim, Start+1, Start+1001, 5); len(more) != 0 {
		t.Fatalf("claim at the limit took %v", ids(more))
	}
	outs := []queue.Outcome{{ID: got[0].ID, Attempt: 1, State: queue.Done, Now: Start + 2}}
	if err := s.Record(ctx, outs); err != nil || !outs[0].Applied {
		t.Fatal("record", err)
	}
	if more, _ := lc.ClaimLimited(ctx, queue.DefaultQueue, lim, Start+3, Start+1003, 5); len(more) != 1 {
		t.Fatalf("after one finished: %v, want 1 job", ids(more))
	}
	// Past the leases (Start+1000), the stuck ones no longer count.
	if more, _ := lc.ClaimLimited(ctx, queue.DefaultQueue, lim, Start+1001, Start+2001, 5); len(more) != 2 {
		t.Fatalf("after the leases expired: %v, want 2 jobs", ids(more))
	}
	// Another queue's jobs are not counted.
	other := row("o1", Start, Start+100000, 5)
	other.Queue = "other"
	insert(t, s, other)
	if got, _ := lc.ClaimLimited(ctx, "other", lim, Start+1001, Start+2001, 5); len(got) != 1 {
		t.Fatalf("other queue: %v", ids(got))
	}
}

// testLimitsRate: claims per second follow a token bucket of Burst
// tokens refilled at Rate, kept by the store per queue.
func testLimitsRate(t *testing.T, s queue.Store) {
	ctx := context.Background()
	lc := limited(t, s)
	var rows []queue.Job
	for i := range 20 {
		rows = append(rows, row(fmt.Sprintf("r%02d", i), Start, Start+100000, 5))
	}
	insert(t, s, rows...)
	lim := queue.Limits{Rate: 10, Burst: 3}
	claim := func(at int64, want int) {
		t.Helper()
		got, err := lc.ClaimLimited(ctx, queue.DefaultQueue, lim, at, at+60000, 10)
		if err != nil || len(got) != want {
			t.Fatalf("claim at +%d ms: %d jobs, %v; want %d", at-Start, len(got), err, want)
		}
	}
	claim(Start, 3)     // a full bucket: the burst
	claim(Start, 0)     // empty
	claim(Start+50, 0)  // half a token
	claim(Start+100, 1) // one token per 100 ms
	claim(Start+400, 3) // 3 more tokens, capped by the burst
	claim(Start+5000, 3)
}

// testLimitsConcurrent: many claimers at once never hold more than
// MaxInFlight jobs between them.
func testLimitsConcurrent(t *testing.T, s queue.Store) {
	ctx := context.Background()
	lc := limited(t, s)
	var rows []queue.Job
	for i := range 60 {
		rows = append(rows, row(fmt.Sprintf("k%02d", i), Start, Start+100000, 5))
	}
	insert(t, s, rows...)
	lim := queue.Limits{MaxInFlight: 4}
	var (
		mu       sync.Mutex
		inFlight int
		peak     int
		done     int
		wg       sync.WaitGroup
		errs     = make(chan error, 8)
	)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				got, err := lc.ClaimLimited(ctx, queue.DefaultQueue, lim, Start, Start+50000, 3)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				inFlight += len(got)
				peak = max(peak, inFlight)
				finished := done
				mu.Unlock()
				if len(got) == 0 {
					if finished == 60 {
						return
					}
					runtime.Gosched()
					continue
				}
				outs := make([]queue.Outcome, len(got))
				for i, j := range got {
					outs[i] = queue.Outcome{ID: j.ID, Attempt: j.Attempts, State: queue.Done, Now: Start}
				}
				// Counted out of flight before the row says so: the count
				// can only err high.
				mu.Lock()
				inFlight -= len(got)
				done += len(got)
				mu.Unlock()
				if err := s.Record(ctx, outs); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if peak > 4 || done != 60 {
		t.Fatalf("peak in flight %d (limit 4), done %d of 60", peak, done)
	}
}

func testStoreConcurrentClaims(t *testing.T, s queue.Store) {
	ctx := context.Background()
	const n, workers = 200, 8
	var rows []queue.Job
	for i := range n {
		rows = append(rows, row(fmt.Sprintf("c%03d", i), Start, Start+100000, 5))
	}
	insert(t, s, rows...)
	var (
		mu   sync.Mutex
		seen = map[string]int{}
		wg   sync.WaitGroup
		errs = make(chan error, workers)
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				got, err := s.Claim(ctx, queue.DefaultQueue, Start, Start+1000, 1+w%3)
				if err != nil {
					errs <- err
					return
				}
				if len(got) == 0 {
					return
				}
				outs := make([]queue.Outcome, len(got))
				for i, j := range got {
					outs[i] = queue.Outcome{ID: j.ID, Attempt: j.Attempts, State: queue.Done, Now: Start}
				}
				if err := s.Record(ctx, outs); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for i, j := range got {
					seen[j.ID]++
					if !outs[i].Applied || j.Attempts != 1 {
						errs <- fmt.Errorf("%s: applied=%v attempts=%d", j.ID, outs[i].Applied, j.Attempts)
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(seen) != n {
		t.Fatalf("claimed %d distinct jobs, want %d", len(seen), n)
	}
	for id, c := range seen {
		if c != 1 {
			t.Fatalf("%s claimed %d times", id, c)
		}
	}
	if st, _ := s.Stats(ctx, queue.DefaultQueue, Start); st.Done != n {
		t.Fatalf("done = %d, want %d", st.Done, n)
	}
}

// testStoreRecordAndClaim checks the optional queue.RecordClaimer.
func testStoreRecordAndClaim(t *testing.T, s queue.Store) {
	rc, ok := s.(queue.RecordClaimer)
	if !ok {
		t.Skip("the store does not implement the optional queue.RecordClaimer")
	}
	ctx := context.Background()
	insert(t, s, row("a", Start, Start+10000, 5), row("b", Start+1, Start+10000, 5), row("c", Start+2, Start+10000, 5))
	if got, err := s.Claim(ctx, queue.DefaultQueue, Start, Start+100, 1); err != nil || !slices.Equal(ids(got), []string{"a"}) {
		t.Fatal(ids(got), err)
	}
	outs := []queue.Outcome{
		{ID: "a", Attempt: 1, State: queue.Done, Now: Start + 5},
		{ID: "b", Attempt: 1, State: queue.Done, Now: Start + 5}, // b is not leased
	}
	got, err := rc.RecordAndClaim(ctx, outs, queue.DefaultQueue, Start+10, Start+110, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !outs[0].Applied || outs[1].Applied {
		t.Fatalf("applied = %v", applied(outs))
	}
	if !slices.Equal(ids(got), []string{"b", "c"}) || got[0].Attempts != 1 || got[0].LeaseUntil != Start+110 || got[0].State != queue.Leased {
		t.Fatalf("claimed %+v", got)
	}
	if a, _ := s.Get(ctx, "a"); a.State != queue.Done || a.FinishedAt != Start+5 {
		t.Fatalf("a = %+v", a)
	}
	// Nothing to claim: the outcomes are still recorded.
	outs = []queue.Outcome{{ID: "b", Attempt: 1, State: queue.Pending, AvailableAt: Start + 500, LastError: "later", Now: Start + 20}}
	if got, err := rc.RecordAndClaim(ctx, outs, queue.DefaultQueue, Start+20, Start+120, 3); err != nil || len(got) != 0 || !outs[0].Applied {
		t.Fatalf("claimed %v, err %v, applied %v", ids(got), err, outs[0].Applied)
	}
	if b, _ := s.Get(ctx, "b"); b.State != queue.Pending || b.AvailableAt != Start+500 {
		t.Fatalf("b = %+v", b)
	}
}

// ---- the queue contract ----

func testEnqueueIdempotent(t *testing.T, s queue.Store) {
	e := newEnv(t, s, nil)
	e.enqueue(queue.NewJob{ID: "order-1", Payload: []byte("v1"), MaxAttempts: 5, Deadline: Start + 60000})
	e.runOnce(fail(retry.Retryable(errBoom))) // attempt 1 spent
	e.clock.Advance(10)
	again, created, err := e.q.Enqueue(e.ctx, queue.NewJob{ID: "order-1", Payload: []byte("v2"), MaxAttempts: 9, Deadline: Start + 999999})
	if err != nil {
		t.Fatal(err)
	}
	if created {
		t.Fatal("re-submission reported created")
	}
	if again.Attempts != 1 || again.MaxAttempts != 5 || again.Deadline != Start+60000 || string(again.Payload) != "v1" || again.State != queue.Pending {
		t.Fatalf("re-submission changed the job: %+v", again)
	}
	if g := e.get("order-1"); g.Attempts != 1 || g.Deadline != Start+60000 {
		t.Fatalf("stored job reset: %+v", g)
	}
	// Defaults: max attempts and deadline from the queue's defaults (the
	// Policy leaves them 0).
	j := e.enqueue(queue.NewJob{ID: "dflt"})
	if j.MaxAttempts != queue.DefaultJobMaxAttempts || j.Deadline != e.clock.Now()+queue.DefaultJobTimeout.Milliseconds() || j.AvailableAt != e.clock.Now() {
		t.Fatalf("defaults: %+v", j)
	}
}

func testEnqueueValidation(t *testing.T, s queue.Store) {
	e := newEnv(t, s, func(c *queue.Config) { c.MaxPayload = 16 })
	now := e.clock.Now()
	bad := map[string]queue.NewJob{
		"id":                  {ID: ""},
		"id must be at most":  {ID: string(bytes.Repeat([]byte("x"), queue.MaxIDLen+1))},
		"control characters":  {ID: "a\nb"},
		"UTF-8":               {ID: "a\xffb"},
		"payload":             {ID: "p", Payload: make([]byte, 17)},
		"max_attempts":        {ID: "m", MaxAttempts: -1},
		"max_attempts must":   {ID: "m2", MaxAttempts: queue.MaxMaxAttempts + 1},
		"deadline":            {ID: "d", Deadline: now},
		"deadline (":          {ID: "d2", Deadline: -5},
		"year 9999":           {ID: "d3", Deadline: queue.MaxTime + 1},
		"available_at":        {ID: "a", Deadline: now + 100, AvailableAt: now + 100},
		"available_at (-1 ms": {ID: "a2", AvailableAt: -1},
	}
	for want, j := range bad {
		_, _, err := e.q.Enqueue(e.ctx, j)
		if !errors.Is(err, queue.ErrInvalid) || !bytes.Contains([]byte(err.Error()), []byte(want)) {
			t.Errorf("Enqueue(%+v) = %v, want ErrInvalid mentioning %q", j, err, want)
		}
	}
	// All or nothing: one bad job keeps the good ones out.
	_, err := e.q.EnqueueMany(e.ctx, []queue.NewJob{{ID: "good1"}, {ID: "bad", MaxAttempts: -3}, {ID: "good2"}})
	if !errors.Is(err, queue.ErrInvalid) {
		t.Fatalf("EnqueueMany with a bad job = %v", err)
	}
	for _, id := range []string{"good1", "good2", "bad", "p", "m"} {
		if _, err := e.q.Get(e.ctx, id); !errors.Is(err, queue.ErrNotFound) {
			t.Fatalf("%s stored after a rejected enqueue: %v", id, err)
		}
	}
	// Config validation names the field.
	for field, cfg := range map[string]queue.Config{
		"Policy: retry: invalid policy: Schedule: backoff: invalid argument: Ratio.Base": {Policy: &retry.Policy{Schedule: backoff.Ratio{Base: -1, Cap: time.Second}}},
		"Ratio.Cap (":                 {Policy: &retry.Policy{Schedule: backoff.Ratio{Base: time.Second, Cap: time.Millisecond}}},
		"Lease":                       {Lease: time.Millisecond},
		"Policy.AttemptTimeout":       {Policy: &retry.Policy{AttemptTimeout: -time.Second}},
		"MaxPayload":                  {MaxPayload: queue.MaxPayloadLimit + 1},
		"Policy.MaxAttempts must be":  {Policy: &retry.Policy{MaxAttempts: -2}},
		"Policy.MaxAttempts must be ": {Policy: &retry.Policy{MaxAttempts: queue.MaxMaxAttempts + 1}},
		"Policy.Timeout":              {Policy: &retry.Policy{Timeout: queue.MaxDuration + 1}},
		"Policy.Clock must be nil":    {Policy: &retry.Policy{Clock: fixedClock{}}},
	} {
		if _, err := queue.New(s, cfg); !errors.Is(err, queue.ErrInvalid) || !bytes.Contains([]byte(err.Error()), []byte(field)) {
			t.Errorf("New(%+v) = %v, want an error naming %s", cfg, err, field)
		}
	}
}

// fixedClock is a retry.Clock, which a queue refuses (its clock is
// Config.Now).
type fixedClock struct{}

func (fixedClock) Now() time.Time                       { return time.UnixMilli(Start) }
func (fixedClock) After(time.Duration) <-chan time.Time { return nil }

func testNothingDue(t *testing.T, s queue.Store) {
	e := newEnv(t, s, nil)
	called := false
	h := func(context.Context, []byte) error { called = true; return nil }
	if j := e.runOnce(h); j != nil || called {
		t.Fatalf("empty queue: job %v, called %v", j, called)
	}
	e.enqueue(queue.NewJob{ID: "later", AvailableAt: Start + 500})
	if j := e.runOnce(h); j != nil || called {
		t.Fatalf("job not yet due was run: %v", j)
	}
	e.clock.Set(Start + 499)
	if j := e.runOnce(h); j != nil {
		t.Fatalf("job run 1 ms early: %v", j)
	}
	e.clock.Set(Start + 500)
	if j := e.runOnce(h); j == nil || !called || j.State != queue.Done {
		t.Fatalf("due job not run: %v", j)
	}
}

func testSuccess(t *testing.T, s queue.Store) {
	e := newEnv(t, s, nil)
	e.enqueue(queue.NewJob{ID: "s", Payload: []byte("hello"), MaxAttempts: 4})
	var got retry.Delivery
	var payload []byte
	j := e.runOnce(func(ctx context.Context, p []byte) error {
		got, _ = retry.DeliveryFrom(ctx)
		payload = p
		// The claim is committed before the handler runs.
		if cur := e.get("s"); cur.State != queue.Leased || cur.Attempts != 1 {
			t.Errorf("during the handler the stored job is %+v", cur)
		}
		e.clock.Advance(7)
		return nil
	})
	if got.ID != "s" || got.Attempt != 1 || got.MaxAttempts != 4 || got.Source != "queue" ||
		!got.Deadline.Equal(time.UnixMilli(j.Deadline)) || string(payload) != "hello" {
		t.Fatalf("delivery %+v payload %q", got, payload)
	}
	expect(t, "returned", *j, queue.Done, 1, -1, "")
	stored := e.get("s")
	expect(t, "stored", stored, queue.Done, 1, -1, "")
	if stored.FinishedAt != Start+7 || stored.LeaseUntil != 0 {
		t.Fatalf("done row %+v", stored)
	}
	if j := e.runOnce(ok); j != nil {
		t.Fatalf("done job ran again: %+v", j)
	}
}

func testRetryDelay(t *testing.T, s queue.Store) {
	// Base 100, cap 1000, ratio 0.5: 50 ms after the 1st failure,
	// 100 ms after the 2nd; base 100, cap 250, attempt 3: 125 ms.
	for _, tc := range []struct {
		cap   time.Duration
		ratio FixedRatio
		want  []int64
	}{
		{time.Second, 0.5, []int64{50, 100, 200, 400, 500, 500}},
		{250 * time.Millisecond, 0.5, []int64{50, 100, 125, 125}},
		{time.Second, 0, []int64{0, 0, 0}},
		{time.Second, 1, []int64{99, 199, 399, 799, 999}}, // the largest ratio below 1
		{time.Second, 0.25, []int64{25, 50, 100, 200, 250}},
	} {
		e := newEnv(t, s, func(c *queue.Config) {
			c.Policy.Schedule, c.Policy.Rand = backoff.Ratio{Base: 100 * time.Millisecond, Cap: tc.cap}, tc.ratio
		})
		id := fmt.Sprintf("r-%v-%v", tc.cap, tc.ratio)
		e.enqueue(queue.NewJob{ID: id, MaxAttempts: 100})
		for n, want := range tc.want {
			now := e.clock.Now()
			j := e.runOnce(fail(retry.Retryable(errBoom)))
			if j == nil {
				t.Fatalf("%s: attempt %d not run", id, n+1)
			}
			expect(t, fmt.Sprintf("%s attempt %d", id, n+1), *j, queue.Pending, n+1, now+want, "")
			if j.LastError != "boom" {
				t.Fatalf("last error %q", j.LastError)
			}
			if want > 0 {
				e.clock.Set(now + want - 1)
				if early := e.runOnce(ok); early != nil {
					t.Fatalf("%s: claimed 1 ms before available_at", id)
				}
			}
			e.clock.Set(now + want)
		}
		if j := e.runOnce(ok); j == nil || j.ID != id || j.State != queue.Done {
			t.Fatalf("%s: finishing run: %+v", id, j)
		}
	}
}

func testAfter(t *testing.T, s queue.Store) {
	e := newEnv(t, s, func(c *queue.Config) { c.Policy.Rand = FixedRatio(0) })
	e.enqueue(queue.NewJob{ID: "a", MaxAttempts: 10, Deadline: Start + 3600_000})
	j := e.runOnce(fail(retry.After(errBoom, 2*time.Second)))
	expect(t, "After(2s)", *j, queue.Pending, 1, Start+2000, "")
	e.clock.Set(Start + 2000)
	j = e.runOnce(fail(retry.After(errBoom, 1500*time.Microsecond)))
	expect(t, "After(1.5ms) rounds up", *j, queue.Pending, 2, Start+2002, "")
	// After smaller than the schedule's delay does not shorten it.
	e2 := newEnv(t, s, func(c *queue.Config) { c.Policy.Rand = FixedRatio(0.5) })
	e2.enqueue(queue.NewJob{ID: "b", MaxAttempts: 10})
	j = e2.runOnce(fail(retry.After(errBoom, 10*time.Millisecond)))
	expect(t, "After below the delay", *j, queue.Pending, 1, Start+50, "")
	// After(d) is never capped, but the deadline still applies.
	e3 := newEnv(t, s, nil)
	e3.enqueue(queue.NewJob{ID: "c", MaxAttempts: 10, Deadline: Start + 3600_000})
	j = e3.runOnce(fail(retry.After(errBoom, 2*time.Hour)))
	expect(t, "After beyond the deadline", *j, queue.Dead, 1, -1, queue.DeadlineReached)
}

func testDeadline(t *testing.T, s queue.Store) {
	e := newEnv(t, s, nil) // ratio 0.5: 50 ms after the first failure
	e.enqueue(queue.NewJob{ID: "eq", MaxAttempts: 10, Deadline: Start + 50})
	e.enqueue(queue.NewJob{ID: "lt", MaxAttempts: 10, Deadline: Start + 51})
	j := e.runOnce(fail(retry.Retryable(errBoom)))
	expect(t, "now+delay == deadline", *j, queue.Dead, 1, -1, queue.DeadlineReached)
	if j.LastError != "boom" {
		t.Fatalf("last error %q", j.LastError)
	}
	j = e.runOnce(fail(retry.Retryable(errBoom)))
	expect(t, "now+delay < deadline", *j, queue.Pending, 1, Start+50, "")
	if j.Deadline != Start+51 {
		t.Fatalf("deadline moved: %d", j.Deadline)
	}
	// Due after its deadline: never started, buried with reason deadline.
	e.clock.Set(Start + 51)
	if j := e.runOnce(ok); j != nil {
		t.Fatalf("job started at its deadline: %+v", j)
	}
	if g := e.get("lt"); g.State != queue.Dead || g.DeadReason != queue.DeadlineReached || g.Attempts != 1 {
		t.Fatalf("past-deadline job %+v", g)
	}
	// The deadline never moves across retries.
	e.enqueue(queue.NewJob{ID: "steady", MaxAttempts: 100, Deadline: Start + 100000})
	for range 5 {
		j := e.runOnce(fail(retry.Retryable(errBoom)))
		if j == nil || j.Deadline != Start+100000 {
			t.Fatalf("deadline changed: %+v", j)
		}
		e.clock.Set(j.AvailableAt)
	}
}

func testExhausted(t *testing.T, s queue.Store) {
	e := newEnv(t, s, nil)
	e.enqueue(queue.NewJob{ID: "x", MaxAttempts: 2})
	j := e.runOnce(fail(retry.Retryable(errors.New("first"))))
	expect(t, "attempt 1", *j, queue.Pending, 1, Start+50, "")
	e.clock.Set(j.AvailableAt)
	j = e.runOnce(fail(retry.Retryable(errors.New("second"))))
	expect(t, "attempt 2 = max", *j, queue.Dead, 2, -1, queue.Exhausted)
	if g := e.get("x"); g.LastError != "second" || g.State != queue.Dead || g.FinishedAt == 0 {
		t.Fatalf("stored %+v", g)
	}
	e.enqueue(queue.NewJob{ID: "one", MaxAttempts: 1})
	j = e.runOnce(fail(retry.Retryable(errBoom)))
	expect(t, "max_attempts 1", *j, queue.Dead, 1, -1, queue.Exhausted)
}

func testPermanent(t *testing.T, s queue.Store) {
	e := newEnv(t, s, nil)
	e.enqueue(queue.NewJob{ID: "p", MaxAttempts: 5})
	j := e.runOnce(fail(retry.Permanent(errors.New("400 bad address"))))
	expect(t, "permanent", *j, queue.Dead, 1, -1, queue.PermanentFailure)
	if g := e.get("p"); g.LastError != "400 bad address" || g.DeadReason != queue.PermanentFailure {
		t.Fatalf("stored %+v", g)
	}
}

// testSnooze: a snooze makes the job pending at now + d with no error and
// no dead reason, keeps the last error of an earlier failure, spends the
// attempt and leaves the deadline alone; RunOnce returns no error.
func testSnooze(t *testing.T, s queue.Store) {
	e := newEnv(t, s, nil)
	e.enqueue(queue.NewJob{ID: "z", MaxAttempts: 5, Deadline: Start + 10_000})
	e.runOnce(fail(retry.Retryable(errBoom))) // attempt 1 fails: retry at +50
	e.clock.Set(Start + 50)
	j, err := e.q.RunOnce(e.ctx, fail(queue.Snooze(1500*time.Millisecond+time.Microsecond)))
	if err != nil {
		t.Fatalf("RunOnce of a snooze returned %v", err)
	}
	expect(t, "snoozed", *j, queue.Pending, 2, Start+50+1501, "")
	got := e.get("z")
	expect(t, "stored", got, queue.Pending, 2, Start+50+1501, "")
	if got.LastError != "boom" || got.Deadline != Start+10_000 || got.MaxAttempts != 5 {
		t.Fatalf("snooze changed the job: %+v", got)
	}
	e.clock.Set(Start + 1550)
	if j := e.runOnce(ok); j != nil {
		t.Fatalf("claimed 1 ms before the snooze ends: %+v", j)
	}
	e.clock.Set(Start + 1551)
	// A wrapped snooze and a negative one (now) are snoozes too.
	j = e.runOnce(fail(fmt.Errorf("later: %w", queue.Snooze(-time.Second))))
	expect(t, "snoozed for 0", *j, queue.Pending, 3, Start+1551, "")
	j = e.runOnce(ok)
	expect(t, "done after snoozes", *j, queue.Done, 4, -1, "")
}

// testSnoozeBounded: a snooze never passes the deadline and never gives an
// attempt back, so a handler that always snoozes ends dead.
func testSnoozeBounded(t *testing.T, s queue.Store) {
	e := newEnv(t, s, nil)
	e.enqueue(queue.NewJob{ID: "past", MaxAttempts: 5, Deadline: Start + 1000})
	j := e.runOnce(fail(queue.Snooze(time.Second))) // wakes exactly at the deadline
	expect(t, "snooze to the deadline", *j, queue.Dead, 1, -1, queue.DeadlineReached)
	if g := e.get("past"); g.Deadline != Start+1000 || !strings.Contains(g.LastError, "deadline") {
		t.Fatalf("stored %+v", g)
	}
	e.enqueue(queue.NewJob{ID: "loop", MaxAttempts: 3})
	for i := 1; i <= 3; i++ {
		j = e.runOnce(fail(queue.Snooze(10 * time.Millisecond)))
		if j == nil || j.Attempts != i {
			t.Fatalf("snooze %d: %+v", i, j)
		}
		e.clock.Advance(10)
	}
	expect(t, "always snoozing", *j, queue.Dead, 3, -1, queue.Exhausted)
	if j := e.runOnce(ok); j != nil {
		t.Fatalf("an exhausted job ran again: %+v", j)
	}
}

func testUnknown(t *testing.T, s queue.Store) {
	e := newEnv(t, s, func(c *queue.Config) { c.Lease = 10 * time.Second })
	e.enqueue(queue.NewJob{ID: "u", MaxAttempts: 3})
	odd := errors.New("no idea what happened")
	j, err := e.q.RunOnce(e.ctx, fail(odd))
	if !errors.Is(err, odd) {
		t.Fatalf("unknown error not returned: %v", err)
	}
	if j == nil || j.State != queue.Leased || j.Attempts != 1 {
		t.Fatalf("job after unknown error: %+v", j)
	}
	g := e.get("u")
	if g.State != queue.Leased || g.Attempts != 1 || g.LeaseUntil != Start+10000 || g.LastError != odd.Error() {
		t.Fatalf("stored after unknown error: %+v", g)
	}
	e.clock.Set(Start + 9999)
	if j := e.runOnce(ok); j != nil {
		t.Fatalf("claimed before the lease expired: %+v", j)
	}
	e.clock.Set(Start + 10000)
	j = e.runOnce(ok)
	expect(t, "after lease expiry", *j, queue.Done, 2, -1, "")
	// A panic is an unknown error too.
	e.enqueue(queue.NewJob{ID: "panic", MaxAttempts: 3})
	j, err = e.q.RunOnce(e.ctx, func(context.Context, []byte) error { panic("kaboom") })
	if err == nil || j == nil || j.State != queue.Leased || !bytes.Contains([]byte(err.Error()), []byte("kaboom")) {
		t.Fatalf("panic: job %+v err %v", j, err)
	}
}

// testErrorText: any error message can be recorded — invalid UTF-8 and NUL
// bytes (which a PostgreSQL text column refuses) are replaced, a long one is
// cut on a rune boundary — and the outcomes recorded with it are not lost.
func testErrorText(t *testing.T, s queue.Store) {
	e := newEnv(t, s, nil)
	long := strings.Repeat("é", queue.MaxLastErrorLen) // 2 bytes a rune
	for id, tc := range map[string]struct{ msg, want string }{
		"invalid": {"body: \xff\xfe!", "body: \uFFFD!"},
		"nul":     {"a\x00b", "a\uFFFDb"},
		"long":    {"\xff" + long, "\uFFFD" + long[:queue.MaxLastErrorLen-4]},
	} {
		e.enqueue(queue.NewJob{ID: id, MaxAttempts: 3})
		for _, h := range []retry.Handler{fail(retry.Retryable(errors.New(tc.msg))), fail(errors.New(tc.msg))} {
			j, err := e.q.RunOnce(e.ctx, h)
			if err != nil && !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("%s: RunOnce: %v", id, err)
			}
			if g := e.get(id); g.LastError != tc.want || !utf8.ValidString(g.LastError) || j.Attempts != g.Attempts {
				t.Fatalf("%s: stored last error %q, want %q (job %+v)", id, g.LastError, tc.want, g)
			}
			e.clock.Advance(60_000) // past the retry and the lease
		}
		if j := e.runOnce(ok); j == nil || j.ID != id || j.State != queue.Done {
			t.Fatalf("%s: finishing run: %+v", id, j)
		}
	}
}

func testCrash(t *testing.T, s queue.Store) {
	e := newEnv(t, s, func(c *queue.Config) { c.Lease = 5 * time.Second })
	e.enqueue(queue.NewJob{ID: "c", MaxAttempts: 2})
	// A worker claims and dies before recording anything.
	if got, err := s.Claim(e.ctx, queue.DefaultQueue, Start, Start+5000, 1); err != nil || len(got) != 1 {
		t.Fatal(got, err)
	}
	e.clock.Set(Start + 5000)
	var attempt int
	j := e.runOnce(func(ctx context.Context, _ []byte) error {
		d, _ := retry.DeliveryFrom(ctx)
		attempt = d.Attempt
		return nil
	})
	if attempt != 2 || j.Attempts != 2 || j.State != queue.Done {
		t.Fatalf("after a crash: delivery attempt %d, job %+v", attempt, j)
	}
	// A crash on the last attempt buries the job as exhausted.
	e.enqueue(queue.NewJob{ID: "last", MaxAttempts: 1})
	if got, err := s.Claim(e.ctx, queue.DefaultQueue, e.clock.Now(), e.clock.Now()+5000, 1); err != nil || len(got) != 1 {
		t.Fatal(got, err)
	}
	e.clock.Advance(5000)
	if j := e.runOnce(ok); j != nil {
		t.Fatalf("job ran beyond max_attempts: %+v", j)
	}
	if g := e.get("last"); g.State != queue.Dead || g.DeadReason != queue.Exhausted || g.Attempts != 1 || g.LastError != queue.UnknownOutcome {
		t.Fatalf("crashed last attempt: %+v", g)
	}
}

func testClockBackwards(t *testing.T, s queue.Store) {
	e := newEnv(t, s, func(c *queue.Config) { c.Lease = 5 * time.Second })
	e.enqueue(queue.NewJob{ID: "ok", MaxAttempts: 3})
	j, err := e.q.RunOnce(e.ctx, func(context.Context, []byte) error {
		e.clock.Set(Start - 1000)
		return nil
	})
	if !errors.Is(err, queue.ErrClockBackwards) {
		t.Fatalf("err = %v, want ErrClockBackwards", err)
	}
	if j == nil || j.State != queue.Done || e.get("ok").State != queue.Done || e.get("ok").FinishedAt != Start {
		t.Fatalf("success under a backwards clock: %+v", e.get("ok"))
	}
	e.clock.Set(Start)
	e.enqueue(queue.NewJob{ID: "bad", MaxAttempts: 3})
	j, err = e.q.RunOnce(e.ctx, func(context.Context, []byte) error {
		e.clock.Set(Start - 1)
		return retry.Retryable(errBoom)
	})
	if !errors.Is(err, queue.ErrClockBackwards) || !errors.Is(err, errBoom) {
		t.Fatalf("err = %v, want ErrClockBackwards and the handler's error", err)
	}
	g := e.get("bad")
	if j == nil || g.State != queue.Leased || g.Attempts != 1 || g.LeaseUntil != Start+5000 || g.Deadline != j.Deadline {
		t.Fatalf("failure under a backwards clock: %+v", g)
	}
	e.clock.Set(Start + 5000)
	j = e.runOnce(ok)
	expect(t, "after the lease", *j, queue.Done, 2, -1, "")
}

func testLeaseLost(t *testing.T, s queue.Store) {
	e := newEnv(t, s, func(c *queue.Config) { c.Lease = time.Second })
	e.enqueue(queue.NewJob{ID: "l", MaxAttempts: 5})
	var inner *queue.Job
	j, err := e.q.RunOnce(e.ctx, func(context.Context, []byte) error {
		// This worker stalls past its lease; another one takes the job.
		e.clock.Advance(1000)
		var err error
		inner, err = e.q.RunOnce(e.ctx, fail(retry.Permanent(errBoom)))
		if err != nil {
			t.Errorf("inner RunOnce: %v", err)
		}
		return nil
	})
	if !errors.Is(err, queue.ErrLeaseLost) {
		t.Fatalf("stale worker err = %v, want ErrLeaseLost", err)
	}
	if inner == nil || inner.Attempts != 2 || inner.State != queue.Dead {
		t.Fatalf("second worker: %+v", inner)
	}
	if j == nil || j.Attempts != 1 {
		t.Fatalf("stale worker's job %+v", j)
	}
	g := e.get("l")
	expect(t, "stored", g, queue.Dead, 2, -1, queue.PermanentFailure)
}

func testShutdownRelease(t *testing.T, s queue.Store) {
	e := newEnv(t, s, nil)
	e.enqueue(queue.NewJob{ID: "r", MaxAttempts: 5})
	ctx, cancel := context.WithCancel(context.Background())
	j, err := e.q.RunOnce(ctx, func(ctx context.Context, _ []byte) error {
		e.clock.Advance(3)
		cancel()
		<-ctx.Done()
		return ctx.Err()
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	g := e.get("r")
	expect(t, "released", g, queue.Pending, 1, Start+3, "")
	if j == nil || j.State != queue.Pending || g.LeaseUntil != 0 {
		t.Fatalf("released job %+v", g)
	}
	if j := e.runOnce(ok); j == nil || j.Attempts != 2 || j.State != queue.Done {
		t.Fatalf("released job not claimable at once: %+v", j)
	}
}

func testRequeue(t *testing.T, s queue.Store) {
	e := newEnv(t, s, nil)
	e.enqueue(queue.NewJob{ID: "q", MaxAttempts: 1, Deadline: Start + 10000})
	e.runOnce(fail(retry.Retryable(errBoom)))
	if g := e.get("q"); g.State != queue.Dead {
		t.Fatalf("setup: %+v", g)
	}
	e.clock.Set(Start + 20000) // past the old deadline
	for want, args := range map[string]struct {
		grant int
		dl    int64
	}{
		"attempts (granted)": {0, Start + 30000},
		"attempts (gran":     {-1, Start + 30000},
		"deadline":           {1, Start + 20000},
		"year 9999":          {1, queue.MaxTime + 1},
	} {
		if _, err := e.q.Requeue(e.ctx, "q", args.grant, args.dl); !errors.Is(err, queue.ErrInvalid) || !bytes.Contains([]byte(err.Error()), []byte(want)) {
			t.Errorf("Requeue(%+v) = %v, want an error naming %s", args, err, want)
		}
	}
	j, err := e.q.Requeue(e.ctx, "q", 2, Start+30000)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != queue.Pending || j.Attempts != 1 || j.MaxAttempts != 3 || j.Deadline != Start+30000 || j.AvailableAt != Start+20000 {
		t.Fatalf("requeued %+v", j)
	}
	r := e.runOnce(ok)
	expect(t, "after requeue", *r, queue.Done, 2, -1, "")
	if _, err := e.q.Requeue(e.ctx, "q", 1, Start+40000); !errors.Is(err, queue.ErrNotDead) {
		t.Fatalf("Requeue(done) = %v", err)
	}
	if _, err := e.q.Requeue(e.ctx, "nope", 1, Start+40000); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("Requeue(missing) = %v", err)
	}
}

func testDeadList(t *testing.T, s queue.Store) {
	e := newEnv(t, s, nil)
	for _, id := range []string{"d3", "d1", "d2", "alive"} {
		e.enqueue(queue.NewJob{ID: id, MaxAttempts: 1})
	}
	for range 3 {
		e.runOnce(func(ctx context.Context, _ []byte) error {
			d, _ := retry.DeliveryFrom(ctx)
			return retry.Permanent(errors.New("bad " + d.ID))
		})
	}
	dead, err := e.q.Dead(e.ctx, "", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 3 {
		t.Fatalf("dead = %v", ids(dead))
	}
	for i := 1; i < len(dead); i++ {
		if dead[i-1].ID >= dead[i].ID {
			t.Fatalf("not ordered by ID: %v", ids(dead))
		}
	}
	for _, d := range dead {
		if d.LastError != "bad "+d.ID || d.DeadReason != queue.PermanentFailure {
			t.Fatalf("dead job %+v", d)
		}
	}
	if _, err := e.q.Dead(e.ctx, "", 0); !errors.Is(err, queue.ErrInvalid) {
		t.Fatalf("Dead(limit 0) = %v", err)
	}
}

func testStats(t *testing.T, s queue.Store) {
	e := newEnv(t, s, nil)
	e.enqueue(queue.NewJob{ID: "a", MaxAttempts: 1})
	e.enqueue(queue.NewJob{ID: "b", MaxAttempts: 5})
	e.enqueue(queue.NewJob{ID: "c", MaxAttempts: 5, AvailableAt: Start + 1000})
	e.clock.Advance(40)
	st, err := e.q.Stats(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.PendingDue != 2 || st.PendingScheduled != 1 || st.OldestPendingAge() != 40 {
		t.Fatalf("stats %+v age %d", st, st.OldestPendingAge())
	}
	e.runOnce(fail(retry.Retryable(errBoom))) // a → dead exhausted
	e.runOnce(fail(retry.Retryable(errBoom))) // b → pending scheduled
	st, _ = e.q.Stats(e.ctx)
	if st.PendingDue != 0 || st.PendingScheduled != 2 || st.DeadExhausted != 1 || st.OldestPendingAge() != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// testRunOnceBuries: a job whose deadline passed is buried by the next
// RunOnce even when another job is due and gets claimed.
func testRunOnceBuries(t *testing.T, s queue.Store) {
	e := newEnv(t, s, nil)
	e.enqueue(queue.NewJob{ID: "expiring", Deadline: Start + 10})
	e.clock.Advance(5)
	e.enqueue(queue.NewJob{ID: "fresh"})
	e.clock.Advance(10) // expiring's deadline has passed; both are due
	j := e.runOnce(ok)
	if j == nil || j.ID != "fresh" || j.State != queue.Done {
		t.Fatalf("RunOnce ran %+v, want fresh done", j)
	}
	expect(t, "expiring", e.get("expiring"), queue.Dead, 0, -1, queue.DeadlineReached)
}

func testConcurrentRunOnce(t *testing.T, s queue.Store) {
	e := newEnv(t, s, nil)
	const n, workers = 100, 6
	var jobs []queue.NewJob
	for i := range n {
		jobs = append(jobs, queue.NewJob{ID: fmt.Sprintf("w%03d", i), MaxAttempts: 3})
	}
	if _, err := e.q.EnqueueMany(e.ctx, jobs); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				j, err := e.q.RunOnce(e.ctx, func(ctx context.Context, _ []byte) error {
					calls.Add(1)
					d, _ := retry.DeliveryFrom(ctx)
					mu.Lock()
					seen[d.ID]++
					mu.Unlock()
					return nil
				})
				if err != nil {
					t.Error(err)
					return
				}
				if j == nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	if calls.Load() != n || len(seen) != n {
		t.Fatalf("handler calls %d over %d jobs, want %d", calls.Load(), len(seen), n)
	}
	st, _ := e.q.Stats(e.ctx)
	if st.Done != n {
		t.Fatalf("done %d, want %d", st.Done, n)
	}
}

// testRedrive: Redrive selects dead jobs by reason, by age and up to a
// limit; a dry run changes nothing.
func testRedrive(t *testing.T, s queue.Store) {
	e := newEnv(t, s, nil)
	die := func(id string, h retry.Handler) {
		e.enqueue(queue.NewJob{ID: id, MaxAttempts: 1})
		if _, err := e.q.RunOnce(e.ctx, h); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(1000)
	}
	die("p1", fail(retry.Permanent(errBoom))) // died at Start
	die("x1", fail(retry.Retryable(errBoom))) // exhausted at +1s
	die("p2", fail(retry.Permanent(errBoom))) // +2s
	die("p3", fail(retry.Permanent(errBoom))) // +3s
	die("p4", fail(retry.Permanent(errBoom))) // +4s; now +5s
	var seen []string
	rd := queue.Redrive{Reason: queue.PermanentFailure, OlderThan: 1500 * time.Millisecond, NewerThan: 4500 * time.Millisecond,
		Grant: 2, Deadline: time.Hour, Rate: queue.MaxRedriveRate, DryRun: true,
		OnJob: func(j queue.Job) { seen = append(seen, j.ID) }}
	res, err := e.q.Redrive(e.ctx, rd)
	if err != nil || res.Requeued != 2 || !slices.Equal(seen, []string{"p2", "p3"}) {
		t.Fatalf("dry run = %+v %v, selected %v; want p2 p3", res, err, seen)
	}
	if st, _ := e.q.Stats(e.ctx); st.Dead() != 5 {
		t.Fatalf("a dry run changed jobs: %+v", st)
	}
	seen = nil
	rd.DryRun, rd.OlderThan, rd.NewerThan, rd.Limit = false, 0, 0, 3
	if res, err := e.q.Redrive(e.ctx, rd); err != nil || res.Requeued != 3 || !slices.Equal(seen, []string{"p1", "p2", "p3"}) {
		t.Fatalf("Redrive = %+v %v, requeued %v", res, err, seen)
	}
	for _, id := range []string{"p1", "p2", "p3"} {
		j := e.get(id)
		expect(t, id, j, queue.Pending, 1, e.clock.Now(), "")
		if j.MaxAttempts != 3 || j.Deadline != e.clock.Now()+3600_000 {
			t.Fatalf("%s requeued as %+v", id, j)
		}
	}
	expect(t, "x1 (another reason)", e.get("x1"), queue.Dead, 1, -1, queue.Exhausted)
	expect(t, "p4 (past the limit)", e.get("p4"), queue.Dead, 1, -1, queue.PermanentFailure)
}

// testNamedQueues: a Queue claims, counts and lists only the jobs of its
// named queue; IDs are unique across the queues of a store.
func testNamedQueues(t *testing.T, s queue.Store) {
	e := newEnv(t, s, nil) // the default queue
	mails := newEnv(t, s, func(c *queue.Config) { c.Queue = "mail" })
	e.enqueue(queue.NewJob{ID: "d1"})
	mails.enqueue(queue.NewJob{ID: "m1"})
	e.enqueue(queue.NewJob{ID: "m2", Queue: "mail"}) // into another queue by name
	if j := e.get("m2"); j.Queue != "mail" || e.get("d1").Queue != queue.DefaultQueue {
		t.Fatalf("queues stored: m2 %q, d1 %q", j.Queue, e.get("d1").Queue)
	}
	// The same ID in another queue is the existing job.
	if j, created, err := mails.q.Enqueue(e.ctx, queue.NewJob{ID: "d1"}); err != nil || created || j.Queue != queue.DefaultQueue {
		t.Fatalf("re-enqueue of d1 into mail = %+v %v %v", j, created, err)
	}
	st, _ := e.q.Stats(e.ctx)
	mst, _ := mails.q.Stats(e.ctx)
	if st.PendingDue != 1 || mst.PendingDue != 2 {
		t.Fatalf("stats: default %+v, mail %+v", st, mst)
	}
	var ran []string
	h := func(ctx context.Context, _ []byte) error {
		d, _ := retry.DeliveryFrom(ctx)
		ran = append(ran, d.ID)
		return retry.Permanent(errBoom)
	}
	for range 3 {
		mails.runOnce(h)
	}
	if !slices.Equal(ran, []string{"m1", "m2"}) {
		t.Fatalf("the mail queue ran %v, want m1 m2 only", ran)
	}
	if dead, _ := e.q.Dead(e.ctx, "", 10); len(dead) != 0 {
		t.Fatalf("the default queue lists mail's dead jobs: %v", ids(dead))
	}
	if dead, _ := mails.q.Dead(e.ctx, "", 10); !slices.Equal(ids(dead), []string{"m1", "m2"}) {
		t.Fatalf("mail's dead jobs: %v", ids(dead))
	}
	if j := e.runOnce(ok); j == nil || j.ID != "d1" {
		t.Fatalf("the default queue ran %+v", j)
	}
	for _, bad := range []string{"has space", strings.Repeat("q", queue.MaxQueueLen+1), "é"} {
		if _, _, err := e.q.Enqueue(e.ctx, queue.NewJob{ID: "x", Queue: bad}); !errors.Is(err, queue.ErrInvalid) || !strings.Contains(err.Error(), "queue name") {
			t.Fatalf("Enqueue into queue %q = %v", bad, err)
		}
		if _, err := queue.New(s, queue.Config{Queue: bad}); !errors.Is(err, queue.ErrInvalid) || !strings.Contains(err.Error(), "Queue") {
			t.Fatalf("New(Queue %q) = %v", bad, err)
		}
	}
}

// Driver adapts the queue, on the stores open returns (one per case,
// closed after it), to the retry drivers' conformance suite
// (retry/drivertest): a job run with RunOnce, claimed again whenever it is
// due, must make the same calls to the policy's hooks, Budget and Limiter
// as retry.Do and end as retry.Do ends, read back from the job: done,
// dead with the give-up's reason, attempts and last error, or — for an
// error of no class — that error from RunOnce. The policy's Timeout
// becomes the job's deadline and its MaxAttempts the job's max_attempts,
// as a job row governs them.
//
// Where retry.Do gives up, the queue keeps the job in three ways, which
// the suite checks: a refusal by the Budget or the Limiter, and pushback
// above MaxAfter, leave it due again after the schedule's wait (the
// give-up is still reported, and an attempt refused before it started was
// spent by the claim); the end of the worker's context releases it; and a
// handler's panic is recovered into an error of no class.
func Driver(name string, open func() (queue.Store, func(), error)) drivertest.Driver {
	return drivertest.Driver{
		Name:           name,
		Keeps:          []retry.Reason{retry.Budget, retry.CircuitOpen, retry.Limited, retry.Pushback, retry.Canceled},
		SpendsRefused:  true,
		RecoversPanics: true,
		ErrorText:      true, // a dead job keeps its last error as text
		Run: func(ctx context.Context, p *retry.Policy, attempt func(context.Context) error) error {
			jp := *p
			timeout, maxAttempts := jp.Timeout, jp.MaxAttempts
			jp.Timeout, jp.MaxAttempts = 0, 0
			if jp.AttemptTimeout == 0 { // retry.Do's none; a queue's default is a minute
				jp.AttemptTimeout = time.Hour
			}
			s, closeStore, err := open()
			if err != nil {
				panic(err)
			}
			defer closeStore()
			q, err := queue.New(s, queue.Config{Policy: &jp, Lease: time.Hour})
			if err != nil {
				panic(err)
			}
			nj := queue.NewJob{ID: "j1", MaxAttempts: maxAttempts}
			if timeout > 0 {
				nj.Deadline = time.Now().Add(timeout).UnixMilli()
			}
			if _, _, err := q.Enqueue(ctx, nj); err != nil {
				panic(err)
			}
			h := func(ctx context.Context, _ []byte) error { return attempt(ctx) }
			for {
				if ctx.Err() != nil { // the worker stops: the job stays
					return jobOutcome(q)
				}
				j, err := q.RunOnce(ctx, h)
				switch {
				case j == nil && err == nil: // nothing due: wait for the job's time
					cur, gerr := q.Get(context.Background(), "j1")
					if gerr != nil {
						panic(gerr)
					}
					if cur.State != queue.Pending {
						return jobOutcome(q)
					}
					time.Sleep(time.Until(time.UnixMilli(cur.AvailableAt)) + time.Millisecond)
				case j == nil && ctx.Err() == nil:
					panic(err)
				case j != nil && j.State == queue.Leased: // an error of no class, back to the caller
					return err
				case j != nil && j.State != queue.Pending:
					return jobOutcome(q)
				}
			}
		},
	}
}

// jobOutcome is the suite's outcome of job j1 of q as its row says: nil
// when done, a *retry.Error when dead, a *drivertest.Kept when pending.
func jobOutcome(q *queue.Queue) error {
	j, err := q.Get(context.Background(), "j1")
	if err != nil {
		panic(err)
	}
	switch j.State {
	case queue.Done:
		return nil
	case queue.Pending:
		return &drivertest.Kept{Attempts: j.Attempts}
	case queue.Dead:
		reason := map[queue.DeadReason]retry.Reason{queue.Exhausted: retry.Exhausted,
			queue.DeadlineReached: retry.Deadline, queue.PermanentFailure: retry.PermanentError}[j.DeadReason]
		var last error
		if j.LastError != "" {
			last = errors.New(j.LastError)
		}
		return &retry.Error{Reason: reason, Attempts: j.Attempts, Err: last}
	}
	return fmt.Errorf("queuetest: job j1 is %s", j.State)
}

// BenchRecordAndClaim is a busy Worker's turn on s, one op a turn: record
// the outcomes (done) of the 4 jobs claimed last turn and claim 4 more in
// one transaction, with a backlog of due jobs. Stores call it from their
// own BenchmarkRecordAndClaim.
func BenchRecordAndClaim(b *testing.B, s interface {
	queue.Store
	queue.RecordClaimer
}) {
	ctx := context.Background()
	const now, batch = Start, 4
	n := b.N*batch + 1000
	for i := 0; i < n; i += 1000 {
		jobs := make([]queue.Job, 0, 1000)
		for k := i; k < min(i+1000, n); k++ {
			jobs = append(jobs, queue.Job{ID: fmt.Sprintf("job-%09d", k), Payload: []byte("{}"), MaxAttempts: 3,
				AvailableAt: now, Deadline: now + 1e9, State: queue.Pending, CreatedAt: now, UpdatedAt: now})
		}
		if _, err := s.Insert(ctx, jobs); err != nil {
			b.Fatal(err)
		}
	}
	var outs []queue.Outcome
	b.ResetTimer()
	for range b.N {
		got, err := s.RecordAndClaim(ctx, outs, queue.DefaultQueue, now+1, now+1e6, batch)
		if err != nil || len(got) != batch {
			b.Fatal(len(got), err)
		}
		outs = outs[:0]
		for _, j := range got {
			outs = append(outs, queue.Outcome{ID: j.ID, Attempt: j.Attempts, State: queue.Done, Now: now + 1})
		}
	}
}
