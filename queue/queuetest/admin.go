package queuetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/retry"
)

// adminTests are the operator's actions (queue.AdminStore), each a check
// that returns what it found wrong, so that a broken store can be shown
// to fail it (admin_test.go).
var adminTests = []struct {
	name  string
	check func(queue.Store) error
}{
	{"AdminCancel", checkCancel},
	{"AdminCancelConcurrent", checkCancelConcurrent},
	{"AdminCancelRacesClaims", checkCancelRacesClaims},
	{"AdminDelete", checkDelete},
	{"AdminPause", checkPause},
	{"AdminSearchFilters", checkSearchFilters},
	{"AdminSearchPagingWhileJobsMove", checkPagingWhileJobsMove},
	{"AdminBulk", checkBulk},
	{"AdminBadInput", checkAdminBadInput},
}

// adminEnv is a queue with a fake clock on a store, for the checks.
type adminEnv struct {
	s     queue.Store
	q     *queue.Queue
	clock *Clock
	ctx   context.Context
}

func newAdminEnv(s queue.Store, name string) (*adminEnv, error) {
	if _, ok := s.(queue.AdminStore); !ok {
		return nil, fmt.Errorf("%T does not implement queue.AdminStore", s)
	}
	clock := NewClock(Start)
	q, err := queue.New(s, queue.Config{Queue: name, Lease: 30 * time.Second, Now: clock.Now})
	if err != nil {
		return nil, err
	}
	return &adminEnv{s: s, q: q, clock: clock, ctx: context.Background()}, nil
}

func (e *adminEnv) enqueue(jobs ...queue.NewJob) error {
	for _, j := range jobs {
		if _, created, err := e.q.Enqueue(e.ctx, j); err != nil || !created {
			return fmt.Errorf("enqueue %q: created=%v err=%v", j.ID, created, err)
		}
	}
	return nil
}

// claim leases up to n due jobs of the queue, as a worker does.
func (e *adminEnv) claim(name string, n int) ([]queue.Job, error) {
	now := e.clock.Now()
	return e.s.Claim(e.ctx, name, now, now+30000, n)
}

func (e *adminEnv) state(id string) string {
	j, err := e.s.Get(e.ctx, id)
	if err != nil {
		return err.Error()
	}
	return strings.TrimSpace(string(j.State) + " " + string(j.DeadReason))
}

