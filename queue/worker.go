package queue

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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
	// Concurrency is the number of claim loops, each running one handler
	// at a time (1 to MaxConcurrency). Default 1.
	Concurrency int
	// BatchSize is how many jobs a loop claims at once (1 to MaxBatchSize).
	// A loop runs its batch one job after the other, keeps all their leases
	// alive, and records their outcomes in one transaction: larger batches
	// trade latency for throughput on stores where a commit is expensive.
	// Default 1.
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
		c.BatchSize = 1
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
		return c, fmt.Errorf("%w: BatchSize must be in [1, %d] (0 means 1), got %d", ErrInvalid, MaxBatchSize, c.BatchSize)
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

// Worker runs a handler on a queue's jobs until its context is done:
// Concurrency claim loops, woken by enqueues and store notifications or by
// jittered polling, with lease heartbeats for long handlers, a per-attempt
// timeout (Config.AttemptTimeout), a periodic sweep of jobs that can never
// run again, and a graceful shutdown.
type Worker struct {
	q   *Queue
	h   retry.Handler
	cfg WorkerConfig
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
	return &Worker{q: q, h: h, cfg: cfg}, nil
}

// Run processes jobs until ctx is done, then shuts down: it stops claiming,
// lets in-flight handlers finish for Grace, cancels those still running
// (their jobs are released), and returns nil — or ErrShutdownTimeout if
// some handler ignored the cancellation for another Grace.
func (w *Worker) Run(ctx context.Context) error {
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hcancel()

	var wg sync.WaitGroup
	if n, ok := w.q.store.(Notifier); ok {
		wake, cancel := n.Subscribe()
		defer cancel()
		wg.Add(1)
		go func() {
			defer wg.Done()
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
	wg.Add(1)
	go func() {
		defer wg.Done()
		w.sweep(ctx)
	}()
	loops := make(chan struct{})
	var lwg sync.WaitGroup
	for range w.cfg.Concurrency {
		lwg.Add(1)
		go func() {
			defer lwg.Done()
			w.loop(ctx, hctx)
		}()
	}
	go func() {
		lwg.Wait()
		close(loops)
	}()

	<-ctx.Done()
	wg.Wait()
	grace := time.NewTimer(w.cfg.Grace)
	defer grace.Stop()
	select {
	case <-loops:
		return nil
	case <-grace.C:
	}
	hcancel()
	grace.Reset(w.cfg.Grace)
	select {
	case <-loops:
		return nil
	case <-grace.C:
		return ErrShutdownTimeout
	}
}

// loop claims and runs batches until ctx is done.
func (w *Worker) loop(ctx, hctx context.Context) {
	q := w.q
	for ctx.Err() == nil {
		wake := q.waitChan() // before the claim, so no enqueue is missed
		t0 := q.now()
		jobs, err := q.store.Claim(ctx, t0, addMs(t0, q.leaseMs), w.cfg.BatchSize)
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
		b := q.newBatch(jobs, t0)
		b.run(hctx, w.h)
		if err := b.record(hctx); err != nil {
			w.report(err)
		}
		for i, err := range b.errs {
			if err != nil && !errors.Is(err, context.Canceled) {
				w.report(fmt.Errorf("queue: job %q attempt %d: %w", b.jobs[i].ID, b.jobs[i].Attempts, err))
			}
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
