package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Errors of the operator's actions.
var (
	// ErrLeased: the job is leased — a worker holds it and may be running
	// its handler — so it is not cancelled or deleted under that handler.
	// Nothing was changed; try again once the attempt has ended.
	ErrLeased = errors.New("queue: job is leased by a worker")
	// ErrNotPending: Cancel was asked for a job that is done or dead
	// (cancelled already, for one). Nothing was changed.
	ErrNotPending = errors.New("queue: job is not pending")
	// ErrNoAdmin: the store does not implement AdminStore.
	ErrNoAdmin = errors.New("queue: the store does not implement AdminStore")
)

// Canceled is the DeadReason of a job an operator cancelled (Queue.Cancel):
// it is dead, kept and purged like any dead job, and Requeue brings it
// back.
const Canceled DeadReason = "canceled"

// The Actions of a job's history (Event.Action).
const (
	ActionCancel  = "cancel"  // a pending job was cancelled (dead, reason canceled)
	ActionRequeue = "requeue" // a dead job was given new attempts and a deadline
)

// MaxActorLen is the longest Event.Actor in bytes.
const MaxActorLen = 128

// Page sizes of Queue.Jobs (Filter.Limit).
const (
	DefaultPageSize = 100
	MaxPageSize     = 10000
)

// Event is one operator action in a job's history: who did what, when.
type Event struct {
	// At is when the action was taken, Unix ms (the queue's clock).
	At int64
	// Actor is who took it, as the caller named them (the CLI: --actor or
	// the OS user); "" for a Requeue through the API that names no one.
	Actor string
	// Action is ActionCancel or ActionRequeue.
	Action string
	// Detail says what changed, for a person to read
	// ("attempts 3/6, deadline 2026-12-07T10:00:00.000Z").
	Detail string
}

// Pause says that a named queue is paused, since when and by whom.
type Pause struct {
	Queue string
	At    int64 // Unix ms
	Actor string
}

// Search is what AdminStore.Search selects, with absolute times: jobs of
// Queue in one of States, ordered by ID (byte order), ID > After.
type Search struct {
	Queue  string
	States []State // one or more; never empty
	// Reason, when set, selects dead jobs of that reason only.
	Reason DeadReason
	// IDPrefix, when set, selects IDs that start with it.
	IDPrefix string
	// SinceBefore and SinceAfter, when not 0, bound a job's "since" time —
	// its FinishedAt when done or dead, its CreatedAt otherwise —
	// strictly: since < SinceBefore, since > SinceAfter.
	SinceBefore, SinceAfter int64
	// After is the keyset cursor: only IDs that sort after it ("" none).
	After string
	// Limit is the most jobs returned, 1 to MaxPageSize.
	Limit int
	// NoPayload leaves the payloads out: every job's Payload is nil, and
	// a store reads no payload bytes (see Filter.NoPayload).
	NoPayload bool
}

// AdminStore is implemented by stores that take an operator's actions.
// Every store of this repository does. Each method is one committed
// transaction; actions on one job are atomic, so of two callers acting on
// the same job at once one succeeds and the other gets the error its
// state now calls for, and nothing is done twice. An Event is written in
// the job's history in the same transaction as the change it records.
//
// Claim and ClaimLimited (and RecordAndClaim) of such a store return no
// job of a paused queue.
type AdminStore interface {
	// Search returns up to s.Limit jobs that s selects, ordered by ID.
	Search(ctx context.Context, s Search) ([]Job, error)
	// Cancel makes a pending job dead with reason Canceled (FinishedAt =
	// UpdatedAt = e.At) and records e. It returns the job as stored
	// after it, ErrNotFound, ErrLeased or ErrNotPending (changing nothing).
	Cancel(ctx context.Context, id string, e Event) (Job, error)
	// Delete removes a job that is not leased, with its history, and
	// returns it as it was; ErrNotFound or ErrLeased change nothing.
	Delete(ctx context.Context, id string) (Job, error)
	// RequeueEvent is Store.Requeue, recording e with it.
	RequeueEvent(ctx context.Context, id string, grant int, deadline, now int64, e Event) (Job, error)
	// SetPaused pauses (paused true) or resumes the named queue, recording
	// who and when (e) for a pause, and reports whether it changed
	// anything (false: it was paused already, or not paused).
	SetPaused(ctx context.Context, queue string, paused bool, e Event) (bool, error)
	// Pauses lists the paused queues, by name.
	Pauses(ctx context.Context) ([]Pause, error)
	// History returns the events of a job, oldest first (none for an
	// unknown ID).
	History(ctx context.Context, id string) ([]Event, error)
}