// checkCancel: a pending job, due or scheduled, is cancelled (dead,
// canceled) and recorded; a leased job is refused and keeps its lease; a
// done or dead one is refused; Requeue brings a cancelled job back.
func checkCancel(s queue.Store) error {
	e, err := newAdminEnv(s, "cancel-q")
	if err != nil {
		return err
	}
	if err := e.enqueue(queue.NewJob{ID: "due"}, queue.NewJob{ID: "later", AvailableAt: Start + 60000}, queue.NewJob{ID: "busy"}); err != nil {
		return err
	}
	e.clock.Advance(10)
	j, err := e.q.Cancel(e.ctx, "due", "alice")
	if err != nil || j.State != queue.Dead || j.DeadReason != queue.Canceled || j.FinishedAt != Start+10 || j.UpdatedAt != Start+10 {
		return fmt.Errorf("Cancel(due) = %+v, %v; want dead canceled, finished at %d", j, err, Start+10)
	}
	if j, err := e.q.Cancel(e.ctx, "later", "bob"); err != nil || j.DeadReason != queue.Canceled {
		return fmt.Errorf("Cancel(scheduled) = %+v, %v", j, err)
	}
	got, err := e.claim("cancel-q", 10)
	if err != nil || len(got) != 1 || got[0].ID != "busy" {
		return fmt.Errorf("claim after cancels = %v, %v; want [busy] only", ids(got), err)
	}
	if _, err := e.q.Cancel(e.ctx, "busy", "alice"); !errors.Is(err, queue.ErrLeased) || !strings.Contains(err.Error(), `"busy"`) {
		return fmt.Errorf("Cancel(leased) = %v; want ErrLeased naming the job", err)
	}
	if j, _ := e.s.Get(e.ctx, "busy"); j.State != queue.Leased || j.Attempts != 1 || j.LeaseUntil != got[0].LeaseUntil {
		return fmt.Errorf("a refused cancel changed the leased job: %+v", j)
	}
	if _, err := e.q.Cancel(e.ctx, "due", "alice"); !errors.Is(err, queue.ErrNotPending) || !strings.Contains(err.Error(), "dead canceled") {
		return fmt.Errorf("Cancel(cancelled) = %v; want ErrNotPending naming the state", err)
	}
	if _, err := e.q.Cancel(e.ctx, "ghost", "alice"); !errors.Is(err, queue.ErrNotFound) || !strings.Contains(err.Error(), `"ghost"`) {
		return fmt.Errorf("Cancel(unknown) = %v; want ErrNotFound naming it", err)
	}
	h, err := e.q.History(e.ctx, "due")
	if err != nil || len(h) != 1 || h[0].Actor != "alice" || h[0].Action != queue.ActionCancel || h[0].At != Start+10 {
		return fmt.Errorf("History(due) = %+v, %v; want one cancel by alice at %d", h, err, Start+10)
	}
	if h, err := e.q.History(e.ctx, "busy"); err != nil || len(h) != 0 {
		return fmt.Errorf("store.History of a job no action changed = %+v, %v; want none", h, err)
	}
	st, err := e.q.Stats(e.ctx)
	if err != nil || st.DeadCanceled != 2 || st.Dead() != 2 {
		return fmt.Errorf("store.Stats = %+v, %v; want 2 dead canceled", st, err)
	}
	e.clock.Advance(10)
	j, err = e.q.RequeueAs(e.ctx, "due", 2, Start+3600_000, "carol")
	if err != nil || j.State != queue.Pending || j.DeadReason != "" {
		return fmt.Errorf("RequeueAs(cancelled) = %+v, %v", j, err)
	}
	h, err = e.q.History(e.ctx, "due")
	if err != nil || len(h) != 2 || h[1].Actor != "carol" || h[1].Action != queue.ActionRequeue || h[1].At != Start+20 || h[1].Detail == "" {
		return fmt.Errorf("store.History after requeue = %+v, %v; want cancel then requeue by carol", h, err)
	}
	return nil
}

// checkCancelConcurrent: callers that cancel (or delete) one job at once:
// one succeeds, the others are told why not, and the history holds one
// event.
func checkCancelConcurrent(s queue.Store) error {
	e, err := newAdminEnv(s, "race-q")
	if err != nil {
		return err
	}
	if err := e.enqueue(queue.NewJob{ID: "once"}, queue.NewJob{ID: "gone"}); err != nil {
		return err
	}
	const n = 8
	for _, op := range []struct {
		id   string
		do   func(id, who string) error
		lost error
	}{
		{"once", func(id, who string) error { _, err := e.q.Cancel(e.ctx, id, who); return err }, queue.ErrNotPending},
		{"gone", func(id, who string) error { _, err := e.q.Delete(e.ctx, id, who); return err }, queue.ErrNotFound},
	} {
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = op.do(op.id, fmt.Sprintf("op-%d", i))
			}()
		}
		wg.Wait()
		wins := 0
		for _, err := range errs {
			switch {
			case err == nil:
				wins++
			case !errors.Is(err, op.lost):
				return fmt.Errorf("%s: a concurrent caller got %v; want %v", op.id, err, op.lost)
			}
		}
		if wins != 1 {
			return fmt.Errorf("%s: %d of %d concurrent callers succeeded; want exactly one", op.id, wins, n)
		}
	}
	if h, err := e.q.History(e.ctx, "once"); err != nil || len(h) != 1 {
		return fmt.Errorf("store.History after %d concurrent cancels = %+v, %v; want one event", n, h, err)
	}
	return nil
}

