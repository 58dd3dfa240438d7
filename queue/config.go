package queue

import (
	"fmt"
	"github.com/staggerhq/stagger/retry"
	"math/rand/v2"
	"sync"
	"time"
)

// Defaults for the zero fields of Config.
const (
	DefaultBase           = time.Second      // Config.Base
	DefaultCap            = 5 * time.Minute  // Config.Cap (or Base, when Base is longer)
	DefaultLease          = 30 * time.Second // Config.Lease
	DefaultAttemptTimeout = time.Minute      // Config.AttemptTimeout
	DefaultMaxPayload     = 1 << 20          // Config.MaxPayload, in bytes (1 MiB)
	DefaultMaxAttempts    = 10               // Config.MaxAttempts
	DefaultDeadline       = 24 * time.Hour   // Config.Deadline, from the enqueue time
)

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
// takes its default. Negative values, values out of range and a Cap below
// Base are rejected by New with an error naming the field.
type Config struct {
	// Base and Cap are the retry schedule (backoff.RetryDelay): after failed attempt
	// n the job waits floor(min(Cap, Base·2^(n−1))·ratio) with a fresh
	// random ratio in [0, 1) per retry (backoff.Ratio). Defaults 1s and 5m
	// (a zero Cap with a Base above 5m defaults to Base).
	Base, Cap time.Duration
	// Lease is how long a claim holds a job before another worker may take
	// it; a running handler's lease is extended every Lease/3 until its
	// attempt's context ends (AttemptTimeout, shutdown), so a handler that
	// ignores its context loses the job at most a Lease later. Default 30s.
	Lease time.Duration
	// AttemptTimeout bounds each handler call. An attempt that hits it with
	// an error of no class counts as retryable. Default 1m.
	AttemptTimeout time.Duration
	// MaxPayload is the largest payload Enqueue accepts, in bytes
	// (at most MaxPayloadLimit). Default 1 MiB.
	MaxPayload int
	// MaxAttempts is the attempt budget of jobs enqueued without one.
	// Default 10.
	MaxAttempts int
	// Deadline is the deadline, from the enqueue time, of jobs enqueued
	// without one. Default 24h.
	Deadline time.Duration
	// Queue is the named queue this Queue works on: its claims, Stats, Dead
	// and Redrive see only that queue's jobs, and it enqueues there jobs
	// that name no queue. Default DefaultQueue. One store holds any number
	// of queues; run a Worker per queue, each with its own settings.
	Queue string
	// Limits bound this queue across every worker process and host
	// (at most MaxInFlight jobs leased, at most Rate claims per second),
	// enforced by the store at claim time; the store must implement
	// LimitedClaimer. The zero value limits nothing.
	Limits Limits
	// Now is the clock: the current Unix time in milliseconds. nil means
	// the system clock. Every worker of one store should read the same time.
	Now func() int64
	// Rand is the random source of the retry ratio; nil means the runtime's
	// generator. It is used under a lock, so any Source will do.
	Rand rand.Source
	// Policy, if set, holds the rules every attempt runs under, as
	// retry.Do honours them: Hooks, Classify, Budget, Limiter, MaxAfter
	// (0 here: any wait up to the job's deadline), AttemptTimeout (0: the
	// Config's) and Schedule (nil: Base and Cap above). A job row's
	// max_attempts and deadline still govern the job, so Policy.MaxAttempts
	// is not used (Config.MaxAttempts is the default of new jobs) and
	// Policy.Timeout must be 0 (Config.Deadline is the default deadline).
	Policy *retry.Policy
	// Trace, if set, carries the trace context from the enqueuer to the
	// handler: EnqueueMany (and NewRowsContext) store ctx's trace context
	// with each job it creates (Job.Trace) and every attempt's handler runs
	// with it restored into its context, so what the handler traces joins
	// the enqueuer's trace however much later it runs. contrib/otel's
	// Propagator is one. nil stores and restores nothing.
	Trace retry.Propagator
}

// withDefaults fills defaults and checks every field.
func (c Config) withDefaults() (Config, error) {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.Base, DefaultBase)
	def(&c.Cap, max(DefaultCap, c.Base))
	def(&c.Lease, DefaultLease)
	def(&c.AttemptTimeout, DefaultAttemptTimeout)
	def(&c.Deadline, DefaultDeadline)
	if c.MaxPayload == 0 {
		c.MaxPayload = DefaultMaxPayload
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.Queue == "" {
		c.Queue = DefaultQueue
	}
	if err := ValidateQueue(c.Queue); err != nil {
		return c, fmt.Errorf("Queue: %w", err)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
		min  time.Duration
	}{
		{"Base", c.Base, time.Millisecond},
		{"Cap", c.Cap, time.Millisecond},
		{"Lease", c.Lease, MinLease},
		{"AttemptTimeout", c.AttemptTimeout, MinLease},
		{"Deadline", c.Deadline, time.Millisecond},
	} {
		if err := checkDuration(d.name, d.v, d.min); err != nil {
			return c, err
		}
	}
	if err := c.Limits.Validate(); err != nil {
		return c, err
	}
	if c.Policy != nil {
		if err := c.Policy.Validate(); err != nil {
			return c, fmt.Errorf("%w: Policy: %w", ErrInvalid, err)
		}
		if c.Policy.Timeout != 0 {
			return c, fmt.Errorf("%w: Policy.Timeout must be 0 (a job's deadline governs it: set Config.Deadline or the job's), got %v", ErrInvalid, c.Policy.Timeout)
		}
	}
	switch {
	case c.Cap < c.Base:
		return c, fmt.Errorf("%w: Cap (%v) must be >= Base (%v)", ErrInvalid, c.Cap, c.Base)
	case c.MaxPayload < 1 || c.MaxPayload > MaxPayloadLimit:
		return c, fmt.Errorf("%w: MaxPayload must be in [1, %d] bytes (0 means %d), got %d", ErrInvalid, MaxPayloadLimit, DefaultMaxPayload, c.MaxPayload)
	case c.MaxAttempts < 1 || c.MaxAttempts > MaxMaxAttempts:
		return c, fmt.Errorf("%w: MaxAttempts must be in [1, %d] (0 means %d), got %d", ErrInvalid, MaxMaxAttempts, DefaultMaxAttempts, c.MaxAttempts)
	}
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
