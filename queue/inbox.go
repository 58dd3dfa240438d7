package queue

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/staggerhq/stagger/retry"
)

// ErrInProgress is returned by an Inbox when another delivery of the same ID
// is being processed right now. It is retryable: try again later.
var ErrInProgress = errors.New("queue: inbox: same id in progress")

// Inbox is receiver-side deduplication: the effect of a unit of work with a
// given ID is applied once even when the work is delivered twice (a lease
// that expired and was taken by another worker, a broker redelivery).
//
// Process runs fn unless id was already processed successfully, in which
// case it returns duplicate = true without calling fn. An id that is not a
// valid job ID (ValidateID) is refused with ErrInvalid, fn not called. While fn runs for an
// id, concurrent Process calls for that id return ErrInProgress (wrapped as
// retryable). fn's error is returned unchanged and leaves id unprocessed, so
// a later delivery runs it again; so does a panic in fn, which propagates.
type Inbox interface {
	Process(ctx context.Context, id string, fn func(ctx context.Context) error) (duplicate bool, err error)
}

// MemoryInbox is an in-process Inbox, for tests and single-process use. It
// forgets everything when the process exits; durable stores provide their
// own Inbox on the same database as the queue.
type MemoryInbox struct {
	mu      sync.Mutex
	done    map[string]time.Time
	running map[string]bool
	now     func() time.Time
}

// NewMemoryInbox returns an empty MemoryInbox.
func NewMemoryInbox() *MemoryInbox {
	return &MemoryInbox{done: map[string]time.Time{}, running: map[string]bool{}, now: time.Now}
}

// Process implements Inbox.
func (m *MemoryInbox) Process(ctx context.Context, id string, fn func(ctx context.Context) error) (bool, error) {
	if err := ValidateID(id); err != nil {
		return false, err
	}
	m.mu.Lock()
	if _, ok := m.done[id]; ok {
		m.mu.Unlock()
		return true, nil
	}
	if m.running[id] {
		m.mu.Unlock()
		return false, errInProgress
	}
	m.running[id] = true
	m.mu.Unlock()

	ok := false
	defer func() { // also when fn panics: the id must not stay running
		m.mu.Lock()
		delete(m.running, id)
		if ok {
			m.done[id] = m.now()
		}
		m.mu.Unlock()
	}()
	err := fn(ctx)
	ok = err == nil
	return false, err
}

// Processed reports whether id was processed successfully.
func (m *MemoryInbox) Processed(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.done[id]
	return ok
}

// errInProgress is ErrInProgress marked retryable.
var errInProgress = retry.Retryable(ErrInProgress)
