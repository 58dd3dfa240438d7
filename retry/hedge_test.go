package retry

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/budget"
)

const ms = time.Millisecond

// syncRecorder is a recorder (Budget and Limiter) safe for the hedger's
// concurrent attempts.
type syncRecorder struct {
	mu sync.Mutex
	recorder
}

func (r *syncRecorder) TryAcquire() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.recorder.TryAcquire()
}
func (r *syncRecorder) Release(ok bool) { r.mu.Lock(); defer r.mu.Unlock(); r.recorder.Release(ok) }
func (r *syncRecorder) Request(now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.recorder.Request(now)
}
func (r *syncRecorder) Retry(now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.recorder.Retry(now)
}
func (r *syncRecorder) Result(now time.Time, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recorder.Result(now, ok)
}
func (r *syncRecorder) calls() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.log, "|")
}

// hookLog records the hooks of a hedged call, with the virtual time since
// start of each.
type hookLog struct {
	mu    sync.Mutex
	start time.Time
	log   []string
}

func (h *hookLog) hooks() Hooks {
	rec := func(kind string) func(Event) {
		return func(e Event) {
			h.mu.Lock()
			defer h.mu.Unlock()
			s := fmt.Sprintf("%v %s %d", time.Since(h.start), kind, e.Attempt)
			if kind == "giveup" {
				s += " " + e.Reason.String()
			}
			if kind == "retry" {
				s += fmt.Sprintf(" %v", e.Delay)
			}
			h.log = append(h.log, s)
		}
	}
	return Hooks{OnAttempt: rec("attempt"), OnRetry: rec("retry"), OnSuccess: rec("success"), OnGiveUp: rec("giveup")}
}

func (h *hookLog) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return strings.Join(h.log, "|")
}

// script runs attempt n (counting the calls of fn from 1) as plan[n-1]
// says: how long it takes and what it returns; an attempt whose context
// ends first returns the context's error. It records how each attempt
// ended.
type script struct {
	plan  []scriptStep
	calls atomic.Int32
	mu    sync.Mutex
	ended map[int]string
	start time.Time
}

type scriptStep struct {
	take time.Duration // 0: forever (until the context ends)
	err  error
}

func (s *script) fn(ctx context.Context) error {
	n := int(s.calls.Add(1))
	st := scriptStep{}
	if n <= len(s.plan) {
		st = s.plan[n-1]
	}
	var after <-chan time.Time
	if st.take > 0 {
		after = time.After(st.take)
	}
	select {
	case <-after:
		s.end(n, fmt.Sprintf("returned at %v", time.Since(s.start)))
		return st.err
	case <-ctx.Done():
		s.end(n, fmt.Sprintf("canceled at %v", time.Since(s.start)))
		return ctx.Err()
	}
}

func (s *script) end(n int, what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended == nil {
		s.ended = map[int]string{}
	}
	s.ended[n] = what
}

func (s *script) endings() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b []string
	for n := 1; n <= len(s.ended); n++ {
		b = append(b, fmt.Sprintf("%d %s", n, s.ended[n]))
	}
	return strings.Join(b, "|")
}

func TestHedgeFiresAfterDelayAndFirstSuccessWins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &syncRecorder{recorder: recorder{slots: 10, request: true, retryOK: true}}
		hl := &hookLog{start: time.Now()}
		p := &Policy{MaxAttempts: 3, Budget: rec, Limiter: rec, Hooks: hl.hooks()}
		h := &Hedge{Delay: 10 * ms}
		sc := &script{start: time.Now(), plan: []scriptStep{{0, nil}, {5 * ms, nil}}}
		err := h.Do(context.Background(), p, sc.fn)
		synctest.Wait()
		if err != nil {
			t.Fatal(err)
		}
		if got := time.Since(hl.start); got != 15*ms {
			t.Errorf("Do returned after %v, want 15ms (hedge at 10ms + 5ms)", got)
		}
		same(t, "hooks", hl.String(), "0s attempt 1|10ms attempt 2|15ms success 2")
		same(t, "attempts", sc.endings(), "1 canceled at 15ms|2 returned at 15ms")
		// The loser tells the Budget nothing and frees its slot as a success.
		same(t, "budget and limiter calls", rec.calls(), "acquire|request|acquire|retry|result true|release true|release true")
		if rec.inflight != 0 {
			t.Errorf("%d slots held", rec.inflight)
		}
	})
}

