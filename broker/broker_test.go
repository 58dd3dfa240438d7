package broker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/budget"
	"github.com/staggerhq/stagger/internal/brokerwire"
	"github.com/staggerhq/stagger/limit"
	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/retry"
)

func TestTiersFor(t *testing.T) {
	tiers := broker.DefaultTiers
	for _, c := range []struct {
		d    time.Duration
		want int
	}{{0, 0}, {time.Millisecond, 0}, {10 * time.Second, 0}, {10*time.Second + 1, 1}, {time.Minute, 1}, {5 * time.Minute, 2}, {time.Hour, 2}} {
		if got := tiers.For(c.d); got != c.want {
			t.Errorf("For(%v) = %d, want %d", c.d, got, c.want)
		}
	}
	other := broker.Tiers{200 * time.Millisecond, 90 * time.Minute, 2 * time.Hour}
	names := []string{tiers.Name(0), tiers.Name(1), tiers.Name(2), other.Name(0), other.Name(1), other.Name(2)}
	if got := strings.Join(names, ","); got != "10s,1m,10m,200ms,90m,2h" {
		t.Errorf("names = %s", got)
	}
}

func TestTiersValidate(t *testing.T) {
	if err := broker.DefaultTiers.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tiers broker.Tiers
		msg   string
	}{
		{nil, "at least one"},
		{broker.Tiers{0}, "Tiers[0] must be in"},
		{broker.Tiers{-time.Second}, "Tiers[0] must be in"},
		{broker.Tiers{25 * time.Hour}, "Tiers[0] must be in"},
		{broker.Tiers{time.Second, 1500 * time.Microsecond}, "Tiers[1] must be whole milliseconds"},
		{broker.Tiers{time.Second, time.Second}, "increase strictly"},
	} {
		err := c.tiers.Validate()
		if !errors.Is(err, broker.ErrInvalid) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("Validate(%v) = %v, want %q", c.tiers, err, c.msg)
		}
	}
}

