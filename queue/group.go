package queue

import (
	"context"
	"sync"
	"time"
)

// Group commit: outcomes that arrive while another outcome transaction is
// in flight are combined into the next one. The first caller leads: it
// commits everything queued behind it until the queue is empty, then
// returns. No timer, no added latency: batches form only under load, and
// every caller still waits for its own outcome to be committed.

// recordGroup combines concurrent outcome recordings into one Store.Record.
type recordGroup struct {
	store   Store
	timeout time.Duration
	mu      sync.Mutex
	queue   []*recordReq
	leader  bool
}

type recordReq struct {
	outs []Outcome
	err  error
	done chan struct{}
}

// record records outs (setting their Applied flags), even when ctx is done.
func (g *recordGroup) record(ctx context.Context, outs []Outcome) error {
	req := &recordReq{outs: outs, done: make(chan struct{})}
	g.mu.Lock()
	g.queue = append(g.queue, req)
	if !g.leader {
		g.leader = true
		for len(g.queue) > 0 {
			reqs := g.queue
			g.queue = nil
			g.mu.Unlock()
			g.run(ctx, reqs)
			g.mu.Lock()
		}
		g.leader = false
	}
	g.mu.Unlock()
	<-req.done
	return req.err
}

func (g *recordGroup) run(ctx context.Context, reqs []*recordReq) {
	all := reqs[0].outs
	if len(reqs) > 1 {
		all = nil
		for _, r := range reqs {
			all = append(all, r.outs...)
		}
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.timeout)
	err := g.store.Record(rctx, all)
	cancel()
	if len(reqs) > 1 {
		for _, r := range reqs {
			n := copy(r.outs, all)
			all = all[n:]
		}
	}
	for _, r := range reqs {
		r.err = err
		close(r.done)
	}
}