func TestHedgeNoHedgeWhenFastEnough(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hl := &hookLog{start: time.Now()}
		h := &Hedge{Delay: 10 * ms}
		sc := &script{start: time.Now(), plan: []scriptStep{{9 * ms, nil}}}
		if err := h.Do(context.Background(), &Policy{Hooks: hl.hooks()}, sc.fn); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		same(t, "hooks", hl.String(), "0s attempt 1|9ms success 1")
		if sc.calls.Load() != 1 {
			t.Errorf("%d calls", sc.calls.Load())
		}
	})
}

func TestHedgeLosersCanceled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hl := &hookLog{start: time.Now()}
		h := &Hedge{Delay: 10 * ms, MaxInFlight: 3}
		sc := &script{start: time.Now(), plan: []scriptStep{{0, nil}, {0, nil}, {5 * ms, nil}}}
		if err := h.Do(context.Background(), &Policy{Hooks: hl.hooks()}, sc.fn); err != nil {
			t.Fatal(err)
		}
		same(t, "hooks", hl.String(), "0s attempt 1|10ms attempt 2|20ms attempt 3|25ms success 3")
		// Do returned only after both losers had returned.
		same(t, "attempts", sc.endings(), "1 canceled at 25ms|2 canceled at 25ms|3 returned at 25ms")
	})
}

func TestHedgeBudgetRefusalMeansNoHedge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &syncRecorder{recorder: recorder{slots: 10, request: true, retryOK: false}}
		hl := &hookLog{start: time.Now()}
		p := &Policy{MaxAttempts: 5, Budget: rec, Limiter: rec, Hooks: hl.hooks()}
		h := &Hedge{Delay: 10 * ms}
		sc := &script{start: time.Now(), plan: []scriptStep{{35 * ms, nil}}}
		if err := h.Do(context.Background(), p, sc.fn); err != nil {
			t.Fatal(err)
		}
		same(t, "hooks", hl.String(), "0s attempt 1|35ms success 1")
		// A hedge was asked for at 10, 20 and 30 ms; each refusal gave
		// its slot back unsent.
		same(t, "budget and limiter calls", rec.calls(), "acquire|request|acquire|retry|release true|acquire|retry|release true|acquire|retry|release true|result true|release true")
	})
}

func TestHedgeBudgetTokenBucketSpent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &budget.TokenBucket{Initial: 25} // two retries (10 credits each)
		h := &Hedge{Delay: 10 * ms, MaxInFlight: 5}
		var started atomic.Int32
		p := &Policy{MaxAttempts: 5, Budget: b, Hooks: Hooks{OnAttempt: func(Event) { started.Add(1) }}}
		sc := &script{start: time.Now(), plan: []scriptStep{{100 * ms, nil}}}
		if err := h.Do(context.Background(), p, sc.fn); err != nil {
			t.Fatal(err)
		}
		if started.Load() != 3 {
			t.Errorf("%d attempts started, want 3 (the original and two hedges the budget paid for)", started.Load())
		}
	})
}

func TestHedgeMaxInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var g gauge
		var calls atomic.Int32
		hl := &hookLog{start: time.Now()}
		h := &Hedge{Delay: 10 * ms, MaxInFlight: 2}
		p := &Policy{MaxAttempts: 6, Hooks: hl.hooks()}
		err := h.Do(context.Background(), p, func(ctx context.Context) error {
			g.enter()
			defer g.leave()
			c := calls.Add(1)
			if c < 4 {
				time.Sleep(25 * ms) // fails after 25ms
				return errFlaky
			}
			time.Sleep(time.Millisecond)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if g.peak.Load() != 2 {
			t.Errorf("peak %d in flight, want 2", g.peak.Load())
		}
		// 1 at 0; hedge 2 at 10; 1 fails at 25, freeing a slot: 3 starts at
		// once (its hedge was due at 20); 2 fails at 35 → 4 starts; 4 wins.
		same(t, "hooks", hl.String(), "0s attempt 1|10ms attempt 2|25ms attempt 3|35ms attempt 4|36ms success 4")
	})
}

func TestHedgeAllFailThenRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hl := &hookLog{start: time.Now()}
		h := &Hedge{Delay: 10 * ms}
		p := &Policy{MaxAttempts: 4, Schedule: backoff.Constant(100 * ms), Hooks: hl.hooks()}
		sc := &script{start: time.Now(), plan: []scriptStep{{12 * ms, errFlaky}, {4 * ms, errFlaky}, {5 * ms, nil}}}
		if err := h.Do(context.Background(), p, sc.fn); err != nil {
			t.Fatal(err)
		}
		// 1 fails at 12 while 2 runs (the next hedge is due at 20); 2 fails
		// at 14 as the last in flight: a retry 100ms later, as Do decides.
		same(t, "hooks", hl.String(), "0s attempt 1|10ms attempt 2|14ms retry 2 100ms|114ms attempt 3|119ms success 3")
	})
}

func TestHedgeExhausted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hl := &hookLog{start: time.Now()}
		rec := &syncRecorder{recorder: recorder{slots: 10, request: true, retryOK: true}}
		h := &Hedge{Delay: 10 * ms}
		p := &Policy{MaxAttempts: 2, Budget: rec, Hooks: hl.hooks()}
		sc := &script{start: time.Now(), plan: []scriptStep{{30 * ms, errFlaky}, {30 * ms, errFlaky}}}
		err := h.Do(context.Background(), p, sc.fn)
		var e *Error
		if !errors.As(err, &e) || e.Reason != Exhausted || e.Attempts != 2 || !errors.Is(err, errFlaky) {
			t.Fatalf("err %v", err)
		}
		same(t, "hooks", hl.String(), "0s attempt 1|10ms attempt 2|40ms giveup 2 exhausted")
		// Both failures were real: the Budget hears both.
		same(t, "budget and limiter calls", rec.calls(), "request|retry|result false|result false")
	})
}

func TestHedgePermanentStopsEverything(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hl := &hookLog{start: time.Now()}
		h := &Hedge{Delay: 10 * ms, MaxInFlight: 3}
		sc := &script{start: time.Now(), plan: []scriptStep{{0, nil}, {5 * ms, errNoGood}}}
		err := h.Do(context.Background(), &Policy{Hooks: hl.hooks()}, sc.fn)
		if !errors.Is(err, ErrPermanent) {
			t.Fatalf("err %v", err)
		}
		same(t, "hooks", hl.String(), "0s attempt 1|10ms attempt 2|15ms giveup 2 permanent")
		same(t, "attempts", sc.endings(), "1 canceled at 15ms|2 returned at 15ms")
		// An error of no class stops everything too, returned unchanged.
		sc = &script{start: sc.start, plan: []scriptStep{{0, nil}, {5 * ms, errBoom}}}
		if err := h.Do(context.Background(), nil, sc.fn); err != errBoom {
			t.Errorf("unknown error: %v", err)
		}
	})
}

func TestHedgeCanceledContextCancelsEveryHedge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &syncRecorder{recorder: recorder{slots: 10, request: true, retryOK: true}}
		hl := &hookLog{start: time.Now()}
		h := &Hedge{Delay: 10 * ms, MaxInFlight: 3}
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(25*ms, cancel)
		sc := &script{start: time.Now()}
		err := h.Do(ctx, &Policy{Budget: rec, Hooks: hl.hooks()}, sc.fn)
		if !errors.Is(err, context.Canceled) || !errors.Is(err, Canceled.Err()) {
			t.Fatalf("err %v", err)
		}
		same(t, "hooks", hl.String(), "0s attempt 1|10ms attempt 2|20ms attempt 3|25ms giveup 3 canceled")
		same(t, "attempts", sc.endings(), "1 canceled at 25ms|2 canceled at 25ms|3 canceled at 25ms")
		// One interrupted attempt is judged, as Do judges its one; the others say nothing.
		same(t, "budget and limiter calls", rec.calls(), "request|retry|retry|result false")
		// A context done before the call: no attempt.
		sc = &script{start: sc.start}
		if err := h.Do(ctx, nil, sc.fn); !errors.Is(err, context.Canceled) || sc.calls.Load() != 0 {
			t.Errorf("done context: %v, %d calls", err, sc.calls.Load())
		}
	})
}

func TestHedgeDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hl := &hookLog{start: time.Now()}
		h := &Hedge{Delay: 10 * ms, MaxInFlight: 4}
		ctx, cancel := context.WithTimeout(context.Background(), 25*ms)
		defer cancel()
		sc := &script{start: time.Now()}
		err := h.Do(ctx, &Policy{MaxAttempts: 5, Hooks: hl.hooks()}, sc.fn)
		if !errors.Is(err, ErrDeadline) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err %v", err)
		}
		same(t, "hooks", hl.String(), "0s attempt 1|10ms attempt 2|20ms attempt 3|25ms giveup 3 deadline")
		same(t, "attempts", sc.endings(), "1 canceled at 25ms|2 canceled at 25ms|3 canceled at 25ms")

		// Policy.Timeout 20ms: the hedge due at 20ms finds no time left and
		// is not sent; the attempts' contexts end at 20ms.
		hl = &hookLog{start: time.Now()}
		sc = &script{start: time.Now()}
		err = h.Do(context.Background(), &Policy{MaxAttempts: 5, Timeout: 20 * ms, Hooks: hl.hooks()}, sc.fn)
		if !errors.Is(err, ErrDeadline) {
			t.Fatalf("err %v", err)
		}
		same(t, "hooks", hl.String(), "0s attempt 1|10ms attempt 2|20ms giveup 2 deadline")
		same(t, "attempts", sc.endings(), "1 canceled at 20ms|2 canceled at 20ms")
	})
}

func TestHedgeQuantileLearning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &Hedge{Delay: time.Second, Quantile: 0.9, MinSamples: 100}
		p := &Policy{MaxAttempts: 2}
		for i := range 99 {
			d := time.Duration(i%100+1) * ms
			if err := h.Do(context.Background(), p, func(context.Context) error { time.Sleep(d); return nil }); err != nil {
				t.Fatal(err)
			}
			if got := h.CurrentDelay(); got != time.Second {
				t.Fatalf("after %d samples the delay is %v, want the fixed 1s", i+1, got)
			}
		}
		for i := 99; i < 1000; i++ {
			d := time.Duration(i%100+1) * ms
			h.Do(context.Background(), p, func(context.Context) error { time.Sleep(d); return nil })
		}
		// Latencies are 1..100 ms evenly: the 0.9 quantile is 90 ms, to
		// the histogram's 1/16 of a power of two.
		got := h.CurrentDelay()
		if got < 90*ms || got > 90*ms*17/16 {
			t.Errorf("learned delay %v, want 90ms … %v", got, 90*ms*17/16)
		}
		// A 300ms call is now hedged at the learned delay.
		hl := &hookLog{start: time.Now()}
		sc := &script{start: time.Now(), plan: []scriptStep{{300 * ms, nil}, {ms, nil}}}
		if err := h.Do(context.Background(), &Policy{Hooks: hl.hooks()}, sc.fn); err != nil {
			t.Fatal(err)
		}
		same(t, "hooks", hl.String(), fmt.Sprintf("0s attempt 1|%v attempt 2|%v success 2", got, got+ms))
	})
}

func TestHedgeQuantileFollowsChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &Hedge{Delay: time.Second, Quantile: 0.5}
		p := &Policy{MaxAttempts: 1} // no hedging: only learning
		run := func(n int, d time.Duration) {
			for range n {
				h.Do(context.Background(), p, func(context.Context) error { time.Sleep(d); return nil })
			}
		}
		hp := &Policy{MaxAttempts: 2}
		learn := func(n int, d time.Duration) {
			for range n {
				h.Do(context.Background(), hp, func(context.Context) error { time.Sleep(d); return nil })
			}
		}
		run(10, ms) // MaxAttempts 1 calls Do: nothing learned
		if h.CurrentDelay() != time.Second {
			t.Fatalf("learned %v without hedging", h.CurrentDelay())
		}
		learn(3000, 10*ms)
		if got := h.CurrentDelay(); got < 10*ms || got > 11*ms {
			t.Fatalf("median %v, want ~10ms", got)
		}
		learn(6000, 3*ms) // faster than the delay: learned too
		if got := h.CurrentDelay(); got < 3*ms || got > 4*ms {
			t.Errorf("median after the change %v, want ~3ms: the histogram must forget", got)
		}
	})
}

func TestHedgeHistogramBuckets(t *testing.T) {
	prev := time.Duration(-1)
	for i := 1; i < histBuckets; i++ { // bucket 0 is never used: d < 1 counts as 1
		u := histUpper(i)
		if u <= prev {
			t.Fatalf("bucket %d upper %v <= previous %v", i, u, prev)
		}
		if got := histBucket(u); got != i && u < time.Duration(1<<62) {
			t.Fatalf("bucket of upper(%d)=%v is %d", i, u, got)
		}
		if i > 1 {
			if got := histBucket(prev + 1); got != i {
				t.Fatalf("bucket of %v is %d, want %d", prev+1, got, i)
			}
		}
		prev = u
	}
	for _, d := range []time.Duration{-5, 0, 1, 15, 16, 17, ms, time.Hour, 1<<63 - 1} {
		i := histBucket(d)
		if i < 0 || i >= histBuckets || histUpper(i) < d {
			t.Errorf("%v in bucket %d (upper %v)", d, i, histUpper(i))
		}
		if d >= 16 && float64(histUpper(i)-d) > float64(d)/16 {
			t.Errorf("%v: bucket upper %v is more than 1/16 away", d, histUpper(i))
		}
	}
}

func TestHedgeValidate(t *testing.T) {
	for _, c := range []struct {
		h    *Hedge
		want string
	}{
		{&Hedge{}, "Hedge.Delay must be > 0"},
		{&Hedge{Delay: -1}, "Hedge.Delay must be > 0"},
		{&Hedge{Delay: 1, Quantile: 1}, "Hedge.Quantile must be in [0, 1)"},
		{&Hedge{Delay: 1, Quantile: -0.1}, "Hedge.Quantile must be in [0, 1)"},
		{&Hedge{Delay: 1, Quantile: nan()}, "Hedge.Quantile must be in [0, 1)"},
		{&Hedge{Delay: 1, MinSamples: -1}, "Hedge.MinSamples must be in [0, 1024]"},
		{&Hedge{Delay: 1, MinSamples: 5000}, "Hedge.MinSamples must be in [0, 1024]"},
		{&Hedge{Delay: 1, MaxInFlight: -2}, "Hedge.MaxInFlight must be >= 0"},
	} {
		err := c.h.Do(context.Background(), nil, func(context.Context) error { return nil })
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.want, err, c.want)
		}
	}
	h := &Hedge{Delay: 1}
	if err := h.Do(context.Background(), nil, nil); err != errNilFunc {
		t.Errorf("nil fn: %v", err)
	}
	if err := h.Do(context.Background(), &Policy{MaxAttempts: -1}, func(context.Context) error { return nil }); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad policy: %v", err)
	}
}

// gauge counts what is in flight and its peak.
type gauge struct{ n, peak atomic.Int64 }

func (g *gauge) enter() {
	n := g.n.Add(1)
	for {
		pk := g.peak.Load()
		if n <= pk || g.peak.CompareAndSwap(pk, n) {
			return
		}
	}
}

func (g *gauge) leave() { g.n.Add(-1) }

// same reports got != want for what, both in full.
func same(t *testing.T, what, got, want string) {
	t.Helper()
	if got != want {
		t.Errorf("%s\n got %s\nwant %s", what, got, want)
	}
}

func nan() float64 { var z float64; return z / z }

func TestHedgePanicGoesOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, first := range []bool{true, false} {
			b := mustBulkhead(4)
			h := &Hedge{Delay: 10 * ms}
			var calls atomic.Int32
			got := func() (v any) {
				defer func() { v = recover() }()
				h.Do(context.Background(), &Policy{Limiter: b}, func(ctx context.Context) error {
					n := calls.Add(1)
					if first && n == 1 || !first && n == 2 {
						time.Sleep(15 * ms)
						panic("boom")
					}
					<-ctx.Done()
					return ctx.Err()
				})
				return nil
			}()
			if got != "boom" {
				t.Errorf("first=%v: recovered %v", first, got)
			}
			if b.InFlight() != 0 {
				t.Errorf("first=%v: %d slots held", first, b.InFlight())
			}
		}
	})
}

// TestHedgePanicAfterRetry: an attempt of the retry the first attempt's
// failure decided runs on a goroutine of its own; its panic reaches the
// caller.
func TestHedgePanicAfterRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &Hedge{Delay: 10 * ms}
		var calls atomic.Int32
		got := func() (v any) {
			defer func() { v = recover() }()
			h.Do(context.Background(), &Policy{MaxAttempts: 3, Schedule: backoff.Constant(ms)}, func(ctx context.Context) error {
				if calls.Add(1) == 1 {
					return errFlaky // before the delay: a retry, 1ms later
				}
				panic("boom")
			})
			return nil
		}()
		if got != "boom" || calls.Load() != 2 {
			t.Errorf("recovered %v after %d calls, want boom after 2", got, calls.Load())
		}
	})
}

// TestHedgeRace: many goroutines share one Hedge (learning), one Budget and
// one Limiter; every call ends, no slot leaks, the limiter's bound holds
// and each call fires exactly one of OnSuccess and OnGiveUp.
func TestHedgeRace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &Hedge{Delay: 5 * ms, Quantile: 0.8, MinSamples: 50, MaxInFlight: 3}
		bh := mustBulkhead(40)
		b := &budget.TokenBucket{Initial: budget.DefaultMax}
		var attempts, hedges, ends, calls atomic.Int64
		var gg gauge
		p := &Policy{MaxAttempts: 4, Schedule: backoff.Constant(ms), Budget: b, Limiter: bh,
			Hooks: Hooks{
				OnAttempt: func(e Event) {
					attempts.Add(1)
					if e.Attempt > 1 {
						hedges.Add(1)
					}
				},
				OnSuccess: func(Event) { ends.Add(1) },
				OnGiveUp:  func(Event) { ends.Add(1) },
			}}
		var wg sync.WaitGroup
		for g := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 40 {
					calls.Add(1)
					var k atomic.Int64
					h.Do(context.Background(), p, func(ctx context.Context) error {
						gg.enter()
						defer gg.leave()
						mine := k.Add(1)
						d := time.Duration((int64(g)*7+int64(i)*13+mine*3)%20+1) * ms
						select {
						case <-time.After(d):
						case <-ctx.Done():
							return ctx.Err()
						}
						if (int64(g+i)+mine)%5 == 0 {
							return errFlaky
						}
						return nil
					})
				}
			}()
		}
		wg.Wait()
		if bh.InFlight() != 0 {
			t.Errorf("%d slots leaked", bh.InFlight())
		}
		if gg.peak.Load() > 40 {
			t.Errorf("peak %d in flight > 40 slots", gg.peak.Load())
		}
		if ends.Load() != calls.Load() {
			t.Errorf("%d success/give-up hooks for %d calls", ends.Load(), calls.Load())
		}
		if hedges.Load() == 0 || attempts.Load() > 4*calls.Load() {
			t.Errorf("%d attempts (%d after the first) for %d calls: no hedge, or more than MaxAttempts", attempts.Load(), hedges.Load(), calls.Load())
		}
		if h.CurrentDelay() == h.Delay {
			t.Error("nothing learned")
		}
	})
}