func TestStateRoundTrip(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_123)
	st := broker.State{Attempts: 2, Prev: 400 * time.Millisecond, Due: now.Add(time.Second), FirstAttempt: now.Add(-time.Second),
		FirstFailure: now, Error: "boom", Reason: "exhausted", Origin: "orders/orders"}
	h := map[string]string{}
	st.Encode(func(k, v string) { h[k] = v })
	got, err := broker.DecodeState(func(k string) (string, bool) { v, ok := h[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	if !got.Due.Equal(st.Due) || !got.FirstAttempt.Equal(st.FirstAttempt) || !got.FirstFailure.Equal(st.FirstFailure) {
		t.Fatalf("times differ: %+v vs %+v", got, st)
	}
	got.Due, got.FirstAttempt, got.FirstFailure = st.Due, st.FirstAttempt, st.FirstFailure
	if got != st {
		t.Fatalf("round trip: %+v, want %+v", got, st)
	}
	for _, bad := range []map[string]string{
		{broker.HeaderAttempt: "-1"}, {broker.HeaderAttempt: "x"}, {broker.HeaderAttempt: "99999999999"},
		{broker.HeaderDue: "1.5"}, {broker.HeaderDelay: "-3"},
	} {
		_, err := broker.DecodeState(func(k string) (string, bool) { v, ok := bad[k]; return v, ok })
		if err == nil {
			t.Errorf("DecodeState(%v) accepted a malformed header", bad)
		}
	}
}

func TestErrorTextBounded(t *testing.T) {
	long := strings.Repeat("é", broker.MaxErrorLen)
	s := brokerwire.ErrorText(errors.New(long))
	if len(s) > broker.MaxErrorLen || !strings.HasPrefix(long, s) || len(s) < broker.MaxErrorLen-1 {
		t.Fatalf("ErrorText: len %d", len(s))
	}
}

// clock is a manual clock for the Processor.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestProcessor(t *testing.T) {
	c := &clock{t: time.UnixMilli(1_700_000_000_000)}
	var seen []retry.Delivery
	results := map[string]error{}
	h := func(ctx context.Context, _ []byte) error {
		d, _ := retry.DeliveryFrom(ctx)
		seen = append(seen, d)
		c.t = c.t.Add(5 * time.Millisecond) // the attempt takes 5ms
		return results[d.ID]
	}
	p := &broker.Processor{Handler: h, Policy: broker.CascadePolicy(broker.DefaultTiers), Source: "test", Now: c.now}

	results["a"] = retry.Retryable(errors.New("503"))
	o := p.Process(context.Background(), "a", nil, broker.State{})
	if o.Action != broker.Retry || o.Delay != 10*time.Second || o.State.Attempts != 1 || !o.State.Due.Equal(c.t.Add(10*time.Second)) || o.State.Error != "503" {
		t.Fatalf("first failure: %+v", o)
	}
	if d := seen[0]; d.ID != "a" || d.Attempt != 1 || d.MaxAttempts != 4 || d.Source != "test" {
		t.Fatalf("delivery %+v", seen[0])
	}
	first := o.State.FirstFailure
	// Back before it is due: parked again, handler not run, no attempt counted.
	o2 := p.Process(context.Background(), "a", nil, o.State)
	if o2.Action != broker.Park || o2.Delay != 10*time.Second || len(seen) != 1 || o2.State.Attempts != 1 {
		t.Fatalf("early redelivery: %+v", o2)
	}
	// Due: attempt 2, cascade moves to the 1m tier.
	c.t = o.State.Due
	o = p.Process(context.Background(), "a", nil, o.State)
	if o.Action != broker.Retry || o.Delay != time.Minute || o.State.Attempts != 2 || !o.State.FirstFailure.Equal(first) {
		t.Fatalf("second failure: %+v", o)
	}
	// After(d) longer than the schedule raises the delay.
	results["a"] = retry.After(errors.New("busy"), 3*time.Minute)
	c.t = o.State.Due
	o = p.Process(context.Background(), "a", nil, o.State)
	if o.Action != broker.Retry || o.Delay != 10*time.Minute {
		t.Fatalf("third failure with After(3m): %+v", o)
	}
	c.t = o.State.Due
	o = p.Process(context.Background(), "a", nil, o.State)
	if o.Action != broker.Dead || o.Reason != retry.Exhausted || o.State.Reason != "exhausted" || o.State.Attempts != 4 {
		t.Fatalf("fourth failure: %+v", o)
	}

	results["p"] = retry.Permanent(errors.New("bad json"))
	if o := p.Process(context.Background(), "p", nil, broker.State{}); o.Action != broker.Dead || o.Reason != retry.PermanentError || o.State.Attempts != 1 {
		t.Fatalf("permanent: %+v", o)
	}
	results["u"] = errors.New("???")
	if o := p.Process(context.Background(), "u", nil, broker.State{}); o.Action != broker.Dead || o.State.Reason != "unknown" {
		t.Fatalf("unknown: %+v", o)
	}
	// Policy.Classify turns unknown errors retryable.
	p2 := *p
	p2.Policy = broker.CascadePolicy(broker.DefaultTiers)
	p2.Policy.Classify = func(error) retry.Class { return retry.ClassRetryable }
	if o := p2.Process(context.Background(), "u", nil, broker.State{}); o.Action != broker.Retry {
		t.Fatalf("unknown with Classify: %+v", o)
	}
	if o := p.Process(context.Background(), "ok", nil, broker.State{}); o.Action != broker.Ack {
		t.Fatalf("success: %+v", o)
	}
}

func TestProcessorDeadlineAndBudget(t *testing.T) {
	c := &clock{t: time.UnixMilli(1_700_000_000_000)}
	fail := func(context.Context, []byte) error { return retry.Retryable(errors.New("down")) }
	pol := &retry.Policy{MaxAttempts: 10, Schedule: backoff.Constant(time.Second), Timeout: 1500 * time.Millisecond}
	p := &broker.Processor{Handler: fail, Policy: pol, Now: c.now}
	o := p.Process(context.Background(), "d", nil, broker.State{})
	if o.Action != broker.Retry {
		t.Fatalf("first: %+v", o)
	}
	c.t = o.State.Due // 1s after the first attempt; +1s would pass the 1.5s deadline
	if o = p.Process(context.Background(), "d", nil, o.State); o.Action != broker.Dead || o.Reason != retry.Deadline {
		t.Fatalf("deadline: %+v", o)
	}

	b := &budget.TokenBucket{Empty: true} // a retry needs 10 originals' credit
	p = &broker.Processor{Handler: fail, Policy: &retry.Policy{Budget: b}, Now: c.now}
	if o = p.Process(context.Background(), "b", nil, broker.State{}); o.Action != broker.Dead || o.Reason != retry.Budget {
		t.Fatalf("budget: %+v", o)
	}
}

func TestProcessorInbox(t *testing.T) {
	n := 0
	h := func(context.Context, []byte) error { n++; return nil }
	p := &broker.Processor{Handler: h, Inbox: queue.NewMemoryInbox()}
	for i := range 3 {
		o := p.Process(context.Background(), "m1", nil, broker.State{})
		if o.Action != broker.Ack || o.Duplicate != (i > 0) {
			t.Fatalf("delivery %d: %+v", i, o)
		}
	}
	p.Process(context.Background(), "", nil, broker.State{})
	p.Process(context.Background(), "", nil, broker.State{})
	if n != 3 {
		t.Fatalf("handler ran %d times, want 1 for m1 and 2 for the ID-less messages", n)
	}
}

func TestEncodeBytesMatchesEncode(t *testing.T) {
	st := broker.State{Attempts: 3, Prev: 400 * time.Millisecond, Due: time.UnixMilli(1_700_000_001_000), FirstAttempt: time.UnixMilli(1_700_000_000_000),
		FirstFailure: time.UnixMilli(1_700_000_000_005), Error: "boom", Reason: "exhausted", Origin: "orders/0/7"}
	want := map[string]string{}
	st.Encode(func(k, v string) { want[k] = v })
	got := map[string]string{}
	buf := st.EncodeBytes(make([]byte, 0, 8), func(k string, v []byte) { got[k] = string(v) }) // grows: earlier values stay valid
	if len(want) != 8 || len(got) != len(want) {
		t.Fatalf("Encode wrote %d headers, EncodeBytes %d", len(want), len(got))
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: EncodeBytes %q, Encode %q", k, got[k], v)
		}
	}
	if len(buf) == 0 {
		t.Error("EncodeBytes returned an empty buffer")
	}
}

