package queue

// DefaultLoops is how many claim loops share a queue's handlers by
// default (WorkerConfig.Loops) when one loop would keep a single
// transaction in flight: claims smaller than splitTurn, which carry the
// outcomes in the same transaction. Each loop keeps its own claim in
// flight, so the queue has up to DefaultLoops round trips to the store at
// once. Draining 50,000 no-op jobs on PostgreSQL with 4 handlers (claims
// of 64), 4 loops made 0.96–2.7× one loop (median 1.5, 4 rounds;
// BENCHMARKS.md); with 512 handlers (claims of 1,000, outcomes already
// committed beside the claims) 4 Workers made 0.8–1.3× one loop, so a
// queue whose BatchSize reaches splitTurn runs one loop.
const DefaultLoops = 4

// split divides the lane's handlers among its claim loops: loops lanes of
// the same queue, handler and BatchSize, each with its share of the
// Concurrency handlers (the larger shares first). Each loop claims for its
// own handlers and prefetches for them (see loopState.prefetch), so the
// loops together run Concurrency handlers and hold at most loops ×
// BatchSize jobs claimed but not started (twice that when a loop sends
// claims ahead: laneRun.claimAhead). The batch is not divided: a
// claim of fewer jobs costs the server more per job (16 jobs a claim made
// 62 µs of server CPU a job, 64 made 44). By default (Loops 0) a queue
// runs DefaultLoops loops, at most one per handler, unless one loop
// already keeps two transactions in flight (BatchSize of splitTurn or
// more) or the queue has fleet Limits, whose claims the store serializes,
// so more loops would only wait for each other: then one.
func (l *lane) split() []*lane {
	k := l.loops
	if k == 0 {
		k = DefaultLoops
		if !l.q.cfg.Limits.IsZero() || l.batch >= splitTurn {
			k = 1
		}
	}
	k = max(min(k, l.concurrency), 1)
	parts := make([]*lane, k)
	for i := range parts {
		s := l.concurrency / k
		if i < l.concurrency%k {
			s++
		}
		parts[i] = &lane{w: l.w, q: l.q, h: l.h, concurrency: s, batch: l.batch, loops: 1}
	}
	return parts
}