func TestHedgeOffIsDo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, c := range []struct {
			h *Hedge
			p Policy
		}{{&Hedge{Delay: ms, MaxInFlight: 1}, Policy{MaxAttempts: 3}}, {&Hedge{Delay: ms}, Policy{MaxAttempts: 1}}} {
			sc := &script{start: time.Now(), plan: []scriptStep{{10 * ms, nil}}}
			if err := c.h.Do(context.Background(), &c.p, sc.fn); err != nil || sc.calls.Load() != 1 {
				t.Errorf("MaxInFlight %d, MaxAttempts %d: %v, %d calls", c.h.MaxInFlight, c.p.MaxAttempts, err, sc.calls.Load())
			}
		}
	})
}

func TestHedgeSuccessPathAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop what it is given; .ci/run runs this test without -race")
	}
	h := &Hedge{Delay: time.Second}
	fn := func(context.Context) error { return nil }
	cctx, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, 1))
	defer cancel()
	for _, ctx := range []context.Context{context.Background(), cctx} {
		// A block of hedgeCtxBlock contexts is one allocation: AllocsPerRun
		// rounds it down to 0 per call, the test asks for less than 1/16.
		var ms0, ms1 runtime.MemStats
		runtime.ReadMemStats(&ms0)
		const calls = 1024
		for range calls {
			h.Do(ctx, nil, fn)
		}
		runtime.ReadMemStats(&ms1)
		if n := ms1.Mallocs - ms0.Mallocs; n > calls/16 {
			t.Errorf("%d allocations in %d calls that needed no hedge, want <= %d (one block of contexts per %d calls)", n, calls, calls/16, hedgeCtxBlock)
		}
	}
}

// A call the Limiter refuses returns its run to the pool: it costs the
// error it returns, not a new run (a timer and a block of contexts).
func TestHedgeRefusedAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop what it is given; .ci/run runs this test without -race")
	}
	h := &Hedge{Delay: time.Second}
	bh := mustBulkhead(1)
	bh.TryAcquire() // full: every call is refused
	defer bh.Release(false)
	p := &Policy{Limiter: bh}
	fn := func(context.Context) error { return nil }
	h.Do(context.Background(), p, fn) // warm the pool
	if n := testing.AllocsPerRun(1000, func() { h.Do(context.Background(), p, fn) }); n > 2 {
		t.Errorf("%v allocations per refused call, want at most 2 (its error)", n)
	}
}

func BenchmarkHedgeRefused(b *testing.B) {
	h := &Hedge{Delay: time.Second}
	bh := mustBulkhead(1)
	bh.TryAcquire() // full: every call is refused
	defer bh.Release(false)
	p := &Policy{Limiter: bh}
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	b.ReportAllocs()
	for b.Loop() {
		h.Do(ctx, p, fn)
	}
}

type ctxKey struct{}

// TestHedgeAttemptContext: the attempts' own context (no WithCancel) has
// its parent's values and deadline, is canceled when Do returns and is
// never handed to another call, and contexts derived from it end with it.
func TestHedgeAttemptContext(t *testing.T) {
	h := &Hedge{Delay: time.Hour}
	dl := time.Now().Add(time.Hour)
	parent, cancel := context.WithDeadline(context.WithValue(context.Background(), ctxKey{}, "v"), dl)
	defer cancel()
	var kept []context.Context
	for range 2 * hedgeCtxBlock {
		h.Do(parent, nil, func(ctx context.Context) error {
			if ctx.Value(ctxKey{}) != "v" {
				t.Error("parent's value lost")
			}
			if d, ok := ctx.Deadline(); !ok || !d.Equal(dl) {
				t.Errorf("deadline %v %v", d, ok)
			}
			if ctx.Err() != nil {
				t.Errorf("live attempt's context: %v", ctx.Err())
			}
			kept = append(kept, ctx)
			return nil
		})
	}
	seen := map[context.Context]bool{}
	for _, c := range kept {
		if seen[c] {
			t.Fatal("an attempt's context was given to a second call")
		}
		seen[c] = true
		if c.Err() != context.Canceled {
			t.Fatalf("after Do: Err %v, want context.Canceled", c.Err())
		}
		select {
		case <-c.Done():
		default:
			t.Fatal("after Do: Done not closed")
		}
	}
	// A parent canceled mid-attempt: Err sees it without Done, and a
	// watcher of Done (or of a context derived from it) wakes.
	for _, watch := range []string{"err", "done", "derived", "afterfunc"} {
		pctx, pcancel := context.WithCancel(context.Background())
		err := h.Do(pctx, nil, func(ctx context.Context) error {
			switch watch {
			case "err":
				pcancel()
				return ctx.Err()
			case "done":
				go pcancel()
				<-ctx.Done()
			case "derived":
				c, cc := context.WithTimeout(ctx, time.Hour)
				defer cc()
				go pcancel()
				<-c.Done()
			case "afterfunc":
				woke := make(chan struct{})
				stop := context.AfterFunc(ctx, func() { close(woke) })
				if stop2 := context.AfterFunc(ctx, func() { t.Error("a stopped AfterFunc ran") }); !stop2() {
					t.Error("stop of a pending AfterFunc returned false")
				}
				go pcancel()
				<-woke
				if stop() {
					t.Error("stop after the function ran returned true")
				}
			}
			return ctx.Err()
		})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s: %v", watch, err)
		}
	}
}