// checkCancelRacesClaims: cancels racing claims on the same jobs: every
// job ends either claimed (the cancel refused) or cancelled (never
// claimed), never both.
func checkCancelRacesClaims(s queue.Store) error {
	e, err := newAdminEnv(s, "claimrace-q")
	if err != nil {
		return err
	}
	const n = 40
	for i := range n {
		if err := e.enqueue(queue.NewJob{ID: fmt.Sprintf("r%02d", i)}); err != nil {
			return err
		}
	}
	var mu sync.Mutex
	claimed, cancelled := map[string]bool{}, map[string]bool{}
	var wg sync.WaitGroup
	var firstErr error
	wg.Add(2)
	go func() {
		defer wg.Done()
		for range n {
			got, err := e.claim("claimrace-q", 1)
			mu.Lock()
			for _, j := range got {
				claimed[j.ID] = true
			}
			if err != nil && firstErr == nil {
				firstErr = err
			}
			mu.Unlock()
		}
	}()
	go func() {
		defer wg.Done()
		for i := n - 1; i >= 0; i-- {
			id := fmt.Sprintf("r%02d", i)
			_, err := e.q.Cancel(e.ctx, id, "racer")
			mu.Lock()
			switch {
			case err == nil:
				cancelled[id] = true
			case !errors.Is(err, queue.ErrLeased) && firstErr == nil:
				firstErr = fmt.Errorf("cancel %s: %v; want success or ErrLeased", id, err)
			}
			mu.Unlock()
		}
	}()
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	for i := range n {
		id := fmt.Sprintf("r%02d", i)
		st := e.state(id)
		switch {
		case claimed[id] && cancelled[id]:
			return fmt.Errorf("%s was both claimed and cancelled (now %s)", id, st)
		case claimed[id] && st != "leased", cancelled[id] && st != "dead canceled":
			return fmt.Errorf("%s: claimed=%v cancelled=%v but state %s", id, claimed[id], cancelled[id], st)
		}
	}
	return nil
}

// checkDelete: a pending, done or dead job is deleted with its history,
// its ID free again; a leased one is refused.
func checkDelete(s queue.Store) error {
	e, err := newAdminEnv(s, "delete-q")
	if err != nil {
		return err
	}
	if err := e.enqueue(queue.NewJob{ID: "d1"}, queue.NewJob{ID: "d2"}); err != nil {
		return err
	}
	if _, err := e.q.Cancel(e.ctx, "d1", "alice"); err != nil {
		return err
	}
	j, err := e.q.Delete(e.ctx, "d1", "alice")
	if err != nil || j.ID != "d1" || j.DeadReason != queue.Canceled {
		return fmt.Errorf("Delete(cancelled) = %+v, %v", j, err)
	}
	if _, err := e.s.Get(e.ctx, "d1"); !errors.Is(err, queue.ErrNotFound) {
		return fmt.Errorf("store.Get after Delete = %v; want ErrNotFound", err)
	}
	if h, err := e.q.History(e.ctx, "d1"); err != nil || len(h) != 0 {
		return fmt.Errorf("store.History after Delete = %+v, %v; want none", h, err)
	}
	if err := e.enqueue(queue.NewJob{ID: "d1"}); err != nil {
		return fmt.Errorf("the ID of a deleted job is not free: %v", err)
	}
	if h, _ := e.q.History(e.ctx, "d1"); len(h) != 0 {
		return fmt.Errorf("a new job with a deleted job's ID inherited its history: %+v", h)
	}
	if got, err := e.claim("delete-q", 1); err != nil || len(got) != 1 {
		return fmt.Errorf("claim = %v, %v", ids(got), err)
	}
	leased := "d1"
	if _, err := e.q.Delete(e.ctx, leased, "alice"); !errors.Is(err, queue.ErrLeased) {
		return fmt.Errorf("Delete(leased) = %v; want ErrLeased", err)
	}
	if e.state(leased) != "leased" {
		return fmt.Errorf("a refused delete changed the job: %s", e.state(leased))
	}
	if _, err := e.q.Delete(e.ctx, "d2", "alice"); err != nil {
		return fmt.Errorf("Delete(pending) = %v", err)
	}
	if _, err := e.q.Delete(e.ctx, "d2", "alice"); !errors.Is(err, queue.ErrNotFound) {
		return fmt.Errorf("Delete(deleted) = %v; want ErrNotFound", err)
	}
	return nil
}

