package queue

import (
	"bytes"
	"cmp"
	"context"
	"slices"
	"sync"
)

// MemoryStore is a Store in process memory: for tests, examples and
// single-process use where losing every job at exit is acceptable. It passes
// the same conformance suite (queuetest) as the durable stores. Claims scan
// every job, so keep it small.
type MemoryStore struct {
	mu      sync.Mutex
	jobs    map[string]*Job
	buckets map[string]Bucket // Limits' claim-rate reserve per queue
	paused  map[string]Pause  // paused queues
	history map[string][]Event
}

var _ Purger = (*MemoryStore)(nil)
var _ LimitedClaimer = (*MemoryStore)(nil)
var _ AdminStore = (*MemoryStore)(nil)

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore { return &MemoryStore{jobs: map[string]*Job{}} }

func clone(j *Job) Job {
	c := *j
	c.Payload = bytes.Clone(j.Payload)
	return c
}

// Insert implements Store.
func (m *MemoryStore) Insert(ctx context.Context, jobs []Job) ([]Inserted, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Inserted, len(jobs))
	for i := range jobs {
		if j, ok := m.jobs[jobs[i].ID]; ok {
			out[i] = Inserted{Job: clone(j)}
			continue
		}
		j := clone(&jobs[i])
		if j.Queue == "" {
			j.Queue = DefaultQueue
		}
		m.jobs[j.ID] = &j
		out[i] = Inserted{Job: clone(&j), Created: true}
	}
	return out, nil
}

// Claim implements Store.
func (m *MemoryStore) Claim(ctx context.Context, queue string, now, leaseUntil int64, limit int) ([]Job, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.claim(queue, now, leaseUntil, limit), nil
}

// ClaimLimited implements LimitedClaimer.
func (m *MemoryStore) ClaimLimited(ctx context.Context, queue string, lim Limits, now, leaseUntil int64, limit int) ([]Job, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	inFlight := 0
	for _, j := range m.jobs {
		if j.Queue == queue && j.State == Leased && j.LeaseUntil > now {
			inFlight++
		}
	}
	b, ok := m.buckets[queue]
	if !ok {
		b = lim.FullBucket(now)
	}
	jobs := m.claim(queue, now, leaseUntil, lim.Allow(inFlight, b, now, limit))
	if m.buckets == nil {
		m.buckets = map[string]Bucket{}
	}
	m.buckets[queue] = lim.Spend(b, now, len(jobs))
	return jobs, nil
}

// RecordAndClaim implements RecordClaimer.
func (m *MemoryStore) RecordAndClaim(ctx context.Context, outcomes []Outcome, queue string, now, leaseUntil int64, limit int) ([]Job, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.record(outcomes)
	return m.claim(queue, now, leaseUntil, limit), nil
}

func (m *MemoryStore) claim(queue string, now, leaseUntil int64, limit int) []Job {
	if _, paused := m.paused[queue]; paused {
		return nil
	}
	var due []*Job
	for _, j := range m.jobs {
		if j.Queue == queue && (j.State == Pending || j.State == Leased) && j.AvailableAt <= now && j.Attempts < j.MaxAttempts && j.Deadline > now {
			due = append(due, j)
		}
	}
	slices.SortFunc(due, func(a, b *Job) int {
		return cmp.Or(cmp.Compare(a.AvailableAt, b.AvailableAt), cmp.Compare(a.ID, b.ID))
	})
	if len(due) > limit {
		due = due[:max(limit, 0)]
	}
	out := make([]Job, len(due))
	for i, j := range due {
		j.State, j.Attempts, j.LeaseUntil, j.AvailableAt, j.UpdatedAt = Leased, j.Attempts+1, leaseUntil, leaseUntil, now
		out[i] = clone(j)
	}
	return out
}

// Record implements Store.
func (m *MemoryStore) Record(ctx context.Context, outcomes []Outcome) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.record(outcomes)
	return nil
}

func (m *MemoryStore) record(outcomes []Outcome) {
	for i := range outcomes {
		o := &outcomes[i]
		j, ok := m.jobs[o.ID]
		o.Applied = ok && j.State == Leased && j.Attempts == o.Attempt
		if o.Applied {
			apply(j, *o)
		}
	}
}

