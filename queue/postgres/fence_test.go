package postgres_test

import (
	"context"
	"slices"
	"testing"

	"github.com/staggerhq/stagger/queue"
)

// TestFencedCopies: an outcome or a lease given twice in one call (the
// same ID and attempt) updates its job once, and both copies report what
// happened; a copy with a stale attempt does not; the plain-done turn and
// the general one answer alike.
func TestFencedCopies(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	const now = int64(1_000_000)
	var jobs []queue.Job
	for _, id := range []string{"a", "b", "c"} {
		jobs = append(jobs, queue.Job{ID: id, Payload: []byte("{}"), MaxAttempts: 5, AvailableAt: now,
			Deadline: now + 1_000_000, State: queue.Pending, CreatedAt: now, UpdatedAt: now})
	}
	if _, err := s.Insert(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Claim(ctx, queue.DefaultQueue, now, now+1000, 3); err != nil || len(got) != 3 {
		t.Fatal(got, err)
	}
	leases := []queue.Lease{{ID: "a", Attempt: 1}, {ID: "b", Attempt: 2}, {ID: "a", Attempt: 1}, {ID: "zz", Attempt: 1}}
	if err := s.Extend(ctx, leases, now+10, now+2000); err != nil {
		t.Fatal(err)
	}
	var held []bool
	for _, l := range leases {
		held = append(held, l.Held)
	}
	if want := []bool{true, false, true, false}; !slices.Equal(held, want) {
		t.Errorf("extended %v, want %v", held, want)
	}
	for _, c := range []struct {
		name string
		outs []queue.Outcome
		want []bool
	}{
		{"done", []queue.Outcome{{ID: "a", Attempt: 1, State: queue.Done, Now: now + 20}, {ID: "b", Attempt: 2, State: queue.Done, Now: now + 20},
			{ID: "a", Attempt: 1, State: queue.Done, Now: now + 20}}, []bool{true, false, true}},
		{"mixed", []queue.Outcome{{ID: "b", Attempt: 1, State: queue.Pending, AvailableAt: now + 500, LastError: "x", Now: now + 30},
			{ID: "a", Attempt: 1, State: queue.Done, Now: now + 30}, {ID: "b", Attempt: 1, State: queue.Pending, AvailableAt: now + 500, LastError: "x", Now: now + 30},
			{ID: "c", Attempt: 1, State: queue.Done, Now: now + 30}}, []bool{true, false, true, true}},
	} {
		if err := s.Record(ctx, c.outs); err != nil {
			t.Fatal(c.name, err)
		}
		var got []bool
		for _, o := range c.outs {
			got = append(got, o.Applied)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: applied %v, want %v", c.name, got, c.want)
		}
	}
	for id, want := range map[string]queue.State{"a": queue.Done, "b": queue.Pending, "c": queue.Done} {
		if j, err := s.Get(ctx, id); err != nil || j.State != want {
			t.Errorf("%s: %v %v, want %v", id, j.State, err, want)
		}
	}
}
