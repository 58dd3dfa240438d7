package queue

import (
	"context"
	"time"
)

// OldestDuer is implemented by stores that can find the oldest due job of
// a queue without counting the others (Queue.Lag; a gauge polls it). It
// is a read-only query and, like Store's methods, safe for concurrent use.
type OldestDuer interface {
	// OldestDue returns the smallest AvailableAt, in Unix ms, of the
	// queue's pending jobs that are due at now and can still run (as
	// Stats.OldestDueAt counts them: not due to die), and false when
	// there is none.
	OldestDue(ctx context.Context, queue string, now int64) (at int64, ok bool, err error)
}

// Lag returns how long the oldest due job of q's queue has waited past
// the time it became due (0 when nothing is due): the queue's lag, as
// Stats.OldestPendingAge counts it. On a store that is an [OldestDuer] it
// is one read-only lookup; on others it counts the queue's Stats. It
// never changes a job and is safe to call from any goroutine, as often as
// a gauge polls it.
func (q *Queue) Lag(ctx context.Context) (time.Duration, error) {
	now := q.now()
	var age int64
	if od, ok := q.store.(OldestDuer); ok {
		at, due, err := od.OldestDue(ctx, q.cfg.Queue, now)
		if err != nil {
			return 0, err
		}
		if due && at < now {
			age = now - at
		}
	} else {
		st, err := q.store.Stats(ctx, q.cfg.Queue, now)
		if err != nil {
			return 0, err
		}
		age = st.OldestPendingAge()
	}
	return time.Duration(age) * time.Millisecond, nil
}

// OldestDue implements OldestDuer.
func (m *MemoryStore) OldestDue(ctx context.Context, queue string, now int64) (int64, bool, error) {
	if err := ctx.Err(); err != nil {
		return 0, false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var at int64
	found := false
	for _, j := range m.jobs {
		if j.Queue == queue && j.State == Pending && j.AvailableAt <= now && !buriable(j, now) &&
			(!found || j.AvailableAt < at) {
			at, found = j.AvailableAt, true
		}
	}
	return at, found, nil
}
