package queue

import (
	"context"
	"errors"
)

// Errors of the queue and its stores.
var (
	// ErrInvalid is wrapped by every validation error; the message names
	// the field and the rule.
	ErrInvalid = errors.New("queue: invalid")
	// ErrNotFound: no job has that ID.
	ErrNotFound = errors.New("queue: job not found")
	// ErrNotDead: Requeue was asked for a job that is not dead.
	ErrNotDead = errors.New("queue: job is not dead")
	// ErrLeaseLost: the outcome of an attempt could not be recorded because
	// the worker no longer holds the job's lease (it expired and another
	// worker claimed the job, or the job was buried). The other worker's
	// attempt owns the job now; nothing was written.
	ErrLeaseLost = errors.New("queue: lease lost")
	// ErrClockBackwards: the clock read after the handler is earlier than
	// the one read at the claim or at its start. See Queue.RunOnce for the state it leaves.
	ErrClockBackwards = errors.New("queue: clock went backwards")
)

// Store is the durable part of a queue: a small set of atomic state
// transitions on job rows. It holds no rules — which error is retried, when,
// and why a job dies are decided by the Queue (with retry.Policy.Decide), so
// every store behaves the same; queuetest.Run proves a store implements this
// contract. Every method is one committed transaction and is safe for
// concurrent use by many goroutines, processes and hosts.
//
// A claim's attempt number is the lease's fencing token: the transitions
// that end or extend an attempt (Record, Extend) apply only while the row is
// still leased with that attempt count, so a worker whose lease expired and
// was taken over can never overwrite the newer attempt. An extension also
// needs the lease to be live (LeaseUntil > now): a worker paused past its
// lease (GC pause, VM freeze, SIGSTOP) cannot revive it after the slot it
// held under Limits.MaxInFlight went to another job. A late outcome of an
// expired lease that no newer claim took is still written: it ends the
// lease (or, Leased, keeps it expired) and never makes it live again.
type Store interface {
	// Insert stores each job whose ID is not stored yet, all in one
	// transaction (all or nothing), and returns for every input, in order,
	// the stored job and whether this call created it. An existing job is
	// returned unchanged: its attempts, deadline and state are never reset.
	// Inputs are complete rows in state Pending (the Queue fills them in);
	// the same ID twice in one call creates it once.
	Insert(ctx context.Context, jobs []Job) ([]Inserted, error)

	// Claim leases up to limit claimable jobs of the named queue in one
	// transaction and returns them as stored after the claim. A job is
	// claimable at now when its Queue is queue, its state is Pending or Leased, AvailableAt <= now, Attempts < MaxAttempts
	// and Deadline > now. Claiming sets State = Leased, Attempts += 1,
	// LeaseUntil = AvailableAt = leaseUntil, UpdatedAt = now. Jobs are taken
	// in order of (AvailableAt, ID); concurrent claims never return the same
	// attempt twice. Nothing claimable returns an empty slice.
	Claim(ctx context.Context, queue string, now, leaseUntil int64, limit int) ([]Job, error)

	// Record ends attempts, all in one transaction. Outcome i applies only if
	// job ID is still Leased with Attempts == Attempt; Record sets
	// outcomes[i].Applied to say whether it did. An outcome that does not
	// apply changes nothing and is not an error.
	Record(ctx context.Context, outcomes []Outcome) error

	// Extend sets LeaseUntil = AvailableAt = leaseUntil (and UpdatedAt =
	// now) for each lease still held (State Leased, Attempts == Attempt,
	// LeaseUntil > now), setting leases[i].Held accordingly — the
	// heartbeat of a long handler. A lease that ran out is not extended,
	// even when no other claim took the job: its slot may be another's.
	Extend(ctx context.Context, leases []Lease, now, leaseUntil int64) error

	// Bury moves up to limit jobs (of every queue) that can never be
	// claimed again (see Stats.DueToDie) to Dead and returns how many it moved: jobs that are Pending, or Leased with
	// AvailableAt <= now (an expired lease), and whose Attempts >=
	// MaxAttempts (reason Exhausted, LastError kept or, when empty, a note
	// that the last attempt's outcome is unknown) or, failing that, whose
	// Deadline <= now (reason DeadlineReached). FinishedAt = UpdatedAt = now.
	Bury(ctx context.Context, now int64, limit int) (int, error)

	// Get returns the job with that ID, or ErrNotFound.
	Get(ctx context.Context, id string) (Job, error)

	// List returns up to limit jobs of the named queue in state, with
	// ID > after, ordered by ID.
	List(ctx context.Context, queue string, state State, after string, limit int) ([]Job, error)

	// Requeue moves a Dead job back to Pending: MaxAttempts = Attempts +
	// grant, Deadline = deadline, AvailableAt = UpdatedAt = now, DeadReason
	// and FinishedAt cleared, Attempts and LastError kept. It returns the
	// updated job, ErrNotFound, or ErrNotDead (changing nothing).
	Requeue(ctx context.Context, id string, grant int, deadline, now int64) (Job, error)

	// Stats counts jobs by state at now. A job Bury would move at now is
	// counted in DueToDie only, not in its state's counts.
	Stats(ctx context.Context, queue string, now int64) (Stats, error)
}

// Inserted is one result of Store.Insert.
type Inserted struct {
	Job     Job  // the job as stored: the input, or the existing job with that ID
	Created bool // this call created the job; false when the ID was already stored
}