// checkPause: a paused queue keeps its jobs and takes enqueues, but no
// claim (plain, limited or with outcomes) leases its jobs, through any
// Queue value on the store; other queues go on; resume lets claims take
// them again.
func checkPause(s queue.Store) error {
	e, err := newAdminEnv(s, "paused-q")
	if err != nil {
		return err
	}
	other, err := queue.New(s, queue.Config{Queue: "other-q", Now: e.clock.Now})
	if err != nil {
		return err
	}
	if err := e.enqueue(queue.NewJob{ID: "p1"}, queue.NewJob{ID: "p2"}); err != nil {
		return err
	}
	if _, _, err := other.Enqueue(e.ctx, queue.NewJob{ID: "o1"}); err != nil {
		return err
	}
	changed, err := other.Pause(e.ctx, "paused-q", "ops")
	if err != nil || !changed {
		return fmt.Errorf("store.Pause = %v, %v; want true", changed, err)
	}
	if changed, err := e.q.Pause(e.ctx, "", "ops2"); err != nil || changed {
		return fmt.Errorf("store.Pause of a paused queue = %v, %v; want false", changed, err)
	}
	ps, err := e.q.Pauses(e.ctx)
	if err != nil || len(ps) != 1 || ps[0].Queue != "paused-q" || ps[0].Actor != "ops" || ps[0].At != Start {
		return fmt.Errorf("store.Pauses = %+v, %v; want paused-q by ops at %d", ps, err, Start)
	}
	if err := e.enqueue(queue.NewJob{ID: "p3"}); err != nil {
		return fmt.Errorf("enqueue into a paused queue: %v", err)
	}
	e.clock.Advance(5)
	now := e.clock.Now()
	if got, err := e.claim("paused-q", 10); err != nil || len(got) != 0 {
		return fmt.Errorf("Claim on a paused queue = %v, %v; want none", ids(got), err)
	}
	if lc, ok := s.(queue.LimitedClaimer); ok {
		if got, err := lc.ClaimLimited(e.ctx, "paused-q", queue.Limits{MaxInFlight: 5}, now, now+1000, 10); err != nil || len(got) != 0 {
			return fmt.Errorf("ClaimLimited on a paused queue = %v, %v; want none", ids(got), err)
		}
	}
	if rc, ok := s.(queue.RecordClaimer); ok {
		if got, err := rc.RecordAndClaim(e.ctx, nil, "paused-q", now, now+1000, 10); err != nil || len(got) != 0 {
			return fmt.Errorf("RecordAndClaim on a paused queue = %v, %v; want none", ids(got), err)
		}
	}
	if j, err := e.q.RunOnce(e.ctx, func(context.Context, []byte) error { return nil }); err != nil || j != nil {
		return fmt.Errorf("RunOnce on a paused queue = %v, %v; want nothing", j, err)
	}
	if got, err := e.claim("other-q", 10); err != nil || len(got) != 1 {
		return fmt.Errorf("Claim on another queue = %v, %v; want [o1]", ids(got), err)
	}
	if st, err := e.q.Stats(e.ctx); err != nil || st.PendingDue != 3 {
		return fmt.Errorf("a paused queue's jobs: %+v, %v; want 3 pending", st, err)
	}
	if changed, err := other.Resume(e.ctx, "paused-q", "ops"); err != nil || !changed {
		return fmt.Errorf("store.Resume = %v, %v; want true", changed, err)
	}
	if changed, err := other.Resume(e.ctx, "paused-q", "ops"); err != nil || changed {
		return fmt.Errorf("store.Resume of a running queue = %v, %v; want false", changed, err)
	}
	if ps, err := e.q.Pauses(e.ctx); err != nil || len(ps) != 0 {
		return fmt.Errorf("store.Pauses after Resume = %+v, %v", ps, err)
	}
	if got, err := e.claim("paused-q", 10); err != nil || len(got) != 3 {
		return fmt.Errorf("Claim after Resume = %v, %v; want 3 jobs", ids(got), err)
	}
	return nil
}

