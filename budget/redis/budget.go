// Package redisbudget is the token-bucket retry budget shared by every process
// that calls one dependency, kept in Redis.
//
// The credits are those of [budget.TokenBucket]: every original request
// earns 1 credit, the reserve holds at most 200, a retry needs and spends
// 10. They live in one Redis key, changed only by one Lua script that adds
// earnings, refunds unused reservations and grants retries in a single
// atomic step, so no interleaving of processes can spend a credit twice.
//
// # Batching
//
// Not every request is a round trip. Earnings are counted locally and
// pushed by a background flusher once EarnBatch have accumulated (and by
// every script call a retry makes anyway). A retry that finds no local
// reservation asks the script for up to SpendBatch retries at once; the
// next retries of this process use them without a round trip. Unused
// reservations go back to the shared reserve after ReserveTTL and on Close.
//
// # What batching costs: the bounds
//
//   - Never more retries than the shared credit allows: every granted retry
//     was paid for in Redis, atomically, before it was granted; credits only
//     enter Redis as earnings of real requests (capped at Max) and refunds of
//     reservations never used. So over any period, retries granted by all
//     processes together <= (Initial + credits earned) / PerRetry.
//   - Over-grant at an instant: reservations held by processes are outside
//     the Redis reserve and outside its cap. An exact shared bucket would
//     allow at most Max/PerRetry retries in a burst; the fleet can make up to
//     Max/PerRetry + P·SpendBatch, for P processes, and a reservation is at
//     most ReserveTTL old. With the defaults (SpendBatch 2) that is 2 retries
//     per process.
//   - Under-grant: up to EarnBatch−1 earnings per process wait to be pushed
//     (lost if the process dies), and a process that dies holding a
//     reservation loses up to SpendBatch retries' credits.
//
// # When Redis is unreachable
//
// The budget fails closed: Retry answers false (no retries) until Redis
// answers again; the local reservation, already paid for, is still used.
// Request always answers true — a budget must never refuse original work —
// and keeps counting earnings locally (up to Max) to push later.
//
// A down Redis costs callers nothing but that fast answer: after a failed
// call no caller contacts Redis again (a circuit breaker). Once the
// backoff has passed (Cooldown, doubling after each failed probe up to
// MaxCooldown, back to Cooldown after a success), the next Retry wakes the
// background flusher to probe Redis and answers at once itself; retries go
// back to Redis after a probe succeeded. Only the call that meets the
// outage (and calls queued behind it) waits, at most OpTimeout. Times are
// those passed to Request and Retry.
//
// # When Redis restarts empty
//
// A Redis that restarts without its data (no persistence, a failover to an
// empty replica) has lost the reserve. Starting it again from Initial —
// full by default — would hand the fleet a burst of retries it never
// earned, right after an outage. Instead the first process to reach the
// empty server sets the reserve to the last one it saw (the reply of its
// last successful call); Initial is used only by a process that never saw
// the key, or when the key may have expired on its own (KeyTTL set and
// the last sighting at least KeyTTL ago).
package redisbudget

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/staggerhq/stagger/budget"
)

// Defaults for zero Config fields.
const (
	DefaultEarnBatch  = 10                     // Config.EarnBatch, in earnings
	DefaultSpendBatch = 2                      // Config.SpendBatch, in retries
	DefaultReserveTTL = time.Second            // Config.ReserveTTL
	DefaultOpTimeout  = 250 * time.Millisecond // Config.OpTimeout
	DefaultCooldown   = time.Second            // Config.Cooldown
	// MaxCooldown bounds the circuit's backoff: the wait between probes of
	// a Redis that stays down doubles from Cooldown up to this (or up to
	// Cooldown, if larger).
	MaxCooldown = 30 * time.Second
	// MaxKeyLen bounds Config.Key.
	MaxKeyLen = 512
)