// TestHedgeDerivedContextOfLoser: a loser waiting on a context derived
// from its own ends when the winner returns.
func TestHedgeDerivedContextOfLoser(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &Hedge{Delay: 10 * ms}
		var n atomic.Int32
		var loser error
		err := h.Do(context.Background(), nil, func(ctx context.Context) error {
			if n.Add(1) == 1 {
				c, cancel := context.WithCancel(ctx)
				defer cancel()
				<-c.Done()
				loser = c.Err()
				return loser
			}
			return nil
		})
		if err != nil || loser != context.Canceled {
			t.Errorf("Do %v, loser's derived context %v", err, loser)
		}
		synctest.Wait() // no goroutine left behind
	})
}

// TestHedgePooledRace runs pooled calls (outside a synctest bubble, on
// real timers) from many goroutines, some hedged, some not, some failing
// at first, under the race detector; it asserts only what holds whatever
// the timing: every call ends with one outcome, no slot leaks.
func TestHedgePooledRace(t *testing.T) {
	h := &Hedge{Delay: 200 * time.Microsecond, MaxInFlight: 3}
	bh := mustBulkhead(64)
	var ends, calls atomic.Int64
	p := &Policy{MaxAttempts: 3, Limiter: bh, Hooks: Hooks{
		OnSuccess: func(Event) { ends.Add(1) },
		OnGiveUp:  func(Event) { ends.Add(1) },
	}}
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				calls.Add(1)
				var k atomic.Int32
				h.Do(context.Background(), p, func(ctx context.Context) error {
					switch mine := k.Add(1); {
					case (g+i)%3 == 0 && mine == 1:
						<-ctx.Done() // hedged: waits for the winner
						return ctx.Err()
					case (g+i)%5 == 0 && mine == 1:
						return errFlaky
					}
					return nil
				})
			}
		}()
	}
	wg.Wait()
	if bh.InFlight() != 0 {
		t.Errorf("%d slots leaked", bh.InFlight())
	}
	if ends.Load() != calls.Load() {
		t.Errorf("%d outcomes for %d calls", ends.Load(), calls.Load())
	}
}

func BenchmarkHedgeSuccess(b *testing.B) {
	h := &Hedge{Delay: time.Second}
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	b.ReportAllocs()
	for b.Loop() {
		h.Do(ctx, nil, fn)
	}
}

func BenchmarkHedgeSuccessQuantileBudget(b *testing.B) {
	h := &Hedge{Delay: time.Second, Quantile: 0.99}
	p := &Policy{Budget: &budget.TokenBucket{}}
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			h.Do(ctx, p, fn)
		}
	})
}

// BenchmarkHedgeHedged: every call hedges after 1 ns; the first attempt
// waits for its cancellation, the hedge wins. Most of the time is the
// runtime's wake-up for the timer (see bench/hedge_test.go).
func BenchmarkHedgeHedged(b *testing.B) {
	h := &Hedge{Delay: 1}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		var n atomic.Int32
		h.Do(ctx, nil, func(ctx context.Context) error {
			if n.Add(1) == 1 {
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		})
	}
}