// Extend implements Store.
func (m *MemoryStore) Extend(ctx context.Context, leases []Lease, now, leaseUntil int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range leases {
		j, ok := m.jobs[leases[i].ID]
		leases[i].Held = ok && j.State == Leased && j.Attempts == leases[i].Attempt && j.LeaseUntil > now
		if leases[i].Held {
			j.LeaseUntil, j.AvailableAt, j.UpdatedAt = leaseUntil, leaseUntil, now
		}
	}
	return nil
}

// UnknownOutcome is the LastError Bury writes on a job whose last attempt's
// lease expired without a recorded error.
const UnknownOutcome = "lease expired: the outcome of the last attempt is unknown"

// Bury implements Store.
func (m *MemoryStore) Bury(ctx context.Context, now int64, limit int) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, j := range m.jobs {
		if n >= limit {
			break
		}
		if !buriable(j, now) {
			continue
		}
		switch {
		case j.Attempts >= j.MaxAttempts:
			j.DeadReason = Exhausted
			if j.LastError == "" {
				j.LastError = UnknownOutcome
			}
		case j.Deadline <= now:
			j.DeadReason = DeadlineReached
		}
		j.State, j.LeaseUntil, j.FinishedAt, j.UpdatedAt = Dead, 0, now, now
		n++
	}
	return n, nil
}

// buriable is Bury's condition: j can never be claimed again at now.
func buriable(j *Job, now int64) bool {
	return (j.State == Pending || (j.State == Leased && j.AvailableAt <= now)) &&
		(j.Attempts >= j.MaxAttempts || j.Deadline <= now)
}

// Purge implements Purger.
func (m *MemoryStore) Purge(ctx context.Context, state State, before int64, limit int) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if state != Done && state != Dead {
		return 0, nil
	}
	var old []*Job
	for _, j := range m.jobs {
		if j.State == state && j.FinishedAt < before {
			old = append(old, j)
		}
	}
	slices.SortFunc(old, func(a, b *Job) int {
		return cmp.Or(cmp.Compare(a.FinishedAt, b.FinishedAt), cmp.Compare(a.ID, b.ID))
	})
	old = old[:min(len(old), max(limit, 0))]
	for _, j := range old {
		delete(m.jobs, j.ID)
		delete(m.history, j.ID)
	}
	return len(old), nil
}

// CountFinished implements Purger.
func (m *MemoryStore) CountFinished(ctx context.Context, state State, before int64) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var n int64
	for _, j := range m.jobs {
		if (state == Done || state == Dead) && j.State == state && j.FinishedAt < before {
			n++
		}
	}
	return n, nil
}

