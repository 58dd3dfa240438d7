package queuetest

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/staggerhq/stagger/queue"
)

// cancelsLeased cancels a leased job under its handler, as a Cancel that
// checks "not done or dead" instead of "pending" would.
type cancelsLeased struct{ *queue.MemoryStore }

func (c cancelsLeased) Cancel(ctx context.Context, id string, e queue.Event) (queue.Job, error) {
	if j, err := c.Get(ctx, id); err == nil && j.State == queue.Leased {
		out := []queue.Outcome{{ID: id, Attempt: j.Attempts, State: queue.Dead, DeadReason: queue.Canceled, Now: e.At}}
		if err := c.Record(ctx, out); err != nil {
			return queue.Job{}, err
		}
		return c.Get(ctx, id)
	}
	return c.MemoryStore.Cancel(ctx, id, e)
}

// cancelsTwice reports success for a job cancelled already, as a Cancel
// that is not one atomic check-and-set would to a second caller.
type cancelsTwice struct{ *queue.MemoryStore }

func (c cancelsTwice) Cancel(ctx context.Context, id string, e queue.Event) (queue.Job, error) {
	j, err := c.MemoryStore.Cancel(ctx, id, e)
	if errors.Is(err, queue.ErrNotPending) {
		return c.Get(ctx, id)
	}
	return j, err
}

// pausesInMemory keeps the pauses beside the store, so its claims do not
// see them (as a pause kept in one process's memory would not stop the
// others).
type pausesInMemory struct {
	*queue.MemoryStore
	mu     sync.Mutex
	paused map[string]queue.Pause
}

func (p *pausesInMemory) SetPaused(_ context.Context, name string, paused bool, e queue.Event) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, was := p.paused[name]
	if paused && !was {
		p.paused[name] = queue.Pause{Queue: name, At: e.At, Actor: e.Actor}
	} else if !paused {
		delete(p.paused, name)
	}
	return was != paused, nil
}

func (p *pausesInMemory) Pauses(context.Context) ([]queue.Pause, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []queue.Pause
	for _, x := range p.paused {
		out = append(out, x)
	}
	return out, nil
}

// offsetPaging pages by position (OFFSET n) instead of by key: a job
// that leaves the selection before the cursor shifts the rest, so one is
// skipped.
type offsetPaging struct {
	*queue.MemoryStore
	mu      sync.Mutex
	offsets map[string]int // the position after the page that ended at an ID
}

func (o *offsetPaging) Search(ctx context.Context, s queue.Search) ([]queue.Job, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	off := o.offsets[s.After]
	limit := s.Limit
	s.After, s.Limit = "", queue.MaxPageSize
	all, err := o.MemoryStore.Search(ctx, s)
	if err != nil || off >= len(all) {
		return nil, err
	}
	page := all[off:min(len(all), off+limit)]
	o.offsets[page[len(page)-1].ID] = off + len(page)
	return page, nil
}

// payloadAlways ignores Search.NoPayload: every job comes with its
// payload.
type payloadAlways struct{ *queue.MemoryStore }

func (p payloadAlways) Search(ctx context.Context, s queue.Search) ([]queue.Job, error) {
	s.NoPayload = false
	return p.MemoryStore.Search(ctx, s)
}

// TestAdminChecksFailBrokenStores: each operator check passes on a
// correct store and fails on a store broken the way it guards against.
func TestAdminChecksFailBrokenStores(t *testing.T) {
	for _, c := range []struct {
		check  string
		broken func() queue.Store
	}{
		{"AdminCancel", func() queue.Store { return cancelsLeased{queue.NewMemoryStore()} }},
		{"AdminCancelConcurrent", func() queue.Store { return cancelsTwice{queue.NewMemoryStore()} }},
		{"AdminPause", func() queue.Store {
			return &pausesInMemory{MemoryStore: queue.NewMemoryStore(), paused: map[string]queue.Pause{}}
		}},
		{"AdminSearchFilters", func() queue.Store { return payloadAlways{queue.NewMemoryStore()} }},
		{"AdminSearchPagingWhileJobsMove", func() queue.Store {
			return &offsetPaging{MemoryStore: queue.NewMemoryStore(), offsets: map[string]int{}}
		}},
	} {
		t.Run(c.check, func(t *testing.T) {
			var check func(queue.Store) error
			for _, a := range adminTests {
				if a.name == c.check {
					check = a.check
				}
			}
			if err := check(queue.NewMemoryStore()); err != nil {
				t.Fatalf("on a MemoryStore: %v", err)
			}
			err := check(c.broken())
			if err == nil {
				t.Fatalf("passed on %T", c.broken())
			}
			t.Logf("on %T: %v", c.broken(), err)
		})
	}
}
