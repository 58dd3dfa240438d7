package postgres

import "github.com/staggerhq/stagger/queue"

// Internals for the external tests (plan checks).

const ClaimPlan = claimPlan

func (s *Store) ClaimSQL() string  { return s.claimSQL() }
func (s *Store) RecordSQL() string { return s.recordSQL() }
func (s *Store) ExtendSQL() string { return s.extendSQL() }

func RecordArgs(outs []queue.Outcome) []any {
	args, _ := recordArgs(outs)
	return args
}
