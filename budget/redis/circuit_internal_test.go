package redisbudget

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// switchable is a Scripter that sends every call to the real Redis (up)
// or to a closed port (down), counts the calls, and can hold them at a
// gate (a call in flight for as long as the test wants).
type switchable struct {
	up, down *redis.Client
	isUp     atomic.Bool
	calls    atomic.Int64
	mu       sync.Mutex
	gate     chan struct{} // nil: open
}

func (s *switchable) target(ctx context.Context) redis.Scripter {
	s.calls.Add(1)
	s.mu.Lock()
	g := s.gate
	s.mu.Unlock()
	if g != nil {
		<-g
	}
	if s.isUp.Load() {
		return s.up
	}
	return s.down
}

func (s *switchable) hold() { s.mu.Lock(); s.gate = make(chan struct{}); s.mu.Unlock() }
func (s *switchable) open() { s.mu.Lock(); close(s.gate); s.gate = nil; s.mu.Unlock() }

func (s *switchable) Eval(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	return s.target(ctx).Eval(ctx, src, keys, args...)
}
func (s *switchable) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return s.target(ctx).EvalSha(ctx, sha, keys, args...)
}
func (s *switchable) EvalRO(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	return s.target(ctx).EvalRO(ctx, src, keys, args...)
}
func (s *switchable) EvalShaRO(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return s.target(ctx).EvalShaRO(ctx, sha, keys, args...)
}
func (s *switchable) ScriptExists(ctx context.Context, h ...string) *redis.BoolSliceCmd {
	return s.target(ctx).ScriptExists(ctx, h...)
}
func (s *switchable) ScriptLoad(ctx context.Context, src string) *redis.StringCmd {
	return s.target(ctx).ScriptLoad(ctx, src)
}

