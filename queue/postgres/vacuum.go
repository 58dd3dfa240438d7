package postgres

import (
	"context"
	"sync"
	"time"
)

// vacuumer runs the store's own VACUUM of the jobs table. A claim moves a
// job out of the head of the due index (its entry is replaced by one at the
// lease's end) and an outcome moves it out of the index: neither update
// can be a HOT update, since both change the index's key or predicate, so
// every job leaves dead entries at the low end of the index, where every
// claim starts its scan. Killed entries are skipped but their pages are
// still read, and B-tree pages that receive no inserts are only cleaned by
// a vacuum: without one, a claim on an empty queue after 200,000 completed
// jobs reads about 1,200 index pages (9 ms) instead of one. Autovacuum
// waits for a fraction of the whole table (20% by default) to be dead,
// which grows with the history kept for retention, and may be off.
//
// So the store vacuums the table itself once VacuumAfter jobs were claimed
// through it (or vacuumDrained, when a claim finds the queue drained): in
// the background, one vacuum at a time, never more than
// 1/vacuumDuty of the time (a vacuum's cost grows with the table, since it
// scans every index), SKIP_LOCKED (another store's vacuum is running),
// INDEX_CLEANUP ON (the default may skip the indexes when few heap pages
// have dead rows, which is exactly the case of a big history), TRUNCATE
// OFF (truncating takes an exclusive lock that would stall the claims),
// PARALLEL 0 (one backend, so the server's other cores stay with the
// claims). A vacuum that fails (an older server, a role that does not own
// the table) is not retried: the store carries on without it.
type vacuumer struct {
	mu      sync.Mutex
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	claimed int       // jobs claimed since the last vacuum started
	running bool      // a vacuum is running
	failed  bool      // a vacuum failed: no more
	next    time.Time // the earliest start of the next vacuum
	runs    int       // vacuums finished, for the tests
}

func (v *vacuumer) init() {
	v.ctx, v.cancel = context.WithCancel(context.Background())
}

// stop cancels a running vacuum and waits for it. The cancel is made
// under mu, where claimed checks it, so that no vacuum starts after it.
func (v *vacuumer) stop() {
	v.mu.Lock()
	v.cancel()
	v.mu.Unlock()
	v.wg.Wait()
}

// vacuumDrained is how many claimed jobs start a vacuum when a claim
// comes back short (the queue is drained): an idle queue is cleaned after a
// burst instead of waiting for VacuumAfter more jobs, and its polls find
// the index clean.
const vacuumDrained = 1000

// claimed counts n jobs claimed by a claim that asked for limit, and starts
// a vacuum when one is due: VacuumAfter jobs claimed since the last one, or
// vacuumDrained when the claim came back short.
func (s *Store) claimed(n, limit int) {
	if s.opts.VacuumAfter == NoVacuum || s.opts.ReadOnly {
		return
	}
	v := &s.vac
	v.mu.Lock()
	defer v.mu.Unlock()
	v.claimed += n
	due := v.claimed >= s.opts.VacuumAfter || (n < limit && v.claimed >= min(vacuumDrained, s.opts.VacuumAfter))
	if !due || v.running || v.failed || v.ctx.Err() != nil {
		return
	}
	start := time.Now()
	if start.Before(v.next) {
		return
	}
	v.claimed, v.running = 0, true
	v.wg.Add(1)
	go func() {
		defer v.wg.Done()
		_, err := s.pool.Exec(v.ctx, `VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON, TRUNCATE OFF, PARALLEL 0) `+s.jobs)
		took := time.Since(start)
		v.mu.Lock()
		defer v.mu.Unlock()
		v.running = false
		v.runs++
		v.next = time.Now().Add((vacuumDuty - 1) * took)
		if err != nil && v.ctx.Err() == nil {
			v.failed = true
		}
	}()
}