// ErrInvalid is wrapped by configuration errors; the message names the field.
var ErrInvalid = errors.New("redisbudget: invalid configuration")

//go:embed budget.lua
var scriptSrc string

var script = redis.NewScript(scriptSrc)

// Config configures a shared budget. Client and Key are required; the
// credit fields mean what they mean in budget.TokenBucket, and every
// process sharing Key must use the same values.
type Config struct {
	// Client runs the script: a *redis.Client, *redis.ClusterClient or
	// *redis.Ring.
	Client redis.Scripter
	// Key is the Redis key holding the shared reserve; one per dependency.
	Key string

	// Max is the largest reserve; 0 means budget.DefaultMax (200).
	Max int64
	// PerRequest is earned by every original; 0 means 1.
	PerRequest int64
	// PerRetry is spent by every retry; 0 means 10.
	PerRetry int64
	// MinToRetry is the smallest reserve that allows a retry; 0 means PerRetry.
	MinToRetry int64
	// Initial is the reserve when the key does not exist yet; 0 means Max
	// (full, as budget.TokenBucket's zero value), unless Empty is set.
	Initial int64
	// Empty starts a key that does not exist yet at 0 credits (Initial
	// must then be 0).
	Empty bool

	// EarnBatch is how many earnings are counted locally before they are
	// pushed; 0 means DefaultEarnBatch, 1 pushes every one.
	EarnBatch int
	// SpendBatch is how many retries one round trip reserves; 0 means
	// DefaultSpendBatch, 1 reserves none ahead.
	SpendBatch int
	// ReserveTTL is how long an unused reservation is kept before it goes
	// back; 0 means DefaultReserveTTL.
	ReserveTTL time.Duration
	// KeyTTL, if set, lets an idle key expire (each script call renews it).
	KeyTTL time.Duration
	// OpTimeout bounds each Redis call; 0 means DefaultOpTimeout.
	OpTimeout time.Duration
	// Cooldown is how long retries stay refused, without a Redis call,
	// after Redis failed (doubling while it stays down, see MaxCooldown);
	// 0 means DefaultCooldown.
	Cooldown time.Duration
}

// Budget is a budget.Budget shared through Redis. It is safe for concurrent
// use; call Close when done so that earnings and reservations are returned.
type Budget struct {
	c          redis.Scripter
	key        string
	max, earn  int64
	cost, need int64
	initial    int64
	earnBatch  int64
	spendBatch int64
	reserveTTL time.Duration
	keyTTLms   int64
	opTimeout  time.Duration
	cooldown   time.Duration

	pending    atomic.Int64 // earnings not yet pushed
	reserved   atomic.Int64 // retries paid for in Redis, not yet used
	reservedAt atomic.Int64 // unix nanos of the last reservation
	refundDue  atomic.Bool

	// The circuit: downUntil is 0 while Redis answers, else the time
	// (unix nanos, callers' clock) before which nobody calls it; fails
	// counts failed calls in a row; probing says a probe is due or
	// running, at probeAt.
	downUntil atomic.Int64
	fails     atomic.Int64
	probing   atomic.Bool
	probeAt   atomic.Int64
	lastNow   atomic.Int64 // the latest time a caller passed, unix nanos

	// The last reserve a call returned, +1 (0: none yet), and when.
	seen   atomic.Int64
	seenAt atomic.Int64

	mu sync.Mutex // one script call at a time per process

	kick   chan struct{}
	stop   chan struct{}
	done   chan struct{}
	closed atomic.Bool

	granted, refused, localGrants, calls, errs atomic.Int64
	level                                      atomic.Int64 // the shared reserve at the last script call
}

var _ budget.Budget = (*Budget)(nil)

