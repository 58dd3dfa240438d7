package queue

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/retry"
)

// Defaults of a Queue, for the zero fields of Config and of its Policy.
const (
	DefaultLease      = 30 * time.Second // Config.Lease
	DefaultMaxPayload = 1 << 20          // Config.MaxPayload, in bytes (1 MiB)
	// DefaultAttemptTimeout bounds each handler call when
	// Policy.AttemptTimeout is 0 (a queue always bounds its attempts).
	DefaultAttemptTimeout = time.Minute
	// DefaultJobMaxAttempts is the attempt budget of a durable job
	// enqueued without one when Policy.MaxAttempts is 0. It is larger than
	// retry.DefaultMaxAttempts (3, the attempts of one in-process call)
	// because a job's attempts are spread over its deadline, minutes to
	// hours apart, instead of seconds.
	DefaultJobMaxAttempts = 10
	// DefaultJobTimeout is the deadline of a job enqueued without one,
	// measured from its enqueue, when Policy.Timeout is 0.
	DefaultJobTimeout = 24 * time.Hour
)

// DefaultSchedule is the retry schedule of a queue whose Policy has none:
// backoff.RetryDelay with Base 1s and Cap 5m. After failed attempt n a
// job waits floor(min(5m, 1s·2^(n−1))·ratio) with a fresh random ratio in
// [0, 1) per retry.
var DefaultSchedule backoff.Schedule = backoff.Ratio{Base: time.Second, Cap: 5 * time.Minute}

// Bounds of Config's durations.
const (
	// MinLease is the shortest lease (and the shortest attempt timeout).
	MinLease = 10 * time.Millisecond
	// MaxDuration bounds every duration setting: ten years.
	MaxDuration = 10 * 365 * 24 * time.Hour
	// MaxTime is the latest time a job may carry: 9999-12-31T23:59:59.999Z
	// in Unix milliseconds.
	MaxTime int64 = 253402300799999
)

// Config configures a Queue. The zero value is usable: every zero field
// takes its default. Negative values and values out of range are rejected
// by New with an error naming the field.
type Config struct {
	// Policy holds the jobs' retry rules, the same retry.Policy every
	// stagger driver runs (retrydriver.Step): Hooks, Classify, Budget, Limiter,
	// ClampAfter as retry.Do honours them, and, read the queue's way:
	//
	//   - Schedule: the wait after each failure; nil means DefaultSchedule.
	//   - MaxAttempts: the attempt budget of a job enqueued without one;
	//     0 means DefaultJobMaxAttempts. A stored job keeps its own.
	//   - Timeout: the deadline, from the enqueue, of a job enqueued
	//     without one; 0 means DefaultJobTimeout. A stored job keeps its own
	//     deadline, which nothing but an operator's requeue moves.
	//   - AttemptTimeout: bounds each handler call; 0 means
	//     DefaultAttemptTimeout. An attempt that hits it with an error of
	//     no class counts as retryable.
	//   - MaxAfter: 0 means any wait an After error asks for, up to the
	//     job's deadline.
	//   - Rand: the random source of the retry ratio; nil means the
	//     runtime's generator. It is used under a lock, so any Source will do.
	//   - Clock must be nil: the queue's one clock is Config.Now.
	//
	// nil is the zero Policy. The Queue copies it at New.
	Policy *retry.Policy
	// Lease is how long a claim holds a job before another worker may take
	// it; a running handler's lease is extended every Lease/3 until its
	// attempt's context ends (AttemptTimeout, shutdown), so a handler that
	// ignores its context loses the job at most a Lease later. Default 30s.
	Lease time.Duration
	// MaxPayload is the largest payload Enqueue accepts, in bytes
	// (at most MaxPayloadLimit). Default 1 MiB.
	MaxPayload int
	// Queue is the named queue this Queue works on: its claims, Stats, Dead
	// and Redrive see only that queue's jobs, and it enqueues there jobs
	// that name no queue. Default DefaultQueue. One store holds any number
	// of queues; one Worker may serve several (NewMultiWorker), each with
	// its own Config.
	Queue string
	// Limits bound this queue across every worker process and host
	// (at most MaxInFlight jobs leased, at most Rate claims per second),
	// enforced by the store at claim time; the store must implement
	// LimitedClaimer. The zero value limits nothing.
	Limits Limits
	// Now is the queue's clock: the current Unix time in milliseconds,
	// read at the claim, when the handler starts and after it, the time
	// stored in the rows. nil means the system clock. Every worker of one
	// store should read the same time.
	Now func() int64
	// Trace, if set, carries the trace context from the enqueuer to the
	// handler: EnqueueMany (and NewRowsContext) store ctx's trace context
	// with each job it creates (Job.Trace) and every attempt's handler runs
	// with it restored into its context, so what the handler traces joins
	// the enqueuer's trace however much later it runs. contrib/otel's
	// Propagator is one. nil stores and restores nothing.
	Trace retry.Propagator
}