// Get implements Store.
func (m *MemoryStore) Get(ctx context.Context, id string) (Job, error) {
	if err := ctx.Err(); err != nil {
		return Job{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	j, ok := m.jobs[id]
	if !ok {
		return Job{}, ErrNotFound
	}
	return clone(j), nil
}

// List implements Store.
func (m *MemoryStore) List(ctx context.Context, queue string, state State, after string, limit int) ([]Job, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Job
	for _, j := range m.jobs {
		if j.Queue == queue && j.State == state && j.ID > after {
			out = append(out, clone(j))
		}
	}
	slices.SortFunc(out, func(a, b Job) int { return cmp.Compare(a.ID, b.ID) })
	if len(out) > limit {
		out = out[:max(limit, 0)]
	}
	return out, nil
}

// Requeue implements Store.
func (m *MemoryStore) Requeue(ctx context.Context, id string, grant int, deadline, now int64) (Job, error) {
	if err := ctx.Err(); err != nil {
		return Job{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.requeue(id, grant, deadline, now)
}

func (m *MemoryStore) requeue(id string, grant int, deadline, now int64) (Job, error) {
	j, ok := m.jobs[id]
	switch {
	case !ok:
		return Job{}, ErrNotFound
	case j.State != Dead:
		return Job{}, ErrNotDead
	}
	j.State, j.MaxAttempts, j.Deadline, j.AvailableAt, j.UpdatedAt = Pending, j.Attempts+grant, deadline, now, now
	j.DeadReason, j.FinishedAt, j.LeaseUntil = "", 0, 0
	return clone(j), nil
}

// RequeueEvent implements AdminStore.
func (m *MemoryStore) RequeueEvent(ctx context.Context, id string, grant int, deadline, now int64, e Event) (Job, error) {
	if err := ctx.Err(); err != nil {
		return Job{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	j, err := m.requeue(id, grant, deadline, now)
	if err == nil {
		m.addEvent(id, e)
	}
	return j, err
}

func (m *MemoryStore) addEvent(id string, e Event) {
	if m.history == nil {
		m.history = map[string][]Event{}
	}
	m.history[id] = append(m.history[id], e)
}

// Cancel implements AdminStore.
func (m *MemoryStore) Cancel(ctx context.Context, id string, e Event) (Job, error) {
	if err := ctx.Err(); err != nil {
		return Job{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	j, ok := m.jobs[id]
	switch {
	case !ok:
		return Job{}, ErrNotFound
	case j.State == Leased:
		return Job{}, ErrLeased
	case j.State != Pending:
		return Job{}, ErrNotPending
	}
	j.State, j.DeadReason, j.FinishedAt, j.UpdatedAt = Dead, Canceled, e.At, e.At
	m.addEvent(id, e)
	return clone(j), nil
}

// Delete implements AdminStore.
func (m *MemoryStore) Delete(ctx context.Context, id string) (Job, error) {
	if err := ctx.Err(); err != nil {
		return Job{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	j, ok := m.jobs[id]
	switch {
	case !ok:
		return Job{}, ErrNotFound
	case j.State == Leased:
		return Job{}, ErrLeased
	}
	delete(m.jobs, id)
	delete(m.history, id)
	return clone(j), nil
}

// SetPaused implements AdminStore.
func (m *MemoryStore) SetPaused(ctx context.Context, queue string, paused bool, e Event) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	_, was := m.paused[queue]
	switch {
	case paused && !was:
		if m.paused == nil {
			m.paused = map[string]Pause{}
		}
		m.paused[queue] = Pause{Queue: queue, At: e.At, Actor: e.Actor}
	case !paused && was:
		delete(m.paused, queue)
	}
	return paused != was, nil
}

// Pauses implements AdminStore.
func (m *MemoryStore) Pauses(ctx context.Context) ([]Pause, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Pause, 0, len(m.paused))
	for _, p := range m.paused {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Pause) int { return cmp.Compare(a.Queue, b.Queue) })
	return out, nil
}

// History implements AdminStore.
func (m *MemoryStore) History(ctx context.Context, id string) ([]Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.history[id]), nil
}

// Search implements AdminStore.
func (m *MemoryStore) Search(ctx context.Context, s Search) ([]Job, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Job
	for _, j := range m.jobs {
		if j.ID > s.After && s.Matches(*j) {
			c := *j
			c.Payload = nil
			if !s.NoPayload {
				c.Payload = bytes.Clone(j.Payload)
			}
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b Job) int { return cmp.Compare(a.ID, b.ID) })
	return out[:min(len(out), max(s.Limit, 0))], nil
}

// Stats implements Store.
func (m *MemoryStore) Stats(ctx context.Context, queue string, now int64) (Stats, error) {
	all, err := m.countStats(ctx, now, &queue)
	st := all[queue]
	st.Now = now // zero counts when the queue holds no job
	return st, err
}

// StatsByQueue implements StatsByQueuer.
func (m *MemoryStore) StatsByQueue(ctx context.Context, now int64) (map[string]Stats, error) {
	return m.countStats(ctx, now, nil)
}

// countStats counts the jobs of the named queue (nil: of every queue).
func (m *MemoryStore) countStats(ctx context.Context, now int64, queue *string) (map[string]Stats, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]Stats{}
	for _, j := range m.jobs {
		if queue != nil && j.Queue != *queue {
			continue
		}
		s := out[j.Queue]
		s.Now = now
		s.Add(j.State, j.DeadReason, j.AvailableAt <= now, buriable(j, now), 1, j.AvailableAt)
		out[j.Queue] = s
	}
	return out, nil
}