// New validates cfg and starts the background flusher. It does not contact
// Redis: an unreachable server makes retries fail closed, not New fail.
func New(cfg Config) (*Budget, error) {
	if cfg.Client == nil {
		return nil, fmt.Errorf("%w: Client is required", ErrInvalid)
	}
	if cfg.Key == "" || len(cfg.Key) > MaxKeyLen || strings.ContainsAny(cfg.Key, "\r\n") {
		return nil, fmt.Errorf("%w: Key must be 1..%d bytes without line breaks, got %d bytes", ErrInvalid, MaxKeyLen, len(cfg.Key))
	}
	tb := &budget.TokenBucket{Max: cfg.Max, PerRequest: cfg.PerRequest, PerRetry: cfg.PerRetry, MinToRetry: cfg.MinToRetry, Initial: cfg.Initial, Empty: cfg.Empty}
	if err := tb.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"EarnBatch", int64(cfg.EarnBatch)}, {"SpendBatch", int64(cfg.SpendBatch)},
		{"ReserveTTL", int64(cfg.ReserveTTL)}, {"KeyTTL", int64(cfg.KeyTTL)},
		{"OpTimeout", int64(cfg.OpTimeout)}, {"Cooldown", int64(cfg.Cooldown)},
	} {
		if f.v < 0 {
			return nil, fmt.Errorf("%w: %s must be >= 0 (0 means the default), got %d", ErrInvalid, f.name, f.v)
		}
	}
	if cfg.EarnBatch > 1<<20 || cfg.SpendBatch > 1<<10 {
		return nil, fmt.Errorf("%w: EarnBatch must be <= %d and SpendBatch <= %d, got %d and %d", ErrInvalid, 1<<20, 1<<10, cfg.EarnBatch, cfg.SpendBatch)
	}
	if cfg.KeyTTL > 0 && cfg.KeyTTL < time.Millisecond {
		return nil, fmt.Errorf("%w: KeyTTL must be 0 (no expiry) or >= 1ms, got %v", ErrInvalid, cfg.KeyTTL)
	}
	b := &Budget{
		c: cfg.Client, key: cfg.Key,
		max: or(cfg.Max, budget.DefaultMax), earn: or(cfg.PerRequest, budget.DefaultPerRequest),
		cost: or(cfg.PerRetry, budget.DefaultPerRetry), initial: tb.Credits(),
		earnBatch: or(int64(cfg.EarnBatch), DefaultEarnBatch), spendBatch: or(int64(cfg.SpendBatch), DefaultSpendBatch),
		reserveTTL: or(cfg.ReserveTTL, DefaultReserveTTL), keyTTLms: cfg.KeyTTL.Milliseconds(),
		opTimeout: or(cfg.OpTimeout, DefaultOpTimeout), cooldown: or(cfg.Cooldown, DefaultCooldown),
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
	}
	b.need = or(cfg.MinToRetry, b.cost)
	b.level.Store(b.initial)
	go b.flusher()
	return b, nil
}