// RedisClient returns a client of the test Redis (STAGGER_REDIS_URL), or
// skips (fails under CI=true) when it is unreachable; the package's
// external tests use it too.
func RedisClient(t testing.TB) *redis.Client {
	t.Helper()
	u := os.Getenv("STAGGER_REDIS_URL")
	if u == "" {
		u = "redis://127.0.0.1:6379/0"
	}
	opt, err := redis.ParseURL(u)
	if err != nil {
		t.Fatalf("STAGGER_REDIS_URL: %v", err)
	}
	c := redis.NewClient(opt)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		if os.Getenv("CI") == "true" {
			t.Fatalf("Redis at %s is unreachable (CI=true): %v", opt.Addr, err)
		}
		t.Skipf("Redis at %s is unreachable (set STAGGER_REDIS_URL): %v", opt.Addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func testKey(t *testing.T, c *redis.Client) string {
	var b [6]byte
	rand.Read(b[:])
	k := "stagger:test:" + t.Name() + ":" + hex.EncodeToString(b[:])
	t.Cleanup(func() { c.Del(context.Background(), k) })
	return k
}

func closedPortClient(t *testing.T) *redis.Client {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

// waitProbe waits until no probe is due or running.
func waitProbe(b *Budget) {
	for b.probing.Load() {
		time.Sleep(time.Millisecond)
	}
}

// TestDownRedisCostsCallersNothing: once a call failed, no Retry calls
// Redis: each answers from what the process holds, and the probes are the
// flusher's, one at a time, spaced by a backoff that doubles while Redis
// stays down; after a probe succeeds, retries go back to Redis.
func TestDownRedisCostsCallersNothing(t *testing.T) {
	up := RedisClient(t)
	sw := &switchable{up: up, down: closedPortClient(t)}
	sw.isUp.Store(true)
	b, err := New(Config{Client: sw, Key: testKey(t, up), SpendBatch: 1, Cooldown: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	if !b.Retry(t0) {
		t.Fatal("retry refused with a full reserve")
	}
	sw.isUp.Store(false) // Redis goes down
	if b.Retry(t0) {
		t.Fatal("retry allowed with Redis down")
	}
	// The first Retry's call and the failing one; the flusher, woken by
	// the first, may push its earnings in between (a third call) when the
	// machine is slow to schedule it. What matters is below: after the
	// failure no caller reaches Redis.
	base := sw.calls.Load()
	if base < 2 || base > 3 {
		t.Fatalf("%d calls, want 2 (3 with the flusher's push)", base)
	}

	// The probes are held at the gate: a caller that called Redis would
	// wait there too. None may.
	sw.hold()
	for i := range 50 {
		if b.Retry(t0.Add(time.Duration(i) * time.Minute)) {
			t.Fatal("retry allowed with Redis down")
		}
	}
	// Past the cooldown, one Retry asked for one probe (held at the gate);
	// no other call reached the Scripter.
	for sw.calls.Load() < base+1 {
		time.Sleep(time.Millisecond)
	}
	if n := sw.calls.Load(); n != base+1 || !b.probing.Load() {
		t.Fatalf("%d calls (probing %v), want %d: the failure, then one probe", n, b.probing.Load(), base+1)
	}
	sw.open()
	waitProbe(b) // the probe at t0+1m failed (first retry at the gate was at t0+1m)

	// The backoff doubles: the probe failed at t0+1m (the second failure
	// in a row), so the next is due 2s later.
	at := t0.Add(time.Minute)
	calls := sw.calls.Load()
	b.Retry(at.Add(1999 * time.Millisecond))
	waitProbe(b)
	if n := sw.calls.Load(); n != calls {
		t.Fatalf("a probe %v after the last, before the doubled backoff of 2s", 1999*time.Millisecond)
	}
	b.Retry(at.Add(2 * time.Second))
	waitProbe(b)
	if n := sw.calls.Load(); n != calls+1 {
		t.Fatalf("%d probes at the doubled backoff, want 1", n-calls)
	}

	// Redis is back: the next probe succeeds and retries go to Redis again.
	sw.isUp.Store(true)
	at = at.Add(2 * time.Second)
	if b.Retry(at.Add(4 * time.Second)) {
		t.Fatal("retry allowed before the probe found Redis back")
	}
	waitProbe(b)
	if b.downUntil.Load() != 0 {
		t.Fatal("the circuit stayed open after a successful probe")
	}
	if !b.Retry(at.Add(4 * time.Second)) {
		t.Fatal("retry refused with Redis back and credits left")
	}
}

// TestEmptyRestartResumesLastReserve: a Redis that lost the key (an empty
// restart; here only the test's key is deleted) resumes the reserve from
// the last one this process saw, not from Initial; with KeyTTL, a
// sighting older than KeyTTL starts from Initial (the key may have
// expired on its own).
func TestEmptyRestartResumesLastReserve(t *testing.T) {
	c := RedisClient(t)
	ctx := context.Background()
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	key := testKey(t, c)
	b, err := New(Config{Client: c, Key: key, SpendBatch: 1, EarnBatch: 1, Initial: 200})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	granted := 0
	for b.Retry(t0) {
		granted++
	}
	if granted != 20 {
		t.Fatalf("%d retries from 200 credits, want 20", granted)
	}
	c.Del(ctx, key) // the restart lost the key
	if b.Retry(t0) {
		t.Fatal("a retry allowed after an empty restart: the reserve restarted from Initial (200), not from the 0 last seen")
	}
	if v, err := c.Get(ctx, key).Int64(); err != nil || v != 0 {
		t.Fatalf("reserve after the empty restart = %d, %v; want 0 (the last seen)", v, err)
	}

	// With KeyTTL: the key expiring after KeyTTL idle is expected; a
	// process whose last sighting is that old starts it from Initial.
	key2 := testKey(t, c)
	b2, err := New(Config{Client: c, Key: key2, SpendBatch: 1, Initial: 30, KeyTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	for b2.Retry(t0) {
	}
	c.Del(ctx, key2)
	if b2.Retry(t0.Add(time.Minute)) {
		t.Fatal("retry allowed within KeyTTL of the last sighting of an empty reserve")
	}
	c.Del(ctx, key2)
	if !b2.Retry(t0.Add(2 * time.Hour)) {
		t.Fatal("retry refused when the key may have expired on its own: it starts from Initial")
	}
}

// TestClosedBudgetProbesItself: after Close there is no flusher to probe,
// so a Retry past the backoff calls Redis itself, and the circuit closes
// when it answers.
func TestClosedBudgetProbesItself(t *testing.T) {
	up := RedisClient(t)
	sw := &switchable{up: up, down: closedPortClient(t)}
	b, err := New(Config{Client: sw, Key: testKey(t, up), SpendBatch: 1, Cooldown: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	if b.Retry(t0) {
		t.Fatal("retry allowed with Redis down")
	}
	b.Close()
	sw.isUp.Store(true)
	if b.Retry(t0.Add(500 * time.Millisecond)) {
		t.Fatal("retry allowed within the cooldown")
	}
	if !b.Retry(t0.Add(time.Second)) {
		t.Fatal("retry refused past the cooldown with Redis back, after Close")
	}
}