// withDefaults fills defaults and checks every field. The returned
// Config's Policy is a copy with its queue defaults filled in.
func (c Config) withDefaults() (Config, error) {
	var p retry.Policy
	if c.Policy != nil {
		p = *c.Policy
	}
	if p.Clock != nil {
		return c, fmt.Errorf("%w: Policy.Clock must be nil: a queue reads one clock, Config.Now (Unix ms), at the claim and after the handler, and never waits on a timer", ErrInvalid)
	}
	setDefault(&p.Schedule, DefaultSchedule)
	setDefault(&p.AttemptTimeout, DefaultAttemptTimeout)
	setDefault(&p.Timeout, DefaultJobTimeout)
	setDefault(&p.MaxAttempts, DefaultJobMaxAttempts)
	setDefault(&p.MaxAfter, backoff.MaxDelay) // a job waits as long as asked, up to its deadline
	setDefault(&c.Lease, DefaultLease)
	setDefault(&c.MaxPayload, DefaultMaxPayload)
	setDefault(&c.Queue, DefaultQueue)
	if err := ValidateQueue(c.Queue); err != nil {
		return c, fmt.Errorf("Queue: %w", err)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
		min  time.Duration
	}{
		{"Lease", c.Lease, MinLease},
		{"Policy.AttemptTimeout", p.AttemptTimeout, MinLease},
		{"Policy.Timeout", p.Timeout, time.Millisecond},
	} {
		if err := checkDuration(d.name, d.v, d.min); err != nil {
			return c, err
		}
	}
	if err := c.Limits.Validate(); err != nil {
		return c, err
	}
	switch {
	case c.MaxPayload < 1 || c.MaxPayload > MaxPayloadLimit:
		return c, fmt.Errorf("%w: MaxPayload must be in [1, %d] bytes (0 means %d), got %d", ErrInvalid, MaxPayloadLimit, DefaultMaxPayload, c.MaxPayload)
	case p.MaxAttempts < 1 || p.MaxAttempts > MaxMaxAttempts:
		return c, fmt.Errorf("%w: Policy.MaxAttempts must be in [1, %d] (0 means %d), got %d", ErrInvalid, MaxMaxAttempts, DefaultJobMaxAttempts, p.MaxAttempts)
	}
	if err := p.Validate(); err != nil { // the schedule, MaxAfter
		return c, fmt.Errorf("%w: Policy: %w", ErrInvalid, err)
	}
	c.Policy = &p
	return c, nil
}

func checkDuration(name string, v, min time.Duration) error {
	if v < min || v > MaxDuration {
		return fmt.Errorf("%w: %s must be in [%v, %v] (0 means the default), got %v", ErrInvalid, name, min, MaxDuration, v)
	}
	return nil
}

func systemNow() int64 { return time.Now().UnixMilli() }

// lockedSource makes any rand.Source safe for concurrent use.
type lockedSource struct {
	mu  sync.Mutex
	src rand.Source
}

func (l *lockedSource) Uint64() uint64 {
	l.mu.Lock()
	v := l.src.Uint64()
	l.mu.Unlock()
	return v
}

// ceilMs converts a delay to whole milliseconds, rounding up so that a
// requested minimum wait (After) is never shortened.
func ceilMs(d time.Duration) int64 {
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond > 0 {
		ms++
	}
	return ms
}

// addMs is a+b saturating at MaxTime.
func addMs(a, b int64) int64 {
	if b > MaxTime-a {
		return MaxTime
	}
	return a + b
}