// ValidateActor reports whether actor is usable in an Event: 1 to
// MaxActorLen bytes of valid UTF-8 without control characters.
func ValidateActor(actor string) error {
	if actor == "" {
		return fmt.Errorf("%w: actor must not be empty: say who acts", ErrInvalid)
	}
	return validText("actor", actor, MaxActorLen)
}

// Filter selects jobs for Queue.Jobs, Queue.CancelAll and Queue.RequeueAll.
// The zero Filter selects every job of the Queue's own queue.
type Filter struct {
	// Queue is the named queue; "" means the Queue's own (Config.Queue).
	Queue string
	// State selects one state; "" every state.
	State State
	// Reason selects dead jobs of one reason (State must be "" or Dead).
	Reason DeadReason
	// IDPrefix selects IDs that start with it ("" every ID).
	IDPrefix string
	// OlderThan and NewerThan select by age: how long ago a done or dead
	// job finished, or a pending or leased one was enqueued. Zero means no
	// bound.
	OlderThan, NewerThan time.Duration
	// After is the keyset cursor: jobs whose ID sorts after it (byte
	// order); Page.Next of the previous page.
	After string
	// Limit is the page size, 1 to MaxPageSize; 0 means DefaultPageSize.
	Limit int
	// NoPayload lists the jobs without their payloads (Job.Payload nil):
	// a listing to show, whose rows cost their metadata only however big
	// the payloads are. Get reads one job's payload.
	NoPayload bool
}

// Page is one page of Queue.Jobs.
type Page struct {
	// Jobs in ID order (byte order).
	Jobs []Job
	// Next is the Filter.After of the next page; "" when this page is the
	// last. A job that keeps its state while the pages are read is listed
	// exactly once, however other jobs move meanwhile.
	Next string
}

// Bulk says which jobs Queue.CancelAll and Queue.RequeueAll act on, how
// fast and in whose name.
type Bulk struct {
	// Filter selects the jobs (its Limit is the size of each page read,
	// its After where to start).
	Filter Filter
	// Max is the most jobs to act on; 0 means all that match.
	Max int
	// Rate is how many jobs are acted on per second (at most
	// MaxRedriveRate): job i i/Rate seconds after the first.
	Rate float64
	// DryRun selects and reports the jobs but changes nothing and does not
	// wait.
	DryRun bool
	// Actor is who acts, recorded in each job's history (required unless
	// DryRun).
	Actor string
	// OnJob, when set, receives each job acted on (as stored after the
	// action) or, in a dry run, each job selected.
	OnJob func(Job)
}

// BulkResult counts what a bulk action did.
type BulkResult struct {
	Acted int // jobs changed (selected, in a dry run)
	// Skipped are selected jobs whose state no longer allowed the action
	// when their turn came (claimed, finished, requeued or deleted
	// meanwhile).
	Skipped int
}

func (q *Queue) admin() (AdminStore, error) {
	a, ok := q.store.(AdminStore)
	if !ok {
		return nil, ErrNoAdmin
	}
	return a, nil
}

// queueName is name, or q's own queue when "", validated.
func (q *Queue) queueName(name string) (string, error) {
	if name == "" {
		name = q.cfg.Queue
	}
	return name, ValidateQueue(name)
}