// checkSearchFilters: each filter selects what it says, in byte order of
// the IDs.
func checkSearchFilters(s queue.Store) error {
	e, err := newAdminEnv(s, "search-q")
	if err != nil {
		return err
	}
	// IDs whose byte order differs from a locale's order, enqueued a
	// second apart; B1 and Z are due first (an AvailableAt in the past).
	for _, id := range []string{"a-2", "B1", "a1", "ab", "a_3", "é1", "a10", "Z"} {
		j := queue.NewJob{ID: id, Payload: []byte("payload of " + id)}
		switch id {
		case "B1":
			j.AvailableAt = 1
		case "Z":
			j.AvailableAt = 2
		}
		if err := e.enqueue(j); err != nil {
			return err
		}
		e.clock.Advance(1000)
	}
	other, err := queue.New(s, queue.Config{Queue: "search-other", Now: e.clock.Now})
	if err != nil {
		return err
	}
	if _, _, err := other.Enqueue(e.ctx, queue.NewJob{ID: "a0", Payload: []byte("payload of a0")}); err != nil {
		return err
	}
	// At 8s: ab cancelled, B1 dead (permanent); at 9s Z leased.
	if _, err := e.q.Cancel(e.ctx, "ab", "ops"); err != nil {
		return err
	}
	if _, err := e.q.RunOnce(e.ctx, fail(retry.Permanent(errBoom))); err != nil {
		return err
	}
	if st := e.state("B1"); st != "dead permanent" {
		return fmt.Errorf("B1 is %s", st)
	}
	e.clock.Advance(1000)
	if _, err := e.q.RunOnce(e.ctx, fail(errBoom)); !errors.Is(err, errBoom) {
		return fmt.Errorf("RunOnce with an unknown outcome = %v", err)
	}
	if st := e.state("Z"); st != "leased" {
		return fmt.Errorf("job Z is %s", st)
	}
	all := []string{"B1", "Z", "a-2", "a1", "a10", "a_3", "ab", "é1"}
	for _, c := range []struct {
		name string
		f    queue.Filter
		want []string
	}{
		{"all", queue.Filter{}, all},
		{"pending", queue.Filter{State: queue.Pending}, []string{"a-2", "a1", "a10", "a_3", "é1"}},
		{"leased", queue.Filter{State: queue.Leased}, []string{"Z"}},
		{"dead", queue.Filter{State: queue.Dead}, []string{"B1", "ab"}},
		{"reason", queue.Filter{Reason: queue.Canceled}, []string{"ab"}},
		{"reason and state", queue.Filter{State: queue.Dead, Reason: queue.PermanentFailure}, []string{"B1"}},
		{"prefix", queue.Filter{IDPrefix: "a1"}, []string{"a1", "a10"}},
		{"prefix a", queue.Filter{IDPrefix: "a", State: queue.Pending}, []string{"a-2", "a1", "a10", "a_3"}},
		{"prefix multibyte", queue.Filter{IDPrefix: "é"}, []string{"é1"}},
		{"prefix none", queue.Filter{IDPrefix: "zz"}, nil},
		// Enqueued at Start+k s (a-2 0, B1 1, a1 2, ab 3, a_3 4, é1 5,
		// a10 6, Z 7); now Start+9s. Dead jobs count from their death:
		// ab at 8s, B1 at 8s.
		{"older than", queue.Filter{State: queue.Pending, OlderThan: 5500 * time.Millisecond}, []string{"a-2", "a1"}},
		{"newer than", queue.Filter{State: queue.Pending, NewerThan: 4500 * time.Millisecond}, []string{"a10", "é1"}},
		{"dead by death age", queue.Filter{State: queue.Dead, NewerThan: 1500 * time.Millisecond}, []string{"B1", "ab"}},
		{"after", queue.Filter{After: "a1"}, []string{"a10", "a_3", "ab", "é1"}},
		{"other queue", queue.Filter{Queue: "search-other"}, []string{"a0"}},
	} {
		p, err := e.q.Jobs(e.ctx, c.f)
		if err != nil || !slices.Equal(ids(p.Jobs), c.want) || p.Next != "" {
			return fmt.Errorf("%s: Jobs(%+v) = %v next %q, %v; want %v", c.name, c.f, ids(p.Jobs), p.Next, err, c.want)
		}
		// Without payloads: the same jobs, the same fields, no payload.
		c.f.NoPayload = true
		bare, err := e.q.Jobs(e.ctx, c.f)
		if err != nil || len(bare.Jobs) != len(p.Jobs) || bare.Next != p.Next {
			return fmt.Errorf("%s: Jobs(%+v) = %v next %q, %v; want %v", c.name, c.f, ids(bare.Jobs), bare.Next, err, c.want)
		}
		for i, j := range bare.Jobs {
			full := p.Jobs[i]
			if string(full.Payload) != "payload of "+full.ID {
				return fmt.Errorf("%s: job %q has the payload %q", c.name, full.ID, full.Payload)
			}
			if j.Payload != nil {
				return fmt.Errorf("%s: NoPayload: job %q has the payload %q; want nil", c.name, j.ID, j.Payload)
			}
			full.Payload = nil
			if !reflect.DeepEqual(j, full) {
				return fmt.Errorf("%s: NoPayload: job %+v; want %+v", c.name, j, full)
			}
		}
	}
	// Pages of 3: Next is the last ID of a full page.
	var got []string
	f := queue.Filter{Limit: 3}
	for range 10 {
		p, err := e.q.Jobs(e.ctx, f)
		if err != nil {
			return err
		}
		got = append(got, ids(p.Jobs)...)
		if p.Next == "" {
			break
		}
		f.After = p.Next
	}
	if !slices.Equal(got, all) {
		return fmt.Errorf("pages of 3 = %v; want %v", got, all)
	}
	return nil
}

