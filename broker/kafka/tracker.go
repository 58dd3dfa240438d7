package kafka

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// tracker orders the commits of a stage's session. The offsets a poll
// reached become committable once the poll was handled to its end and
// every forward produced for it, and for every poll before it, was
// acknowledged by the broker. After a forward fails nothing more is
// committed: the next session re-reads from the last commit and handles
// those records again (a duplicate, never a loss).
type tracker struct {
	topic    string
	mu       sync.Mutex
	polls    []*poll                   // in poll order, not yet committable
	ready    map[int32]kgo.EpochOffset // committable, not yet committed
	readyFwd bool                      // ready covers a forward (test seam)
	readyOK  bool                      // ready covers a success (test seam)
	err      error                     // the first forward that failed
	stopped  bool                      // halted: commit nothing more
	bell     chan struct{}             // closed and replaced on every change
	commitMu sync.Mutex                // one commit at a time, in order
}

// poll is one PollRecords' worth of handled records.
type poll struct {
	offsets   map[int32]kgo.EpochOffset // partition → offset after its last handled record
	pending   int                       // forwards not yet acknowledged
	sealed    bool                      // every record of the poll was handled
	forwards  bool
	successes bool
}

func newTracker(topic string) *tracker {
	return &tracker{topic: topic, bell: make(chan struct{})}
}

func (t *tracker) ringLocked() {
	close(t.bell)
	t.bell = make(chan struct{})
}

// open starts a poll. Its offsets, forwards and successes are written by
// the one goroutine handling it, before seal.
func (t *tracker) open() *poll {
	p := &poll{offsets: make(map[int32]kgo.EpochOffset, 2)}
	t.mu.Lock()
	t.polls = append(t.polls, p)
	t.mu.Unlock()
	return p
}

// forward counts a forward of p about to be produced.
func (t *tracker) forward(p *poll) {
	t.mu.Lock()
	p.pending++
	t.mu.Unlock()
}

// forwarded is a forward's produce promise; it must not block.
func (t *tracker) forwarded(p *poll, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		if t.err == nil {
			t.err = fmt.Errorf("kafka: forward: %w", err)
			t.ringLocked()
		}
		return
	}
	p.pending--
	t.advanceLocked()
}

// seal ends p: its offsets may be committed once its forwards are in.
func (t *tracker) seal(p *poll) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p.sealed = true
	t.advanceLocked()
}

// advanceLocked moves the committable polls at the front into ready.
func (t *tracker) advanceLocked() {
	n := 0
	for _, p := range t.polls {
		if !p.sealed || p.pending > 0 {
			break
		}
		if t.ready == nil {
			t.ready = make(map[int32]kgo.EpochOffset, len(p.offsets))
		}
		for part, o := range p.offsets {
			t.ready[part] = o
		}
		t.readyFwd = t.readyFwd || p.forwards
		t.readyOK = t.readyOK || p.successes
		n++
	}
	if n > 0 {
		clear(t.polls[:n])
		t.polls = t.polls[n:]
		t.ringLocked()
	}
}

// snapshot is what waiters look at, with the bell that rings on a change.
type snapshot struct {
	inFlight int // polls not committable yet
	ready    bool
	err      error
	stopped  bool
	bell     <-chan struct{}
}

func (t *tracker) state() snapshot {
	t.mu.Lock()
	defer t.mu.Unlock()
	return snapshot{len(t.polls), len(t.ready) > 0, t.err, t.stopped, t.bell}
}