// Cancel cancels a pending job (due or scheduled): it becomes dead with
// reason Canceled and is never claimed again (Requeue brings it back).
// actor is recorded in the job's history. A leased job is refused with
// ErrLeased — a handler may be running it, and it is not cancelled under
// that handler — as is a done or dead job with ErrNotPending; unknown IDs
// return ErrNotFound. Errors name the job and its state.
func (q *Queue) Cancel(ctx context.Context, id, actor string) (Job, error) {
	a, err := q.admin()
	if err != nil {
		return Job{}, err
	}
	if err := checkAction(id, actor); err != nil {
		return Job{}, err
	}
	j, err := a.Cancel(ctx, id, Event{At: q.now(), Actor: actor, Action: ActionCancel, Detail: "cancelled"})
	return j, q.actionError(ctx, "cancel", id, err)
}

// Delete removes a job that is not leased — pending, done or dead — and
// its history, returning it as it was. The ID is free for a new job
// afterwards. A leased job is refused with ErrLeased; unknown IDs return
// ErrNotFound. Cancel keeps the job and records who cancelled it; Delete
// keeps nothing, so actor is checked but not stored.
func (q *Queue) Delete(ctx context.Context, id, actor string) (Job, error) {
	a, err := q.admin()
	if err != nil {
		return Job{}, err
	}
	if err := checkAction(id, actor); err != nil {
		return Job{}, err
	}
	j, err := a.Delete(ctx, id)
	return j, q.actionError(ctx, "delete", id, err)
}

// RequeueAs is Requeue recording actor in the job's history.
func (q *Queue) RequeueAs(ctx context.Context, id string, grant int, deadline int64, actor string) (Job, error) {
	if err := ValidateActor(actor); err != nil {
		return Job{}, err
	}
	return q.requeue(ctx, id, grant, deadline, actor)
}

// Pause pauses the named queue ("": the Queue's own) in the store, for
// every worker process and host: claims take none of its jobs until
// Resume; its jobs stay, enqueues go on, the leased ones run to their
// end. A claim that started before the pause committed may still lease
// its batch. It reports false when the queue was paused already.
func (q *Queue) Pause(ctx context.Context, name, actor string) (bool, error) {
	return q.setPaused(ctx, name, actor, true)
}

// Resume resumes a paused queue ("": the Queue's own) and wakes this
// process's workers of it. It reports false when it was not paused.
func (q *Queue) Resume(ctx context.Context, name, actor string) (bool, error) {
	return q.setPaused(ctx, name, actor, false)
}

func (q *Queue) setPaused(ctx context.Context, name, actor string, paused bool) (bool, error) {
	a, err := q.admin()
	if err != nil {
		return false, err
	}
	if name, err = q.queueName(name); err != nil {
		return false, err
	}
	if err := ValidateActor(actor); err != nil {
		return false, err
	}
	changed, err := a.SetPaused(ctx, name, paused, Event{At: q.now(), Actor: actor})
	if err == nil && changed && !paused {
		q.wakeQueue(name)
	}
	return changed, err
}

// Pauses lists the paused queues of the store, by name.
func (q *Queue) Pauses(ctx context.Context) ([]Pause, error) {
	a, err := q.admin()
	if err != nil {
		return nil, err
	}
	return a.Pauses(ctx)
}

// History returns the operator actions on a job, oldest first.
func (q *Queue) History(ctx context.Context, id string) ([]Event, error) {
	a, err := q.admin()
	if err != nil {
		return nil, err
	}
	if err := ValidateID(id); err != nil {
		return nil, err
	}
	return a.History(ctx, id)
}

// Jobs lists one page of the jobs f selects, in ID order. Read the next
// page with f.After = Page.Next.
func (q *Queue) Jobs(ctx context.Context, f Filter) (Page, error) {
	a, err := q.admin()
	if err != nil {
		return Page{}, err
	}
	s, err := q.search(f, q.now())
	if err != nil {
		return Page{}, err
	}
	jobs, err := a.Search(ctx, s)
	if err != nil {
		return Page{}, err
	}
	p := Page{Jobs: jobs}
	if len(jobs) == s.Limit {
		p.Next = jobs[len(jobs)-1].ID
	}
	return p, nil
}