func TestProcessorLimiterRefusalDeadLetters(t *testing.T) {
	ran := 0
	h := func(context.Context, []byte) error { ran++; return nil }
	lim, err := limit.NewBulkhead(1)
	if err != nil {
		t.Fatal(err)
	}
	if !lim.TryAcquire() { // the only slot is taken elsewhere
		t.Fatal("bulkhead refused its first slot")
	}
	p := &broker.Processor{Handler: h, Policy: &retry.Policy{Limiter: lim}}
	o := p.Process(context.Background(), "l", nil, broker.State{Attempts: 1, Error: "503"})
	if o.Action != broker.Dead || o.Reason != retry.Limited || o.State.Reason != "limited" || o.State.Attempts != 1 || o.State.Error != "503" || ran != 0 {
		t.Fatalf("limited: %+v (handler ran %d times)", o, ran)
	}
	lim.Release(true)
	if o := p.Process(context.Background(), "l", nil, broker.State{}); o.Action != broker.Ack || ran != 1 {
		t.Fatalf("with a free slot: %+v", o)
	}
	if !lim.TryAcquire() {
		t.Fatal("the Processor did not give its slot back (End)")
	}
}

// TestProcessorPanicReleasesSlot: a handler that panics gives its Limiter
// slot back before the panic goes on, with and without an inbox, so an
// adapter that recovers panics keeps its bulkhead.
func TestProcessorPanicReleasesSlot(t *testing.T) {
	for _, inbox := range []queue.Inbox{nil, queue.NewMemoryInbox()} {
		lim, err := limit.NewBulkhead(1)
		if err != nil {
			t.Fatal(err)
		}
		p := &broker.Processor{Handler: func(context.Context, []byte) error { panic("handler bug") },
			Policy: &retry.Policy{Limiter: lim}, Inbox: inbox}
		func() {
			defer func() {
				if recover() == nil {
					t.Error("the panic must go on")
				}
			}()
			p.Process(context.Background(), "p", nil, broker.State{})
		}()
		if n := lim.InFlight(); n != 0 {
			t.Errorf("inbox %T: %d slots held after the handler panicked", inbox, n)
		}
	}
}

// TestProcessorClockReads: a success reads the clock once (the start), or
// never when the adapter passes the start; a failure reads it again; a
// budget needs the end time of every attempt.
func TestProcessorClockReads(t *testing.T) {
	reads := 0
	now := func() time.Time { reads++; return time.UnixMilli(1_700_000_000_000) }
	var fail error
	p := &broker.Processor{Handler: func(context.Context, []byte) error { return fail }, Policy: broker.CascadePolicy(broker.DefaultTiers), Now: now}
	for _, c := range []struct {
		name   string
		fail   error
		start  time.Time
		budget bool
		want   int
	}{
		{"success", nil, time.Time{}, false, 1},
		{"success with start", nil, time.UnixMilli(1_700_000_000_000), false, 0},
		{"failure with start", retry.Retryable(errors.New("x")), time.UnixMilli(1_700_000_000_000), false, 1},
		{"success with budget", nil, time.UnixMilli(1_700_000_000_000), true, 1},
	} {
		reads, fail = 0, c.fail
		p.Policy.Budget = nil
		if c.budget {
			p.Policy.Budget = &budget.TokenBucket{}
		}
		p.ProcessAt(context.Background(), "c", nil, broker.State{}, c.start)
		if reads != c.want {
			t.Errorf("%s: %d clock reads, want %d", c.name, reads, c.want)
		}
	}
}