// wait blocks while max polls are not committable yet. It returns the
// tracker's error (a forward failed) or ctx's.
func (t *tracker) wait(ctx context.Context, max int) error {
	for {
		s := t.state()
		switch {
		case s.err != nil:
			return s.err
		case s.inFlight < max:
			return nil
		}
		select {
		case <-s.bell:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// commitTimeout bounds one commit that the session's end does not cancel.
const commitTimeout = 10 * time.Second

// commitLoop commits whatever becomes committable, one commit at a time,
// until ctx ends. A failed forward or commit, or a test crash, ends the
// session through stop.
func (t *tracker) commitLoop(ctx context.Context, cl *kgo.Client, stop context.CancelCauseFunc, afterForward, afterSuccess func() bool) {
	for {
		s := t.state()
		if s.err != nil {
			stop(s.err)
			return
		}
		if s.ready {
			// The session's end does not cut a commit short: the client
			// gives up a request whose context ends by closing its
			// connection, yet the broker may still apply it, after the
			// next commit (the final drain's, on a new connection), and
			// so move the partitions back to offsets already handled.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
			err := t.commit(cctx, cl, afterForward, afterSuccess)
			cancel()
			if err != nil {
				stop(err)
				return
			}
			continue
		}
		select {
		case <-s.bell:
		case <-ctx.Done():
			return
		}
	}
}

// drain waits until every poll is committable (or a forward failed, or ctx
// ends) and commits what is. A halted tracker neither waits nor commits.
func (t *tracker) drain(ctx context.Context, cl *kgo.Client, afterForward, afterSuccess func() bool) error {
wait:
	for s := t.state(); !s.stopped && s.err == nil && s.inFlight > 0; s = t.state() {
		select {
		case <-s.bell:
		case <-ctx.Done():
			break wait
		}
	}
	return t.commit(ctx, cl, afterForward, afterSuccess)
}

// halt stops every commit from now on; it waits for a commit in flight.
func (t *tracker) halt() {
	t.commitMu.Lock()
	t.mu.Lock()
	t.stopped = true
	t.mu.Unlock()
	t.commitMu.Unlock()
}

func (t *tracker) halted() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stopped
}

// commit commits the ready offsets, in order with every other commit of the
// tracker. The test seams run first; a crash halts the tracker and returns
// errCrash.
func (t *tracker) commit(ctx context.Context, cl *kgo.Client, afterForward, afterSuccess func() bool) error {
	t.commitMu.Lock()
	defer t.commitMu.Unlock()
	t.mu.Lock()
	offs, fwd, ok, stopped := t.ready, t.readyFwd, t.readyOK, t.stopped
	t.ready, t.readyFwd, t.readyOK = nil, false, false
	t.mu.Unlock()
	if stopped || len(offs) == 0 {
		return nil
	}
	if (fwd && afterForward != nil && afterForward()) || (ok && afterSuccess != nil && afterSuccess()) {
		t.mu.Lock()
		t.stopped = true
		t.mu.Unlock()
		return errCrash
	}
	if cerr := commitSync(ctx, cl, map[string]map[int32]kgo.EpochOffset{t.topic: offs}); cerr != nil {
		t.restore(offs, fwd, ok)
		return fmt.Errorf("kafka: commit: %w", cerr)
	}
	return nil
}

// forget drops the committable offsets of partitions this member no longer
// owns (their commit before the rebalance failed).
func (t *tracker) forget(parts []int32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range parts {
		delete(t.ready, p)
	}
}

// restore puts back the offsets of a commit that failed (or was cut short
// by the session's end), so that a later commit (the final drain) can
// commit them: a poll that became committable must not be forgotten. A
// partition that became committable further since keeps its newer offset.
func (t *tracker) restore(offs map[int32]kgo.EpochOffset, fwd, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	if t.ready == nil {
		t.ready = make(map[int32]kgo.EpochOffset, len(offs))
	}
	for part, o := range offs {
		if _, newer := t.ready[part]; !newer {
			t.ready[part] = o
		}
	}
	t.readyFwd = t.readyFwd || fwd
	t.readyOK = t.readyOK || ok
}

// commitSync commits offs and returns the request's error or the first
// partition's.
func commitSync(ctx context.Context, cl *kgo.Client, offs map[string]map[int32]kgo.EpochOffset) error {
	var cerr error
	cl.CommitOffsetsSync(ctx, offs,
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			if err != nil {
				cerr = err
				return
			}
			for _, rt := range resp.Topics {
				for _, rp := range rt.Partitions {
					if err := kerr.ErrorForCode(rp.ErrorCode); err != nil && cerr == nil {
						cerr = fmt.Errorf("partition %d: %w", rp.Partition, err)
					}
				}
			}
		})
	return cerr
}