// Outcome is the end of one attempt, as recorded by Store.Record.
type Outcome struct {
	// ID and Attempt identify the lease: the job's Attempts at the claim.
	ID      string
	Attempt int // the claim's attempt number, the fencing token
	// State is the job's new state: Done, Pending (retry at AvailableAt;
	// also a release at shutdown), Dead (with DeadReason), or Leased (the
	// lease is kept until it expires; only LastError is written).
	State       State
	AvailableAt int64      // Pending: when the job is due again, Unix ms; ignored otherwise
	DeadReason  DeadReason // Dead: why; ignored otherwise
	// LastError is written for every state but Done (where it is kept).
	LastError string
	// Now is the time of the outcome: UpdatedAt, and FinishedAt for Done
	// and Dead.
	Now int64
	// Applied is set by Record: the lease was still held and the outcome
	// was written.
	Applied bool
}

// Lease names one claimed attempt, for Store.Extend.
type Lease struct {
	ID      string // the job's ID
	Attempt int    // the job's Attempts at the claim: the fencing token
	// Held is set by Extend: the lease was still held and was extended.
	Held bool
}

// Stats are the counts of the jobs of one queue by state at one instant.
type Stats struct {
	// PendingDue are pending jobs with AvailableAt <= now; PendingScheduled
	// those waiting for a later time. Neither counts a job due to die.
	PendingDue, PendingScheduled int64
	// Leased are jobs claimed by a worker; LeasedExpired those among them
	// whose lease has expired (claimable again). Neither counts a job due
	// to die.
	Leased, LeasedExpired int64
	// DueToDie are jobs that can never be claimed again and wait for the
	// next sweep (Queue.Sweep, a Worker's maintenance, RunOnce) to bury
	// them: pending, or leased with an expired lease, whose attempts are
	// spent or whose deadline has passed.
	DueToDie int64
	Done     int64 // jobs that succeeded
	// Dead by reason (DeadCanceled: cancelled by an operator).
	DeadExhausted, DeadDeadline, DeadPermanent, DeadCanceled int64
	// OldestDueAt is the smallest AvailableAt of the pending due jobs that
	// can still run (meaningless when PendingDue is 0).
	OldestDueAt int64
	// Now is the time the counts were taken at.
	Now int64
}

// Add counts n jobs of one (state, dead reason, due, dying) group into s,
// for stores that count with one GROUP BY: due says AvailableAt <= Now,
// dying that Bury would move the jobs at Now (see DueToDie), oldest is the
// group's smallest AvailableAt.
func (s *Stats) Add(state State, reason DeadReason, due, dying bool, n, oldest int64) {
	if dying && (state == Pending || state == Leased) {
		s.DueToDie += n
		return
	}
	switch state {
	case Pending:
		if due {
			s.PendingDue += n
			if s.PendingDue == n || oldest < s.OldestDueAt {
				s.OldestDueAt = oldest
			}
		} else {
			s.PendingScheduled += n
		}
	case Leased:
		s.Leased += n
		if due {
			s.LeasedExpired += n
		}
	case Done:
		s.Done += n
	case Dead:
		switch reason {
		case Exhausted:
			s.DeadExhausted += n
		case DeadlineReached:
			s.DeadDeadline += n
		case PermanentFailure:
			s.DeadPermanent += n
		case Canceled:
			s.DeadCanceled += n
		}
	}
}

// Pending is PendingDue + PendingScheduled (jobs due to die not included).
// Pending going down is not success: jobs may have moved to dead.
func (s Stats) Pending() int64 { return s.PendingDue + s.PendingScheduled }

// Dead is the number of dead jobs, all reasons.
func (s Stats) Dead() int64 {
	return s.DeadExhausted + s.DeadDeadline + s.DeadPermanent + s.DeadCanceled
}

// OldestPendingAge is how long the oldest due job has waited past its
// AvailableAt, in milliseconds (0 when nothing is due).
func (s Stats) OldestPendingAge() int64 {
	if s.PendingDue == 0 || s.Now < s.OldestDueAt {
		return 0
	}
	return s.Now - s.OldestDueAt
}

// StatsByQueuer is implemented by stores that count the jobs of every
// queue at once (Queue.StatsByQueue; stagger queue stats). Every store of
// this repository does.
type StatsByQueuer interface {
	// StatsByQueue returns the Stats at now of every queue that holds a
	// job, by queue name, each as Store.Stats would count it.
	StatsByQueue(ctx context.Context, now int64) (map[string]Stats, error)
}

// RecordClaimer is implemented by stores that can record outcomes and claim
// new jobs in one transaction: Record(outcomes) followed by Claim(queue,
// now, leaseUntil, limit), both as specified by Store, committed together (or
// not at all). A Worker on such a store pays one commit per turn instead of
// two (SQLite: one transaction on the one writer; PostgreSQL: one pipelined
// round trip); on other stores it commits outcomes in transactions of
// their own, beside the claims.
type RecordClaimer interface {
	RecordAndClaim(ctx context.Context, outcomes []Outcome, queue string, now, leaseUntil int64, limit int) ([]Job, error)
}

// Notifier is implemented by stores that can wake workers when a job may
// have become claimable (PostgreSQL's LISTEN/NOTIFY). Subscribe returns a
// channel that receives (coalesced) wake-ups until cancel is called.
type Notifier interface {
	Subscribe() (wake <-chan struct{}, cancel func())
}

// InboxStore is implemented by stores that hold a durable Inbox on the same
// database as the queue.
type InboxStore interface {
	Inbox() Inbox
}