func TestInterrupted(t *testing.T) {
	live := context.Background()
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	cause := errors.New("shutdown")
	withCause, cancelCause := context.WithCancelCause(context.Background())
	cancelCause(cause)
	for _, c := range []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{"success", ended, nil, false},
		{"canceled while live", live, context.Canceled, false},
		{"ctx's error", ended, context.Canceled, true},
		{"wrapped and classified", ended, retry.Retryable(fmt.Errorf("query: %w", context.Canceled)), true},
		// A failure of the handler's own is judged even while the
		// context ends (retrydriver.Step's interrupted rule).
		{"own failure during shutdown", ended, retry.Retryable(errors.New("503")), false},
		{"cause", withCause, fmt.Errorf("stopped: %w", cause), true},
	} {
		if got := broker.Interrupted(c.ctx, broker.Outcome{Err: c.err}); got != c.want {
			t.Errorf("%s: Interrupted = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestProcessorInterruptedIsNoDecision: a handler that fails with the
// cancellation of the context Process was given is not decided: no retry,
// no dead letter; OnGiveUp reports the context's reason, as retry.Do does;
// the state comes back as it came (Park), so the attempt is not counted.
func TestProcessorInterruptedIsNoDecision(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var retried, gaveUp []retry.Event
	p := &broker.Processor{
		Handler: func(ctx context.Context, _ []byte) error { cancel(); return retry.Retryable(ctx.Err()) },
		Policy: &retry.Policy{MaxAttempts: 3, Schedule: backoff.Constant(time.Second), Hooks: retry.Hooks{
			OnRetry:  func(e retry.Event) { retried = append(retried, e) },
			OnGiveUp: func(e retry.Event) { gaveUp = append(gaveUp, e) },
		}},
	}
	in := broker.State{Attempts: 1, Error: "503"}
	o := p.Process(ctx, "i", nil, in)
	if !broker.Interrupted(ctx, o) {
		t.Fatalf("outcome %+v is not Interrupted", o)
	}
	if o.Action != broker.Park || o.State.Attempts != 1 || o.State.Error != "503" || o.Reason != retry.Canceled {
		t.Errorf("outcome %+v: want Park with the state as it came and reason canceled", o)
	}
	if len(retried) != 0 || len(gaveUp) != 1 || gaveUp[0].Reason != retry.Canceled || gaveUp[0].Attempt != 2 {
		t.Errorf("hooks: OnRetry %v, OnGiveUp %v; want no retry and one give-up (attempt 2, canceled)", retried, gaveUp)
	}
}

// TestProcessorAttemptBounds: the Processor bounds an attempt as retry.Do
// does. AttemptTimeout ends the handler's context, and an unclassed error
// from that timeout is retryable; Policy.Timeout, counted from the first
// attempt, cuts an attempt at the deadline, and a retry delivered after it
// is dead-lettered without running.
func TestProcessorAttemptBounds(t *testing.T) {
	waits := func(ctx context.Context, _ []byte) error { <-ctx.Done(); return ctx.Err() }
	synctest.Test(t, func(t *testing.T) {
		p := &broker.Processor{Handler: waits, Policy: &retry.Policy{MaxAttempts: 3, AttemptTimeout: 50 * time.Millisecond,
			Schedule: backoff.Constant(time.Second)}}
		start := time.Now()
		o := p.Process(context.Background(), "a", nil, broker.State{})
		if o.Action != broker.Retry || o.State.Attempts != 1 || time.Since(start) != 50*time.Millisecond {
			t.Errorf("AttemptTimeout: %+v after %v; want a retry after 50ms", o, time.Since(start))
		}
	})
	synctest.Test(t, func(t *testing.T) {
		p := &broker.Processor{Handler: waits, Policy: &retry.Policy{MaxAttempts: 3, Timeout: time.Minute,
			Schedule: backoff.Constant(time.Second)}}
		start := time.Now()
		st := broker.State{Attempts: 1, FirstAttempt: start.Add(-time.Minute + 30*time.Millisecond)}
		o := p.Process(context.Background(), "b", nil, st)
		if o.Action != broker.Dead || o.Reason != retry.Deadline || o.State.Attempts != 2 || time.Since(start) != 30*time.Millisecond {
			t.Errorf("time left: %+v after %v; want attempt 2 cut at the deadline (30ms), dead-lettered", o, time.Since(start))
		}
	})
	ran := false
	lim, _ := limit.NewBulkhead(1)
	p := &broker.Processor{Handler: func(context.Context, []byte) error { ran = true; return nil },
		Policy: &retry.Policy{MaxAttempts: 3, Timeout: time.Minute, Limiter: lim}}
	o := p.Process(context.Background(), "c", nil, broker.State{Attempts: 1, FirstAttempt: time.Now().Add(-2 * time.Minute)})
	if ran || o.Action != broker.Dead || o.Reason != retry.Deadline || o.State.Reason != "deadline" || o.State.Attempts != 1 || lim.InFlight() != 0 {
		t.Errorf("late retry: %+v (handler ran %v, %d slots held); want dead-lettered unrun, reason deadline", o, ran, lim.InFlight())
	}
}

// TestDecodeStateUntrusted: header values come from any producer. An
// oversized value is not copied whole into the error; the attempt count
// fits an int on every platform; the error text is bounded as written.
func TestDecodeStateUntrusted(t *testing.T) {
	get := func(h map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := h[k]; return v, ok }
	}
	huge := strings.Repeat("9x", 1<<20)
	_, err := broker.DecodeState(get(map[string]string{broker.HeaderDelay: huge}))
	if err == nil || len(err.Error()) > 300 || !strings.Contains(err.Error(), broker.HeaderDelay) {
		t.Errorf("oversized header: error of %d bytes: %.300v", len(fmt.Sprint(err)), err)
	}
	if st, err := broker.DecodeState(get(map[string]string{broker.HeaderAttempt: "2147483647"})); err != nil || st.Attempts != 1<<31-1 {
		t.Errorf("MaxInt32 attempts: %+v, %v", st, err)
	}
	if _, err := broker.DecodeState(get(map[string]string{broker.HeaderAttempt: "2147483648"})); err == nil {
		t.Error("an attempt count beyond MaxInt32 was accepted (it wraps a 32-bit int)")
	}
	st, err := broker.DecodeState(get(map[string]string{broker.HeaderError: strings.Repeat("é", broker.MaxErrorLen)}))
	if err != nil || len(st.Error) > broker.MaxErrorLen || len(st.Error) < broker.MaxErrorLen-1 {
		t.Errorf("oversized error header: %d bytes, %v", len(st.Error), err)
	}
}

func TestCheckDue(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	for _, c := range []struct {
		name string
		st   broker.State
		ok   bool
	}{
		{"no due", broker.State{}, true},
		{"past", broker.State{Due: now.Add(-time.Hour)}, true},
		{"within prev", broker.State{Due: now.Add(10 * time.Minute), Prev: 10 * time.Minute}, true},
		{"skewed clocks", broker.State{Due: now.Add(10*time.Minute + broker.MaxClockSkew), Prev: 10 * time.Minute}, true},
		{"beyond prev and skew", broker.State{Due: now.Add(10*time.Minute + broker.MaxClockSkew + time.Millisecond), Prev: 10 * time.Minute}, false},
		{"nanoseconds for milliseconds", broker.State{Due: time.UnixMilli(now.UnixNano()), Prev: time.Second}, false},
		{"largest prev", broker.State{Due: time.UnixMilli(1 << 62), Prev: 1<<63 - 1}, true},
	} {
		if err := c.st.CheckDue(now); (err == nil) != c.ok || (err != nil && !strings.Contains(err.Error(), broker.HeaderDue)) {
			t.Errorf("%s: CheckDue = %v", c.name, err)
		}
	}
}

// TestProcessorMalformedDue: a due time no stagger consumer wrote is
// dead-lettered at once, unhandled, instead of parked for ever.
func TestProcessorMalformedDue(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	ran := false
	p := &broker.Processor{Handler: func(context.Context, []byte) error { ran = true; return nil }, Now: func() time.Time { return now }}
	o := p.Process(context.Background(), "m", nil, broker.State{Attempts: 1, Due: time.UnixMilli(now.UnixNano())})
	if o.Action != broker.Dead || o.State.Reason != broker.ReasonMalformed || !o.State.Due.IsZero() || o.State.Attempts != 1 ||
		!strings.Contains(o.State.Error, broker.HeaderDue) || ran {
		t.Fatalf("outcome %+v (handler ran: %v)", o, ran)
	}
}
