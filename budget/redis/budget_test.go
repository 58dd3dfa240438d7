package redisbudget_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/staggerhq/stagger/budget"
	redisbudget "github.com/staggerhq/stagger/budget/redis"
)

// redisURL is where the tests find Redis.
func redisURL() string {
	if u := os.Getenv("STAGGER_REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// client returns a client of the test Redis, or skips (fails under CI=true)
// when it is unreachable.
func client(t testing.TB) *redis.Client { return redisbudget.RedisClient(t) }

// uniqueKey is a fresh key per test run, removed afterwards.
func uniqueKey(t testing.TB, c *redis.Client) string {
	var b [6]byte
	rand.Read(b[:])
	k := "stagger:test:" + strings.ReplaceAll(t.Name(), "/", ":") + ":" + hex.EncodeToString(b[:])
	t.Cleanup(func() { c.Del(context.Background(), k) })
	return k
}

func newBudget(t testing.TB, cfg redisbudget.Config) *redisbudget.Budget {
	t.Helper()
	b, err := redisbudget.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func credits(t testing.TB, b *redisbudget.Budget) int64 {
	t.Helper()
	n, err := b.Credits(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// Without batching (EarnBatch 1, SpendBatch 1) the shared budget answers
// exactly like budget.TokenBucket for any sequence of calls.
func TestMatchesTokenBucketWithoutBatching(t *testing.T) {
	c := client(t)
	b := newBudget(t, redisbudget.Config{Client: c, Key: uniqueKey(t, c), EarnBatch: 1, SpendBatch: 1, Initial: 15})
	model := &budget.TokenBucket{Initial: 15}
	// A deterministic mix: bursts of originals and of retries, past the cap.
	ops := ""
	for i := 0; i < 40; i++ {
		ops += strings.Repeat("o", (i*7)%13) + strings.Repeat("r", (i*5)%4)
	}
	ops += strings.Repeat("o", 300) + strings.Repeat("r", 25)
	for i, op := range ops {
		switch op {
		case 'o':
			b.Request(t0)
			model.Request(t0)
			if err := b.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
		case 'r':
			if got, want := b.Retry(t0), model.Retry(t0); got != want {
				t.Fatalf("op %d: Retry = %v, TokenBucket says %v", i, got, want)
			}
		}
		// Every op made a script call: the local view is the shared reserve.
		if got, want := b.Level(t0), model.Level(t0); got != want {
			t.Fatalf("op %d: Level = %v, TokenBucket's is %v", i, got, want)
		}
		if i%50 == 0 {
			if got, want := credits(t, b), model.Credits(); got != want {
				t.Fatalf("op %d: credits %d, TokenBucket has %d", i, got, want)
			}
		}
	}
	if got, want := credits(t, b), model.Credits(); got != want {
		t.Fatalf("credits %d, TokenBucket has %d", got, want)
	}
	if s := b.Stats(); s.Granted == 0 || s.Refused == 0 {
		t.Errorf("the sequence did not exercise both answers: %+v", s)
	}
}

// Batching: earnings are pushed once per EarnBatch, retries reserved
// SpendBatch at a time — far fewer round trips than calls.
func TestBatchingSavesRoundTrips(t *testing.T) {
	c := client(t)
	b := newBudget(t, redisbudget.Config{Client: c, Key: uniqueKey(t, c), SpendBatch: 4, Initial: 200})
	for range 8 {
		if !b.Retry(t0) {
			t.Fatal("retry refused with 200 credits")
		}
	}
	s := b.Stats()
	if s.Calls != 2 || s.LocalGrants != 6 {
		t.Errorf("8 retries took %d round trips (%d local), want 2 (6 local)", s.Calls, s.LocalGrants)
	}
	if got := credits(t, b); got != 200-80 {
		t.Errorf("credits %d, want 120", got)
	}
	for range 95 {
		b.Request(t0)
	}
	if err := b.Close(); err != nil { // pushes the pending earnings
		t.Fatal(err)
	}
	if got := credits(t, b); got != 200 {
		t.Errorf("credits %d after 95 earnings, want the cap 200", got)
	}
}

// The over-grant bound: reservations sit outside the shared reserve and its
// cap, so at one instant P processes can make Max/PerRetry + P·SpendBatch
// retries (an exact bucket: Max/PerRetry) — but never, over the whole run,
// more than (Initial + earned)/PerRetry.
func TestOverGrantBound(t *testing.T) {
	c := client(t)
	key := uniqueKey(t, c)
	const P, k = 4, 3
	var bs []*redisbudget.Budget
	for range P {
		bs = append(bs, newBudget(t, redisbudget.Config{Client: c, Key: key, SpendBatch: k, EarnBatch: 1000, Initial: 200}))
	}
	granted := 0
	for _, b := range bs {
		if !b.Retry(t0) { // reserves k, uses 1, holds k-1
			t.Fatal("first retry refused")
		}
		granted++
	}
	if got := credits(t, bs[0]); got != 200-P*k*10 {
		t.Fatalf("credits %d, want %d", got, 200-P*k*10)
	}
	// Originals of a fifth process refill the shared reserve to its cap.
	filler := newBudget(t, redisbudget.Config{Client: c, Key: key, EarnBatch: 1000})
	for range 120 {
		filler.Request(t0)
	}
	if err := filler.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := credits(t, bs[0]); got != 200 {
		t.Fatalf("credits %d after the refill, want 200", got)
	}
	burst := 0
	for _, b := range bs {
		for b.Retry(t0) {
			burst++
		}
	}
	exact := 200 / 10
	if burst != exact+P*(k-1) {
		t.Errorf("burst = %d retries, want %d (shared) + %d (held)", burst, exact, P*(k-1))
	}
	if burst > exact+P*k {
		t.Errorf("burst %d exceeds the documented bound Max/PerRetry + P·SpendBatch = %d", burst, exact+P*k)
	}
	granted += burst
	// Whole run: Initial 200 + 120 earned (exactly 120 entered: nothing was capped away).
	if granted != (200+120)/10 {
		t.Errorf("granted %d over the run, want exactly (Initial + earned)/PerRetry = %d", granted, (200+120)/10)
	}
}

// Unused reservations go back after ReserveTTL.
func TestReservationExpires(t *testing.T) {
	c := client(t)
	key := uniqueKey(t, c)
	a := newBudget(t, redisbudget.Config{Client: c, Key: key, SpendBatch: 3, Initial: 30, ReserveTTL: time.Second})
	b := newBudget(t, redisbudget.Config{Client: c, Key: key, SpendBatch: 1})
	if !a.Retry(t0) {
		t.Fatal("a: retry refused")
	}
	if b.Retry(t0) {
		t.Fatal("b got a retry while a holds the whole reserve")
	}
	a.Request(t0.Add(time.Second)) // the reservation is now stale: the flusher returns it
	// The flusher takes the reservation (Reserved 0) before its script
	// call returns it to Redis: reading the credits then raced the call.
	// Flush waits for the call in flight (one script call at a time) and
	// then has nothing left to push.
	for a.Stats().Reserved != 0 {
		time.Sleep(time.Millisecond)
	}
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := a.Stats(); s.Calls != 2 {
		t.Fatalf("%d script calls, want 2 (the reservation, the flusher's refund): Flush pushed what the flusher should have", s.Calls)
	}
	if got := credits(t, a); got != 21 { // 2 retries back + the 1 earning pushed with them
		t.Fatalf("credits %d after the refund, want 21", got)
	}
	if !b.Retry(t0.Add(time.Second)) {
		t.Error("b: retry refused after a's reservation went back")
	}
	// A stale reservation is not used: Retry goes back to Redis.
	a2 := newBudget(t, redisbudget.Config{Client: c, Key: key, SpendBatch: 2, ReserveTTL: time.Second})
	c.Set(context.Background(), key, 20, 0)
	if !a2.Retry(t0) {
		t.Fatal("a2: retry refused")
	}
	c.Set(context.Background(), key, 0, 0) // meanwhile others drained the reserve
	if a2.Retry(t0.Add(2 * time.Second)) {
		// the held retry went back (credits 10) and was granted again
		if got := credits(t, a2); got != 0 {
			t.Errorf("credits %d, want 0", got)
		}
	} else {
		t.Error("a2: the refunded reservation should have paid for this retry")
	}
}

func TestFailsClosedWhenRedisIsUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // a closed port: connection refused
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	b := newBudget(t, redisbudget.Config{Client: c, Key: "k", Initial: 200, Cooldown: time.Second})
	if !b.Request(t0) {
		t.Fatal("an original was refused: a budget must never refuse original work")
	}
	if b.Retry(t0) {
		t.Fatal("retry allowed with Redis unreachable: must fail closed")
	}
	s := b.Stats()
	if s.Errors != 1 || s.Calls != 1 || s.Refused != 1 {
		t.Fatalf("stats %+v, want 1 call, 1 error, 1 refusal", s)
	}
	// Within the cooldown: refused without a round trip.
	if b.Retry(t0.Add(500 * time.Millisecond)) {
		t.Fatal("retry allowed during the cooldown")
	}
	if s := b.Stats(); s.Calls != 1 {
		t.Errorf("%d calls during the cooldown, want none", s.Calls-1)
	}
	// After it: the flusher probes Redis again (and the circuit stays
	// open); the caller is answered at once, without a call of its own.
	if b.Retry(t0.Add(time.Second)) {
		t.Fatal("retry allowed after the cooldown")
	}
	for b.Stats().Errors < 2 { // the probe
		time.Sleep(time.Millisecond)
	}
	if s := b.Stats(); s.Calls != 2 || s.Errors != 2 {
		t.Errorf("stats %+v, want one probe", s)
	}
	if err := b.Flush(context.Background()); err == nil || !strings.Contains(err.Error(), "redisbudget") {
		t.Errorf("Flush = %v, want an error naming the package", err)
	}
	if _, err := b.Credits(context.Background()); err == nil {
		t.Error("Credits succeeded against a closed port")
	}
}

// A reservation already paid for is still used while Redis is down.
func TestReservationOutlivesAnOutage(t *testing.T) {
	opt, _ := redis.ParseURL(redisURL())
	probe := client(t)
	c := redis.NewClient(opt)
	key := uniqueKey(t, probe)
	b := newBudget(t, redisbudget.Config{Client: c, Key: key, SpendBatch: 3, Initial: 30, ReserveTTL: time.Second})
	if !b.Retry(t0) {
		t.Fatal("retry refused")
	}
	c.Close() // Redis is gone for this process
	// The reservation is stale, so Retry asks Redis (which fails), then
	// falls back on the retries it has already paid for.
	later := t0.Add(2 * time.Second)
	if !b.Retry(later) {
		t.Fatal("the first reserved retry was not used")
	}
	if !b.Retry(later) {
		t.Fatal("the second reserved retry was not used (during the cooldown)")
	}
	if b.Retry(later) {
		t.Fatal("a fourth retry was allowed with Redis gone")
	}
	if s := b.Stats(); s.Errors != 1 || s.Granted != 3 {
		t.Errorf("stats %+v, want 3 granted, 1 error", s)
	}
}

func TestBadConfig(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	cases := []struct {
		cfg  redisbudget.Config
		want string
	}{
		{redisbudget.Config{Key: "k"}, "Client is required"},
		{redisbudget.Config{Client: c}, "Key must be"},
		{redisbudget.Config{Client: c, Key: strings.Repeat("k", 513)}, "Key must be"},
		{redisbudget.Config{Client: c, Key: "a\nb"}, "Key must be"},
		{redisbudget.Config{Client: c, Key: "k", Max: -1}, "TokenBucket.Max must be >= 0"},
		{redisbudget.Config{Client: c, Key: "k", PerRetry: 300}, "PerRetry (300) must be <= Max"},
		{redisbudget.Config{Client: c, Key: "k", Initial: 201}, "Initial (201) must be <= Max"},
		{redisbudget.Config{Client: c, Key: "k", EarnBatch: -1}, "EarnBatch must be >= 0"},
		{redisbudget.Config{Client: c, Key: "k", SpendBatch: 5000}, "SpendBatch <= 1024"},
		{redisbudget.Config{Client: c, Key: "k", OpTimeout: -time.Second}, "OpTimeout must be >= 0"},
		{redisbudget.Config{Client: c, Key: "k", KeyTTL: time.Microsecond}, "KeyTTL must be 0"},
	}
	for _, tc := range cases {
		_, err := redisbudget.New(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error saying %q", tc.cfg, err, tc.want)
		}
	}
}

func TestKeyTTL(t *testing.T) {
	c := client(t)
	key := uniqueKey(t, c)
	b := newBudget(t, redisbudget.Config{Client: c, Key: key, KeyTTL: time.Minute, EarnBatch: 1})
	b.Request(t0)
	if err := b.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	ttl := c.PTTL(context.Background(), key).Val()
	if ttl <= 0 || ttl > time.Minute {
		t.Errorf("key TTL %v, want (0, 1m]", ttl)
	}
}

// Four processes share one budget and never retry more than its credit
// allows: the exact count is checked two ways.
func TestFourProcessesShareOneBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four processes")
	}
	c := client(t)
	const procs = 4
	run := func(t *testing.T, mode string, initial, max int64) (granted, earned int64, key string) {
		key = uniqueKey(t, c)
		c.Del(context.Background(), key+":ready")
		t.Cleanup(func() { c.Del(context.Background(), key+":ready") })
		var wg sync.WaitGroup
		outs := make([]string, procs)
		errs := make([]error, procs)
		for i := range procs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cmd := exec.Command(os.Args[0], "-test.run=^TestChildProcess$", "-test.v")
				cmd.Env = append(os.Environ(),
					"STAGGER_REDISBUDGET_CHILD="+mode, "STAGGER_REDISBUDGET_KEY="+key,
					"STAGGER_REDISBUDGET_PROCS="+strconv.Itoa(procs),
					"STAGGER_REDISBUDGET_INITIAL="+strconv.FormatInt(initial, 10),
					"STAGGER_REDISBUDGET_MAX="+strconv.FormatInt(max, 10))
				out, err := cmd.CombinedOutput()
				outs[i], errs[i] = string(out), err
			}()
		}
		wg.Wait()
		for i := range procs {
			if errs[i] != nil {
				t.Fatalf("child %d: %v\n%s", i, errs[i], outs[i])
			}
			var g, e int64
			found := false
			sc := bufio.NewScanner(strings.NewReader(outs[i]))
			for sc.Scan() {
				if _, err := fmt.Sscanf(sc.Text(), "RESULT granted=%d earned=%d", &g, &e); err == nil {
					found = true
				}
			}
			if !found {
				t.Fatalf("child %d printed no result:\n%s", i, outs[i])
			}
			t.Logf("child %d: granted %d, earned %d", i, g, e)
			granted += g
			earned += e
		}
		return granted, earned, key
	}

	t.Run("drain", func(t *testing.T) {
		// 200 credits, no earnings: exactly 20 retries among the four.
		granted, _, key := run(t, "drain", 200, 200)
		if granted != 20 {
			t.Errorf("four processes retried %d times, want exactly 20", granted)
		}
		if v, _ := c.Get(context.Background(), key).Int64(); v != 0 {
			t.Errorf("reserve left %d, want 0", v)
		}
	})
	t.Run("earn and spend", func(t *testing.T) {
		// A cap too high to bind, so every credit is accounted for:
		// reserve + 10·retries == Initial + earned, exactly.
		const initial, max = 50, 1_000_000
		granted, earned, key := run(t, "mixed", initial, max)
		v, err := c.Get(context.Background(), key).Int64()
		if err != nil {
			t.Fatal(err)
		}
		if v+10*granted != initial+earned {
			t.Errorf("reserve %d + 10×%d retries = %d, want Initial + earned = %d",
				v, granted, v+10*granted, initial+earned)
		}
		if granted == 0 || granted > (initial+earned)/10 {
			t.Errorf("granted %d, want within (0, %d]", granted, (initial+earned)/10)
		}
	})
}

