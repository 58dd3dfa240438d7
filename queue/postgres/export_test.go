package postgres

import "github.com/staggerhq/stagger/queue"

// Internals for the external tests (plan checks).

const (
	ClaimPlan  = claimPlan
	ClaimAlone = claimAlone
)

func (s *Store) ClaimSQL() string  { return s.claimSQL() }
func (s *Store) RecordSQL() string { return s.recordSQL() }
func (s *Store) ExtendSQL() string { return s.extendSQL() }

func (s *Store) InFlightSQL() string { return s.inFlightSQL() }

func RecordArgs(outs []queue.Outcome) []any {
	args, _ := recordArgs(outs)
	return args
}

// SetLastClaimsMax sets lastClaimsMax, which the Stores made after it
// read, and returns the old value.
func SetLastClaimsMax(n int32) int32 {
	old := lastClaimsMax
	lastClaimsMax = n
	return old
}

// LastClaimsKept is how many queue names s keeps a last claim's size for.
func (s *Store) LastClaimsKept() int {
	n := 0
	s.lastClaims.Range(func(any, any) bool { n++; return true })
	return n
}

// VacuumRuns waits for a running vacuum of the store and returns how many
// finished and whether one failed.
func (s *Store) VacuumRuns() (int, bool) {
	s.vac.wg.Wait()
	s.vac.mu.Lock()
	defer s.vac.mu.Unlock()
	return s.vac.runs, s.vac.failed
}

// VacuumPending is how many jobs were claimed since the last vacuum
// started.
func (s *Store) VacuumPending() int {
	s.vac.mu.Lock()
	defer s.vac.mu.Unlock()
	return s.vac.claimed
}

// Channel is the store's LISTEN/NOTIFY channel.
func (s *Store) Channel() string { return s.channel }

func (s *Store) DoneSQL() string { return s.doneSQL() }

func DoneArgs(outs []queue.Outcome) []any { return doneArgs(outs) }