// checkPagingWhileJobsMove: while pages are read, other jobs are claimed,
// cancelled, deleted, finished and enqueued; every job that keeps its
// state throughout is listed exactly once, and no job twice.
func checkPagingWhileJobsMove(s queue.Store) error {
	e, err := newAdminEnv(s, "paging-q")
	if err != nil {
		return err
	}
	const n = 60
	for i := range n {
		if err := e.enqueue(queue.NewJob{ID: fmt.Sprintf("m%03d", i*2)}); err != nil {
			return err
		}
	}
	stable := map[string]bool{}
	for i := range n {
		stable[fmt.Sprintf("m%03d", i*2)] = true
	}
	seen := map[string]int{}
	f := queue.Filter{State: queue.Pending, Limit: 7}
	for page := 0; ; page++ {
		p, err := e.q.Jobs(e.ctx, f)
		if err != nil {
			return err
		}
		for _, j := range p.Jobs {
			seen[j.ID]++
		}
		// Move jobs on both sides of the cursor: two already listed and two
		// not yet; enqueue new ones before and after it.
		var moved []string
		for _, id := range slices.Sorted(mapKeys(stable)) {
			if len(moved) == 4 {
				break
			}
			if (len(moved) < 2) == (seen[id] > 0) {
				moved = append(moved, id)
			}
		}
		for k, id := range moved {
			delete(stable, id)
			switch k % 3 {
			case 0:
				_, err = e.q.Cancel(e.ctx, id, "mover")
			case 1:
				_, err = e.q.Delete(e.ctx, id, "mover")
			default:
				_, err = s.(queue.AdminStore).Cancel(e.ctx, id, queue.Event{At: e.clock.Now(), Actor: "mover", Action: queue.ActionCancel})
			}
			if err != nil {
				return fmt.Errorf("moving %s: %v", id, err)
			}
		}
		for _, id := range []string{fmt.Sprintf("m%03d", page*4+1), fmt.Sprintf("m%03d", 119-page*2)} {
			if _, _, err := e.q.Enqueue(e.ctx, queue.NewJob{ID: id}); err != nil {
				return err
			}
		}
		if p.Next == "" {
			break
		}
		if page > 100 {
			return errors.New("paging does not end")
		}
		f.After = p.Next
	}
	for id, c := range seen {
		if c > 1 {
			return fmt.Errorf("%s was listed %d times", id, c)
		}
	}
	for id := range stable {
		if seen[id] != 1 {
			return fmt.Errorf("%s kept its state throughout but was listed %d times", id, seen[id])
		}
	}
	return nil
}

