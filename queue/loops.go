package queue

// DefaultLoops is the most claim loops a queue's handlers are shared
// among by default (WorkerConfig.Loops): each loop keeps one claim (with
// the outcomes of its handlers) in flight, so a queue has up to
// DefaultLoops round trips to the store at once instead of one. Draining
// 50,000 no-op jobs on PostgreSQL, 4 loops made 1.18–1.84× one loop at 4
// handlers (BENCHMARKS.md).
const DefaultLoops = 4

// split divides the lane's handlers and batch among its claim loops:
// loops lanes of the same queue and handler, each with its share of the
// Concurrency handlers and of the BatchSize (the larger shares first), so
// that the loops together run Concurrency handlers and hold at most
// BatchSize jobs claimed but not started. A queue with fleet Limits runs
// one loop unless Loops says otherwise: the store serializes its limited
// claims, so more loops would only wait for each other.
func (l *lane) split() []*lane {
	k := l.loops
	if k == 0 {
		k = DefaultLoops
		if !l.q.cfg.Limits.IsZero() {
			k = 1
		}
	}
	k = max(min(k, l.concurrency, l.batch), 1)
	parts := make([]*lane, k)
	for i := range parts {
		parts[i] = &lane{w: l.w, q: l.q, h: l.h, loops: 1,
			concurrency: share(l.concurrency, k, i), batch: share(l.batch, k, i)}
	}
	return parts
}

// share is part i of n split into k parts as even as can be, the larger
// ones first.
func share(n, k, i int) int {
	s := n / k
	if i < n%k {
		s++
	}
	return s
}