// AllStates are the states of a job, in their order of life.
var AllStates = []State{Pending, Leased, Done, Dead}

// ValidateState reports whether s is a job's state.
func ValidateState(s State) error {
	switch s {
	case Pending, Leased, Done, Dead:
		return nil
	}
	return fmt.Errorf("%w: state must be pending, leased, done or dead, got %q", ErrInvalid, s)
}

// ValidateReason reports whether r is a dead job's reason.
func ValidateReason(r DeadReason) error {
	switch r {
	case Exhausted, DeadlineReached, PermanentFailure, Canceled:
		return nil
	}
	return fmt.Errorf("%w: reason must be %s, %s, %s or %s, got %q", ErrInvalid, Exhausted, DeadlineReached, PermanentFailure, Canceled, r)
}

// search checks f and turns it into a store's Search at now.
func (q *Queue) search(f Filter, now int64) (Search, error) {
	name, err := q.queueName(f.Queue)
	if err != nil {
		return Search{}, err
	}
	s := Search{Queue: name, Reason: f.Reason, IDPrefix: f.IDPrefix, After: f.After, Limit: f.Limit, NoPayload: f.NoPayload}
	switch {
	case f.State != "":
		if err := ValidateState(f.State); err != nil {
			return Search{}, err
		}
		s.States = []State{f.State}
	case f.Reason != "":
		s.States = []State{Dead}
	default:
		s.States = AllStates
	}
	if f.Reason != "" {
		if err := ValidateReason(f.Reason); err != nil {
			return Search{}, err
		}
		if f.State != "" && f.State != Dead {
			return Search{}, fmt.Errorf("%w: reason selects dead jobs; state must be dead or empty, got %q", ErrInvalid, f.State)
		}
	}
	if f.IDPrefix != "" {
		if err := ValidateID(f.IDPrefix); err != nil {
			return Search{}, fmt.Errorf("%w (id prefix)", err)
		}
	}
	if f.After != "" {
		if err := ValidateID(f.After); err != nil {
			return Search{}, fmt.Errorf("%w (after)", err)
		}
	}
	switch {
	case f.Limit == 0:
		s.Limit = DefaultPageSize
	case f.Limit < 1 || f.Limit > MaxPageSize:
		return Search{}, fmt.Errorf("%w: limit must be in [1, %d], got %d", ErrInvalid, MaxPageSize, f.Limit)
	}
	switch {
	case f.OlderThan < 0 || f.OlderThan > MaxDuration, f.NewerThan < 0 || f.NewerThan > MaxDuration:
		return Search{}, fmt.Errorf("%w: older-than and newer-than must be in [0, %v]", ErrInvalid, MaxDuration)
	case f.NewerThan > 0 && f.NewerThan <= f.OlderThan:
		return Search{}, fmt.Errorf("%w: newer-than (%v) must be longer than older-than (%v)", ErrInvalid, f.NewerThan, f.OlderThan)
	}
	if f.OlderThan > 0 {
		s.SinceBefore = now - f.OlderThan.Milliseconds()
	}
	if f.NewerThan > 0 {
		s.SinceAfter = now - f.NewerThan.Milliseconds()
	}
	return s, nil
}

// Since is the time a job's age is counted from in a Filter: FinishedAt
// when it is done or dead, CreatedAt otherwise.
func (j Job) Since() int64 {
	if j.State == Done || j.State == Dead {
		return j.FinishedAt
	}
	return j.CreatedAt
}

