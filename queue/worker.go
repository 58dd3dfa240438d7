package queue

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"time"

	"github.com/staggerhq/stagger/retry"
)

// Defaults for the zero fields of WorkerConfig.
const (
	DefaultPollInterval  = time.Second
	DefaultSweepInterval = 10 * time.Second
	DefaultGrace         = 10 * time.Second
	// MaxConcurrency bounds WorkerConfig.Concurrency, MaxBatchSize its
	// BatchSize.
	MaxConcurrency = 1024
	MaxBatchSize   = 1000
)

// ErrShutdownTimeout is returned by Worker.Run when handlers were still
// running a grace period after they were canceled. Their jobs stay leased
// and are claimable again when their leases expire.
var ErrShutdownTimeout = errors.New("queue: worker: handlers still running after the grace period")

// WorkerConfig configures a Worker; zero fields take their defaults.
type WorkerConfig struct {
	// Concurrency is how many handlers run at once (1 to
	// MaxConcurrency). Default 1.
	Concurrency int
	// BatchSize caps how many jobs one claim transaction takes (1 to
	// MaxBatchSize). A claim never takes more jobs than there are idle
	// handlers, so no claimed job waits for a handler. Default: Concurrency.
	BatchSize int
	// PollInterval is the mean wait of an idle loop before it looks for
	// due jobs again; each wait is drawn uniformly from [0.5, 1.5)×, so
	// workers never poll in step. An enqueue in this process, or a store
	// notification (Notifier), wakes idle loops at once. Default 1s.
	PollInterval time.Duration
	// SweepInterval is the mean interval (jittered like PollInterval) at
	// which the worker buries jobs that can never run again. Default 10s.
	SweepInterval time.Duration
	// Grace is how long Run lets in-flight handlers finish after its
	// context is done before canceling them (their jobs are then released:
	// pending at once, the attempt spent); Run waits one more Grace for
	// them to return. Default 10s.
	Grace time.Duration
	// OnError receives errors the worker cannot return: store errors,
	// unknown handler errors (the job stays leased), lost leases, a clock
	// that went backwards. It is called from the worker's goroutines.
	OnError func(error)
}

func (c WorkerConfig) withDefaults() (WorkerConfig, error) {
	if c.Concurrency == 0 {
		c.Concurrency = 1
	}
	if c.BatchSize == 0 {
		c.BatchSize = min(max(c.Concurrency, 1), MaxBatchSize)
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = DefaultSweepInterval
	}
	if c.Grace == 0 {
		c.Grace = DefaultGrace
	}
	switch {
	case c.Concurrency < 1 || c.Concurrency > MaxConcurrency:
		return c, fmt.Errorf("%w: Concurrency must be in [1, %d] (0 means 1), got %d", ErrInvalid, MaxConcurrency, c.Concurrency)
	case c.BatchSize < 1 || c.BatchSize > MaxBatchSize:
		return c, fmt.Errorf("%w: BatchSize must be in [1, %d] (0 means Concurrency), got %d", ErrInvalid, MaxBatchSize, c.BatchSize)
	}
	if err := checkDuration("PollInterval", c.PollInterval, time.Millisecond); err != nil {
		return c, err
	}
	if err := checkDuration("SweepInterval", c.SweepInterval, time.Millisecond); err != nil {
		return c, err
	}
	if err := checkDuration("Grace", c.Grace, time.Millisecond); err != nil {
		return c, err
	}
	return c, nil
}

// Worker runs a handler on a queue's jobs until its context is done: a
// claim loop that takes as many due jobs as there are idle handlers (up to
// BatchSize) in one transaction, Concurrency handlers, wake-ups by enqueues
// and store notifications or by jittered polling, lease heartbeats for long
// handlers, a per-attempt timeout (Config.AttemptTimeout), a periodic sweep
// of jobs that can never run again, and a graceful shutdown.
//
// Outcomes are group-committed: outcomes that arrive while another outcome
// transaction is in flight are combined into the next one, so under load
// one commit serves several jobs without any added wait. A handler's slot
// is freed when its outcome is queued, so the next claim overlaps the
// commit; at most 8×Concurrency outcomes wait to be committed at once (a
// crash loses them: those jobs run again when their leases expire).
type Worker struct {
	q      *Queue
	h      retry.Handler
	cfg    WorkerConfig
	writes *recordGroup
}