func or[T int64 | time.Duration](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// Request counts the original's earning locally and always allows it.
func (b *Budget) Request(now time.Time) bool {
	b.lastNow.Store(now.UnixNano())
	// Pending earnings beyond Max would be capped away anyway.
	if p := b.pending.Load(); p < b.max {
		p = b.pending.Add(b.earn)
		if p >= b.earnBatch*b.earn {
			b.poke()
		}
	}
	if b.reserved.Load() > 0 && b.expired(now) {
		b.refundDue.Store(true)
		b.poke()
	}
	return true
}

func (b *Budget) expired(now time.Time) bool {
	return now.UnixNano()-b.reservedAt.Load() >= int64(b.reserveTTL)
}

func (b *Budget) poke() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// Retry allows a retry if this process holds a fresh reservation, or if
// the shared reserve grants one (reserving up to SpendBatch). It answers
// false — fail closed — when Redis cannot be reached, without calling it
// while the circuit is open (see the package doc).
func (b *Budget) Retry(now time.Time) bool {
	b.lastNow.Store(now.UnixNano())
	if !b.expired(now) && b.takeReserved() {
		b.localGrants.Add(1)
		b.granted.Add(1)
		return true
	}
	if b.down(now) {
		return b.fallback()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	// Another goroutine may have reserved while we waited for the lock.
	if !b.expired(now) && b.takeReserved() {
		b.localGrants.Add(1)
		b.granted.Add(1)
		return true
	}
	if b.down(now) { // the call we waited for failed
		return b.fallback()
	}
	got, err := b.exec(now, b.spendBatch, true)
	if err != nil {
		return b.fallback()
	}
	if got == 0 {
		b.refused.Add(1)
		return false
	}
	// One of the granted retries is this one; keep the rest.
	if got > 1 {
		b.reserved.Add(got - 1)
		b.reservedAt.Store(now.UnixNano())
	}
	b.granted.Add(1)
	return true
}

// fallback is Retry's answer without Redis: fail closed, but an old
// reservation is still paid for.
func (b *Budget) fallback() bool {
	if b.takeReserved() {
		b.granted.Add(1)
		return true
	}
	b.refused.Add(1)
	return false
}

// down reports whether the circuit is open at now: Redis failed and no
// probe has succeeded since. Past the backoff it asks the flusher for one
// probe (and stays open until the probe succeeds).
func (b *Budget) down(now time.Time) bool {
	until := b.downUntil.Load()
	if until == 0 {
		return false
	}
	if b.closed.Load() {
		return now.UnixNano() < until // no flusher after Close: the caller probes
	}
	if now.UnixNano() >= until && b.probing.CompareAndSwap(false, true) {
		b.probeAt.Store(now.UnixNano())
		b.poke()
	}
	return true
}

// failed opens the circuit at now for the backoff of the fails-th failure
// in a row: Cooldown, doubled per failure, at most max(MaxCooldown,
// Cooldown).
func (b *Budget) failed(now time.Time) {
	n := b.fails.Add(1)
	wait, limit := b.cooldown, max(MaxCooldown, b.cooldown)
	for i := int64(1); i < n && wait < limit; i++ {
		wait *= 2
	}
	b.downUntil.Store(now.Add(min(wait, limit)).UnixNano())
}

func (b *Budget) takeReserved() bool {
	for {
		r := b.reserved.Load()
		if r <= 0 {
			return false
		}
		if b.reserved.CompareAndSwap(r, r-1) {
			return true
		}
	}
}

// Result is a no-op: this budget is earned by requests, not by outcomes.
func (b *Budget) Result(time.Time, bool) {}

// exec runs the script once with b.mu held: it pushes pending earnings,
// refunds the reservation when refund is set (or due) and asks for want
// retries. It returns the retries granted.
func (b *Budget) exec(now time.Time, want int64, refund bool) (int64, error) {
	earned := b.pending.Swap(0)
	var back int64
	if refund || b.refundDue.Swap(false) {
		back = b.reserved.Swap(0)
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.opTimeout)
	defer cancel()
	b.calls.Add(1)
	granted, reserve, err := b.run(ctx, earned, back*b.cost, want, b.keyTTLms, b.seed(now))
	if err != nil {
		b.errs.Add(1)
		b.failed(now)
		// Keep what was not delivered: earnings (capped) and the reservation.
		if earned > 0 {
			if p := b.pending.Add(earned); p > b.max {
				b.pending.Add(b.max - p)
			}
		}
		b.reserved.Add(back)
		return 0, err
	}
	b.fails.Store(0)
	b.downUntil.Store(0)
	b.seen.Store(reserve + 1)
	b.seenAt.Store(now.UnixNano())
	return granted, nil
}

// seed is the reserve an empty key starts from at now: the last one seen,
// unless none was or the key may have expired since (KeyTTL); else
// Initial.
func (b *Budget) seed(now time.Time) int64 {
	s := b.seen.Load()
	if s == 0 || b.keyTTLms > 0 && now.UnixNano()-b.seenAt.Load() >= b.keyTTLms*int64(time.Millisecond) {
		return b.initial
	}
	return s - 1
}

// run calls the script once (budget.lua documents the arguments) and
// returns the retries granted and the reserve left.
func (b *Budget) run(ctx context.Context, earned, refund, want, ttlms, initial int64) (granted, reserve int64, err error) {
	res, err := script.Run(ctx, b.c, []string{b.key},
		b.max, b.cost, b.need, earned, refund, want, initial, ttlms).Int64Slice()
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("unexpected script reply %v", res)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("redisbudget: %s: %w", b.key, err)
	}
	b.level.Store(res[1])
	return res[0], res[1], nil
}

// Flush pushes pending earnings and returns every unused reservation to
// the shared reserve now.
func (b *Budget) Flush(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	if b.pending.Load() == 0 && b.reserved.Load() == 0 {
		return nil
	}
	_, err := b.exec(b.now(), 0, true)
	return err
}

// now is the latest time a caller passed (the system clock before any):
// the flusher's and Flush's time, so that every decision reads the
// callers' clock.
func (b *Budget) now() time.Time {
	if n := b.lastNow.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Now()
}

// Close stops the flusher and flushes. The Budget keeps answering
// afterwards (retries still go to Redis; earnings are only pushed by
// retries and Flush).
func (b *Budget) Close() error {
	if b.closed.CompareAndSwap(false, true) {
		close(b.stop)
		<-b.done
	}
	return b.Flush(context.Background())
}

func (b *Budget) flusher() {
	defer close(b.done)
	for {
		select {
		case <-b.stop:
			return
		case <-b.kick:
		}
		b.mu.Lock()
		switch {
		case b.probing.Load():
			// The circuit's probe, at the time of the Retry that asked
			// for it: it also pushes what is pending.
			_, _ = b.exec(time.Unix(0, b.probeAt.Load()), 0, false)
			b.probing.Store(false)
		case b.downUntil.Load() == 0 && (b.pending.Load() >= b.earnBatch*b.earn || b.refundDue.Load()):
			_, _ = b.exec(b.now(), 0, false)
		}
		b.mu.Unlock()
	}
}

// Credits reads the shared reserve (if the key does not exist: what it
// would start from, see the package doc).
func (b *Budget) Credits(ctx context.Context) (int64, error) {
	_, reserve, err := b.run(ctx, 0, 0, 0, -1, b.seed(b.now())) // ttl < 0: read only
	return reserve, err
}

// Level returns this process's view of the shared reserve, for a gauge:
// the reserve the last script call saw (Initial before the first) plus
// the retries this process holds reserved, over Max, in [0, 1]. It makes
// no Redis call — it reads atomic words, allocates nothing and is safe to
// call from any goroutine — so it lags the shared reserve by up to one
// round trip, and other processes' spending shows at this process's next
// call (Credits reads the shared reserve itself).
func (b *Budget) Level(time.Time) float64 {
	return min(1, max(0, float64(b.level.Load()+b.reserved.Load()*b.cost)/float64(b.max)))
}

var _ budget.Leveler = (*Budget)(nil)

// Stats are a process's counters.
type Stats struct {
	Granted     int64 // retries allowed
	Refused     int64 // retries refused (including while Redis was down)
	LocalGrants int64 // retries allowed from a reservation, without a round trip
	Calls       int64 // script calls
	Errors      int64 // failed script calls
	Pending     int64 // earnings not yet pushed
	Reserved    int64 // retries reserved and not yet used
}

// Stats returns the counters.
func (b *Budget) Stats() Stats {
	return Stats{
		Granted: b.granted.Load(), Refused: b.refused.Load(), LocalGrants: b.localGrants.Load(),
		Calls: b.calls.Load(), Errors: b.errs.Load(),
		Pending: b.pending.Load(), Reserved: b.reserved.Load(),
	}
}