// Matches reports whether s selects j, ignoring After and Limit: the
// rule every AdminStore's Search follows.
func (s Search) Matches(j Job) bool {
	if j.Queue != s.Queue || (s.Reason != "" && j.DeadReason != s.Reason) || !strings.HasPrefix(j.ID, s.IDPrefix) {
		return false
	}
	if since := j.Since(); (s.SinceBefore != 0 && since >= s.SinceBefore) || (s.SinceAfter != 0 && since <= s.SinceAfter) {
		return false
	}
	for _, st := range s.States {
		if j.State == st {
			return true
		}
	}
	return false
}

func checkAction(id, actor string) error {
	if err := ValidateID(id); err != nil {
		return err
	}
	return ValidateActor(actor)
}

// actionError names the job, and its state when the action was refused.
func (q *Queue) actionError(ctx context.Context, verb, id string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrNotFound):
		return fmt.Errorf("%w: %s %q", err, verb, id)
	case errors.Is(err, ErrLeased):
		return fmt.Errorf("%w: cannot %s %q: a worker holds it; nothing was changed (try again once its attempt ends)", err, verb, id)
	case errors.Is(err, ErrNotPending):
		state := "unknown"
		if j, gerr := q.store.Get(ctx, id); gerr == nil {
			state = strings.TrimSpace(string(j.State) + " " + string(j.DeadReason))
		}
		return fmt.Errorf("%w: cannot %s %q (state %s); nothing was changed", err, verb, id, state)
	}
	return err
}

// CancelAll cancels the pending jobs b selects (b.Filter.State must be ""
// or Pending), in ID order at b.Rate jobs per second, each as Cancel. It
// stops when ctx is done or at the first store error, returning what it
// did so far.
func (q *Queue) CancelAll(ctx context.Context, b Bulk) (BulkResult, error) {
	if b.Filter.State != "" && b.Filter.State != Pending {
		return BulkResult{}, fmt.Errorf("%w: cancel selects pending jobs; state must be pending or empty, got %q", ErrInvalid, b.Filter.State)
	}
	if err := bulkActor(b); err != nil {
		return BulkResult{}, err
	}
	b.Filter.State = Pending
	return q.bulk(ctx, b, nil, func(j Job) (Job, error) { return q.Cancel(ctx, j.ID, b.Actor) })
}

// RequeueAll requeues the dead jobs b selects (b.Filter.State must be ""
// or Dead), in ID order at b.Rate jobs per second, each as RequeueAs with
// grant new attempts and a deadline deadline after its own requeue. It
// stops when ctx is done or at the first store error, returning what it
// did so far.
func (q *Queue) RequeueAll(ctx context.Context, b Bulk, grant int, deadline time.Duration) (BulkResult, error) {
	if b.Filter.State != "" && b.Filter.State != Dead {
		return BulkResult{}, fmt.Errorf("%w: requeue selects dead jobs; state must be dead or empty, got %q", ErrInvalid, b.Filter.State)
	}
	if err := checkGrant(grant, deadline); err != nil {
		return BulkResult{}, err
	}
	if err := bulkActor(b); err != nil {
		return BulkResult{}, err
	}
	b.Filter.State = Dead
	return q.bulk(ctx, b, nil, func(j Job) (Job, error) {
		return q.RequeueAs(ctx, j.ID, grant, addMs(q.now(), ceilMs(deadline)), b.Actor)
	})
}

func checkGrant(grant int, deadline time.Duration) error {
	switch {
	case grant < 1 || grant > MaxMaxAttempts:
		return fmt.Errorf("%w: attempts (granted) must be in [1, %d], got %d", ErrInvalid, MaxMaxAttempts, grant)
	case deadline < time.Millisecond || deadline > MaxDuration:
		return fmt.Errorf("%w: deadline must be in [1ms, %v], got %v", ErrInvalid, MaxDuration, deadline)
	}
	return nil
}

// bulkActor checks the actor of a bulk action that changes jobs.
func bulkActor(b Bulk) error {
	if b.DryRun && b.Actor == "" {
		return nil
	}
	return ValidateActor(b.Actor)
}