func mapKeys(m map[string]bool) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// checkBulk: CancelAll and RequeueAll act on what the filter selects, up
// to Max, skip jobs whose state changed, record the actor, and a dry run
// changes nothing.
func checkBulk(s queue.Store) error {
	e, err := newAdminEnv(s, "bulk-q")
	if err != nil {
		return err
	}
	for _, id := range []string{"x1", "x2", "x3", "y1", "y2"} {
		if err := e.enqueue(queue.NewJob{ID: id}); err != nil {
			return err
		}
	}
	var seen []string
	b := queue.Bulk{Filter: queue.Filter{IDPrefix: "x", Limit: 2}, Rate: queue.MaxRedriveRate, DryRun: true,
		OnJob: func(j queue.Job) { seen = append(seen, j.ID) }}
	res, err := e.q.CancelAll(e.ctx, b)
	if err != nil || res.Acted != 3 || !slices.Equal(seen, []string{"x1", "x2", "x3"}) {
		return fmt.Errorf("CancelAll dry run = %+v, %v, selected %v; want x1 x2 x3", res, err, seen)
	}
	if st, _ := e.q.Stats(e.ctx); st.Dead() != 0 {
		return fmt.Errorf("a dry run changed jobs: %+v", st)
	}
	b.DryRun, b.Actor, b.Max, seen = false, "bulk-op", 2, nil
	if res, err := e.q.CancelAll(e.ctx, b); err != nil || res.Acted != 2 || !slices.Equal(seen, []string{"x1", "x2"}) {
		return fmt.Errorf("CancelAll max 2 = %+v, %v, cancelled %v", res, err, seen)
	}
	for _, id := range []string{"x1", "x2"} {
		if st := e.state(id); st != "dead canceled" {
			return fmt.Errorf("%s is %s after CancelAll", id, st)
		}
		if h, _ := e.q.History(e.ctx, id); len(h) != 1 || h[0].Actor != "bulk-op" {
			return fmt.Errorf("history of %s = %+v", id, h)
		}
	}
	if e.state("x3") != "pending" {
		return fmt.Errorf("x3 (past Max) is %s", e.state("x3"))
	}
	e.clock.Advance(1000)
	seen = nil
	rb := queue.Bulk{Filter: queue.Filter{Reason: queue.Canceled}, Rate: queue.MaxRedriveRate, Actor: "fixer",
		OnJob: func(j queue.Job) { seen = append(seen, j.ID) }}
	res, err = e.q.RequeueAll(e.ctx, rb, 3, time.Hour)
	if err != nil || res.Acted != 2 || !slices.Equal(seen, []string{"x1", "x2"}) {
		return fmt.Errorf("RequeueAll = %+v, %v, requeued %v", res, err, seen)
	}
	j, _ := e.s.Get(e.ctx, "x1")
	if j.State != queue.Pending || j.MaxAttempts != 3 || j.Deadline != e.clock.Now()+3600_000 {
		return fmt.Errorf("x1 after RequeueAll: %+v", j)
	}
	if h, _ := e.q.History(e.ctx, "x1"); len(h) != 2 || h[1].Actor != "fixer" || h[1].Action != queue.ActionRequeue {
		return fmt.Errorf("history of x1 = %+v", h)
	}
	// Redrive (reason "") leaves cancelled jobs alone.
	if _, err := e.q.Cancel(e.ctx, "y1", "ops"); err != nil {
		return err
	}
	rd, err := e.q.Redrive(e.ctx, queue.Redrive{Grant: 1, Deadline: time.Hour, Rate: queue.MaxRedriveRate})
	if err != nil || rd.Requeued != 0 || e.state("y1") != "dead canceled" {
		return fmt.Errorf("bulk requeue (Redrive) without a reason = %+v, %v, y1 %s; want cancelled jobs left alone", rd, err, e.state("y1"))
	}
	return nil
}

