package postgres

// OldestDueSQL exposes OldestDue's query to the plan test.
func (s *Store) OldestDueSQL() string { return s.oldestDueSQL() }