// TestChildProcess is the body of one of the four processes; it does
// nothing unless started by TestFourProcessesShareOneBudget.
func TestChildProcess(t *testing.T) {
	mode := os.Getenv("STAGGER_REDISBUDGET_CHILD")
	if mode == "" {
		t.Skip("helper process for TestFourProcessesShareOneBudget")
	}
	c := client(t)
	key := os.Getenv("STAGGER_REDISBUDGET_KEY")
	procs, _ := strconv.ParseInt(os.Getenv("STAGGER_REDISBUDGET_PROCS"), 10, 64)
	initial, _ := strconv.ParseInt(os.Getenv("STAGGER_REDISBUDGET_INITIAL"), 10, 64)
	max, _ := strconv.ParseInt(os.Getenv("STAGGER_REDISBUDGET_MAX"), 10, 64)
	b, err := redisbudget.New(redisbudget.Config{Client: c, Key: key, Initial: initial, Max: max, SpendBatch: 3, ReserveTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// Start together.
	ctx := context.Background()
	c.Incr(ctx, key+":ready")
	for start := time.Now(); ; {
		if n, _ := c.Get(ctx, key+":ready").Int64(); n >= procs {
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatal("the other processes did not start")
		}
		time.Sleep(time.Millisecond)
	}
	var granted, earned int64
	switch mode {
	case "drain":
		for b.Retry(time.Now()) {
			granted++
		}
	case "mixed":
		for i := range 600 {
			b.Request(time.Now())
			earned++
			if i%3 == 0 && b.Retry(time.Now()) {
				granted++
			}
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("RESULT granted=%d earned=%d\n", granted, earned)
}

func BenchmarkRequest(b *testing.B) {
	c := client(b)
	bud := newBudget(b, redisbudget.Config{Client: c, Key: uniqueKey(b, c)})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		now := time.Now()
		for pb.Next() {
			bud.Request(now)
		}
	})
}

func BenchmarkRetry(b *testing.B) {
	for _, batch := range []int{1, 2, 8} {
		b.Run(fmt.Sprintf("SpendBatch=%d", batch), func(b *testing.B) {
			c := client(b)
			bud := newBudget(b, redisbudget.Config{Client: c, Key: uniqueKey(b, c), Max: 1 << 40, Initial: 1 << 40, SpendBatch: batch})
			b.ReportAllocs()
			now := time.Now()
			for b.Loop() {
				if !bud.Retry(now) {
					b.Fatal("refused")
				}
			}
		})
	}
}
