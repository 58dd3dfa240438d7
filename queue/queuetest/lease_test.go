package queuetest

import (
	"context"
	"testing"

	"github.com/staggerhq/stagger/queue"
)

// revivingStore is a store with the fencing of an extension reduced to
// the attempt number: it extends a lease that ran out as long as no newer
// claim took the job, as the stores did before an extension checked that
// the lease is still live. The suite must fail it.
type revivingStore struct{ *queue.MemoryStore }

func (r revivingStore) Extend(ctx context.Context, leases []queue.Lease, now, leaseUntil int64) error {
	for i := range leases {
		at := now
		if j, err := r.Get(ctx, leases[i].ID); err == nil && j.LeaseUntil <= now {
			at = j.LeaseUntil - 1 // as if the lease were still live
		}
		one := leases[i : i+1]
		if err := r.MemoryStore.Extend(ctx, one, at, leaseUntil); err != nil {
			return err
		}
	}
	return nil
}

// TestLeaseCasesFailRevivingStore: both lease cases pass on a correct
// store and fail on a store that revives expired leases.
func TestLeaseCasesFailRevivingStore(t *testing.T) {
	for name, check := range map[string]func(queue.Store) error{
		"StoreExpiredLeaseNotExtended": checkExpiredNotExtended,
		"FleetLimitPausedWorker":       checkFleetPausedWorker,
	} {
		t.Run(name, func(t *testing.T) {
			if err := check(queue.NewMemoryStore()); err != nil {
				t.Fatalf("on a MemoryStore: %v", err)
			}
			err := check(revivingStore{queue.NewMemoryStore()})
			if err == nil {
				t.Fatal("passed on a store that revives expired leases")
			}
			t.Logf("on the reviving store: %v", err)
		})
	}
}