// NewWorker returns a Worker running h on q's jobs.
func NewWorker(q *Queue, h retry.Handler, cfg WorkerConfig) (*Worker, error) {
	if q == nil {
		return nil, fmt.Errorf("%w: queue must not be nil", ErrInvalid)
	}
	if h == nil {
		return nil, errNilHandler
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Worker{q: q, h: h, cfg: cfg, writes: &recordGroup{store: q.store, timeout: q.recordTO}}, nil
}

// Run processes jobs until ctx is done, then shuts down: it stops claiming,
// lets in-flight handlers finish for Grace, cancels those still running
// (their jobs are released), and returns nil — or ErrShutdownTimeout if
// some handler ignored the cancellation for another Grace.
func (w *Worker) Run(ctx context.Context) error {
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hcancel()

	var bg sync.WaitGroup
	if n, ok := w.q.store.(Notifier); ok {
		wake, cancel := n.Subscribe()
		defer cancel()
		bg.Add(1)
		go func() {
			defer bg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case _, ok := <-wake:
					if !ok {
						return
					}
					w.q.signal()
				}
			}
		}()
	}
	bg.Add(1)
	go func() {
		defer bg.Done()
		w.sweep(ctx)
	}()

	var handlers sync.WaitGroup
	slots := make(chan struct{}, w.cfg.Concurrency)               // a token per running handler
	pending := make(chan struct{}, maxPending(w.cfg.Concurrency)) // a token per outcome not yet committed
	w.claimLoop(ctx, hctx, slots, pending, &handlers)
	bg.Wait()

	finished := make(chan struct{})
	go func() {
		handlers.Wait()
		close(finished)
	}()
	grace := time.NewTimer(w.cfg.Grace)
	defer grace.Stop()
	select {
	case <-finished:
		return nil
	case <-grace.C:
	}
	hcancel()
	grace.Reset(w.cfg.Grace)
	select {
	case <-finished:
		return nil
	case <-grace.C:
		return ErrShutdownTimeout
	}
}

// claimLoop claims jobs for idle handlers until ctx is done and starts a
// goroutine per claimed job. One claim is in flight at a time (measured on
// PostgreSQL: more concurrent claims of fewer jobs each were slower).
func (w *Worker) claimLoop(ctx, hctx context.Context, slots, pending chan struct{}, handlers *sync.WaitGroup) {
	q := w.q
	for ctx.Err() == nil {
		// Wait for one idle handler, then take every other idle one (up
		// to BatchSize) without waiting.
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		n := 1
		runtime.Gosched() // let handlers finishing at the same moment free their slots
	more:
		for n < w.cfg.BatchSize {
			select {
			case slots <- struct{}{}:
				n++
			default:
				break more
			}
		}
		wake := q.waitChan() // before the claim, so no enqueue is missed
		t0 := q.now()
		jobs, err := q.store.Claim(ctx, t0, addMs(t0, q.leaseMs), n)
		for range n - len(jobs) {
			<-slots
		}
		if err != nil {
			if ctx.Err() == nil {
				w.report(fmt.Errorf("queue: claim: %w", err))
			}
			w.idle(ctx, nil, w.cfg.PollInterval)
			continue
		}
		if len(jobs) == 0 {
			w.idle(ctx, wake, w.cfg.PollInterval)
			continue
		}
		for i := range jobs {
			handlers.Add(1)
			go func(b *batch) {
				defer handlers.Done()
				b.run(hctx, w.h)
				pending <- struct{}{}
				<-slots // the next claim may overlap this commit
				w.finish(hctx, b)
				<-pending
			}(q.newBatch(jobs[i:i+1:i+1], t0))
		}
	}
}

// maxPending bounds the outcomes of one worker waiting to be committed: a
// few claims' worth, so that claims and commits overlap.
func maxPending(concurrency int) int { return min(8*concurrency, 8192) }

// finish records a batch's outcomes and reports its errors.
func (w *Worker) finish(ctx context.Context, b *batch) {
	if err := b.recordWith(ctx, w.writes.record); err != nil {
		w.report(err)
	}
	for i, err := range b.errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			w.report(fmt.Errorf("queue: job %q attempt %d: %w", b.jobs[i].ID, b.jobs[i].Attempts, err))
		}
	}
}

// idle waits a jittered interval, or until wake or ctx is done.
func (w *Worker) idle(ctx context.Context, wake <-chan struct{}, mean time.Duration) {
	t := time.NewTimer(jitter(mean))
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-wake:
	case <-t.C:
	}
}

// jitter draws uniformly from [0.5, 1.5)×mean.
func jitter(mean time.Duration) time.Duration {
	return mean/2 + rand.N(mean)
}

func (w *Worker) sweep(ctx context.Context) {
	for {
		w.idle(ctx, nil, w.cfg.SweepInterval)
		if ctx.Err() != nil {
			return
		}
		if _, err := w.q.Sweep(ctx); err != nil && ctx.Err() == nil {
			w.report(fmt.Errorf("queue: sweep: %w", err))
		}
	}
}

func (w *Worker) report(err error) {
	if w.cfg.OnError != nil {
		w.cfg.OnError(err)
	}
}