// checkAdminBadInput: malformed filters, actors and IDs are refused with
// ErrInvalid naming the field, before the store is touched.
func checkAdminBadInput(s queue.Store) error {
	e, err := newAdminEnv(s, "bad-q")
	if err != nil {
		return err
	}
	if err := e.enqueue(queue.NewJob{ID: "j"}); err != nil {
		return err
	}
	for _, c := range []struct {
		name string
		err  error
		word string
	}{
		{"state", pageErr(e, queue.Filter{State: "running"}), "state"},
		{"reason", pageErr(e, queue.Filter{Reason: "tired"}), "reason"},
		{"reason of pending", pageErr(e, queue.Filter{State: queue.Pending, Reason: queue.Exhausted}), "reason"},
		{"limit", pageErr(e, queue.Filter{Limit: queue.MaxPageSize + 1}), "limit"},
		{"negative limit", pageErr(e, queue.Filter{Limit: -1}), "limit"},
		{"ages", pageErr(e, queue.Filter{OlderThan: time.Hour, NewerThan: time.Minute}), "newer-than"},
		{"negative age", pageErr(e, queue.Filter{OlderThan: -time.Hour}), "older-than"},
		{"queue", pageErr(e, queue.Filter{Queue: "no spaces"}), "queue"},
		{"prefix", pageErr(e, queue.Filter{IDPrefix: "a\x00"}), "id"},
		{"after", pageErr(e, queue.Filter{After: strings.Repeat("x", queue.MaxIDLen+1)}), "after"},
		{"actor", second(e.q.Cancel(e.ctx, "j", "")), "actor"},
		{"actor control", second(e.q.Cancel(e.ctx, "j", "a\nb")), "actor"},
		{"id", second(e.q.Cancel(e.ctx, "", "ops")), "id"},
		{"delete actor", second(e.q.Delete(e.ctx, "j", "")), "actor"},
		{"pause queue", second(e.q.Pause(e.ctx, "bad name", "ops")), "queue"},
		{"pause actor", second(e.q.Pause(e.ctx, "", "")), "actor"},
		{"bulk actor", second(e.q.CancelAll(e.ctx, queue.Bulk{Rate: 1})), "actor"},
		{"bulk rate", second(e.q.CancelAll(e.ctx, queue.Bulk{Actor: "ops"})), "rate"},
		{"bulk state", second(e.q.CancelAll(e.ctx, queue.Bulk{Actor: "ops", Rate: 1, Filter: queue.Filter{State: queue.Dead}})), "state"},
		{"bulk grant", second(e.q.RequeueAll(e.ctx, queue.Bulk{Actor: "ops", Rate: 1}, 0, time.Hour)), "attempts"},
	} {
		if !errors.Is(c.err, queue.ErrInvalid) || !strings.Contains(c.err.Error(), c.word) {
			return fmt.Errorf("%s: got %v; want ErrInvalid naming %q", c.name, c.err, c.word)
		}
	}
	if e.state("j") != "pending" {
		return fmt.Errorf("bad input changed a job: %s", e.state("j"))
	}
	return nil
}

func pageErr(e *adminEnv, f queue.Filter) error {
	_, err := e.q.Jobs(e.ctx, f)
	return err
}

func second[T any](_ T, err error) error { return err }
