// Package drivertest is the conformance suite of stagger's retry drivers:
// one scripted set of cases — success, retryable failures, permanent and
// unknown errors, pushback below and above the cap, a retry that would
// start exactly at the deadline, an attempt timeout, budget and limiter
// refusals, cancellation during an attempt (with the context's error and
// with one of the work's own) and during a wait, a panicking handler — run
// against a driver, which must make exactly the hook, Budget and Limiter
// calls retry.Do makes, return the outcome retry.Do returns (nil, or the
// give-up's reason, sentinel, attempts, class and last error) and leave no
// Limiter slot held.
//
// Two differences are allowed, and each is declared by the driver and
// checked by the suite, never assumed: a durable driver that keeps the
// work where retry.Do gives up (Driver.Keeps: Run returns a *Kept, and the
// log must still show the give-up) and a driver that turns a panic into
// an error (Driver.RecoversPanics: the log must show the slot freed as an
// overload sign and the unknown error's give-up). A case that cannot
// apply to a driver is named in Driver.Skip with the reason; the suite
// rejects a skip of a case it does not have or without a reason.
//
// A driver is adapted by a [Driver]; Run checks it. Every case runs inside
// a testing/synctest bubble, so a driver's waits, clocks and timers are
// virtual and a case takes no real time. [Check] runs one case in the
// caller's bubble against any testing.TB, which is how the suite's own
// tests show that a broken driver fails it.
package drivertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/retry"
)

// Driver adapts one retry driver to the suite.
type Driver struct {
	// Name names the driver in failures.
	Name string
	// Run runs one unit of work under p until the driver stops (success,
	// a give-up, the work kept, or ctx's end), calling attempt once per
	// attempt with the attempt's context, and returns the driver's outcome
	// as its caller would see it: nil for a success, the give-up's error
	// (a *retry.Error, or the last attempt's error itself for an error of
	// no class) or, for a driver that keeps the work, a *Kept. p.Timeout
	// is the unit of work's deadline, from the moment Run is called (a
	// queue makes it the job's deadline). The time Run reads is the
	// bubble's.
	Run func(ctx context.Context, p *retry.Policy, attempt func(ctx context.Context) error) error
	// Skip names the cases that cannot apply to the driver, each with the
	// reason (a case's Name, as Cases spells it). Run fails on a name it
	// does not know and on an empty reason; a skipped case is reported
	// with its reason.
	Skip map[string]string
	// Keeps lists the give-up reasons on which the driver keeps the work
	// to be run again later instead of giving it up (a queue reschedules a
	// job the Budget or the Limiter refused; a broker leaves a message
	// whose consumer stopped for redelivery). For a case ending with one
	// of them the driver's log must be the case's KeptLog (its Want unless
	// set: the give-up is still reported through OnGiveUp), the suite
	// ends the driver's context once the give-up was reported, and Run
	// must return a *Kept carrying the attempts made.
	Keeps []retry.Reason
	// SpendsRefused: the driver counts an attempt before Begin can refuse
	// it (a queue counts it when it claims the job, as a lease expiry
	// would spend it), so work kept after a refusal at Begin carries one
	// attempt more than retry.Do made.
	SpendsRefused bool
	// Uncounted: an attempt interrupted by the end of the driver's context
	// is not counted on the work the driver keeps (a broker leaves the
	// delivery as it came, so the attempt runs again as the same one).
	Uncounted bool
	// HoldsDelivered: the driver hands a successful attempt's result to the
	// caller with its Limiter slot still held, released when the caller is
	// done with it (the HTTP transport's response body), so the slot's
	// release comes after OnSuccess.
	HoldsDelivered bool
	// RecoversPanics: the driver turns a handler's panic into an error of
	// no class instead of letting it go on: its log must be retry.Do's up
	// to the panic (the slot released as an overload sign) followed by the
	// unknown error's give-up, and Run must return an error naming the
	// panic's value.
	RecoversPanics bool
	// Classifies: the driver classes attempt errors of no class itself
	// (the HTTP transport's Classify judges a transport timeout
	// retryable), so the class of a give-up whose last error has none is
	// its classifier's; a class the error carries must still be kept.
	Classifies bool
	// RealTime: the driver runs on real time (a real broker's), so the
	// suite runs its cases outside a testing/synctest bubble, in parallel,
	// and gives each RealTimeLimit; skip the cases whose waits are long.
	RealTime bool
	// ErrorText: the last attempt's error comes back to the caller as text
	// (it crossed a wire or was stored with the work), so the suite looks
	// for its message instead of the error value and does not ask its
	// class.
	ErrorText bool
}

// Kept is what Run returns when a driver kept the work instead of giving
// it up (see Driver.Keeps).
type Kept struct {
	// Attempts is the number of attempts the kept work carries.
	Attempts int
}

// Error says the work was kept, with its attempts.
func (k *Kept) Error() string {
	return fmt.Sprintf("drivertest: work kept after %d attempts", k.Attempts)
}

// Do is the reference driver: retry.Do.
var Do = Driver{
	Name: "retry.Do",
	Run: func(ctx context.Context, p *retry.Policy, attempt func(context.Context) error) error {
		return retry.Do(ctx, p, attempt)
	},
}

var (
	errFlaky = retry.Retryable(errors.New("flaky"))
	errBad   = retry.Permanent(errors.New("bad input"))
	errOdd   = errors.New("unclassified")
	errBusy  = retry.After(errors.New("busy"), 500*time.Millisecond)
	errShed  = retry.After(errors.New("shed"), time.Hour)
	errSlow  = errors.New("slow") // wrapped with the attempt context's error
	errIntr  = errors.New("interrupted")
)

// step is the schedule of every case: a constant 10ms, so that drivers
// that round waits to milliseconds (the queue) wait exactly as Do does.
var step = backoff.Constant(10 * time.Millisecond)

// Case is one scripted unit of work.
type Case struct {
	Name string
	// Policy returns the case's policy; rec records the calls made to its
	// hooks, Budget and Limiter.
	Policy func(rec *Recorder) *retry.Policy
	// Attempt is the handler: n counts attempts from 1; cancel ends the
	// driver's context.
	Attempt func(ctx context.Context, n int, cancel context.CancelFunc) error
	// Want is the log Do produces; every driver must produce it.
	Want string
	// Reason, Attempts and Last are the outcome Do returns: nil when
	// Reason is NoReason; else a give-up for Reason after Attempts
	// attempts whose last error is Last (nil: none), of Last's class.
	Reason   retry.Reason
	Attempts int
	Last     error
	// KeptLog is the log of a driver that keeps the work on Reason
	// (Driver.Keeps), when it differs from Want: the driver's context
	// ended while no attempt ran, so no attempt was refused and no
	// give-up reported.
	KeptLog string
	// Refused: the give-up comes from Begin, before an attempt started.
	Refused bool
	// Interrupted: the last attempt failed with the end of the driver's
	// context and was not judged.
	Interrupted bool
	// Panics: the handler panics with Panic.
	Panics bool
}

// Panic is the value the panic case's handler panics with.
const Panic = "drivertest: handler bug"

// Cases returns the suite's cases.
func Cases() []Case {
	plain := func(rec *Recorder) *retry.Policy { return rec.Policy(&retry.Policy{MaxAttempts: 3, Schedule: step}) }
	failN := func(n int, err error) func(context.Context, int, context.CancelFunc) error {
		return func(_ context.Context, i int, _ context.CancelFunc) error {
			if i <= n {
				return err
			}
			return nil
		}
	}
	return []Case{
		{Name: "success", Policy: plain, Attempt: failN(0, nil),
			Want: "attempt 1|success 1"},
		{Name: "retryable twice", Policy: plain, Attempt: failN(2, errFlaky),
			Want: "attempt 1|retry 1 10ms|attempt 2|retry 2 10ms|attempt 3|success 3"},
		{Name: "exhausted", Policy: plain, Attempt: failN(9, errFlaky),
			Want:   "attempt 1|retry 1 10ms|attempt 2|retry 2 10ms|attempt 3|giveup 3 exhausted",
			Reason: retry.Exhausted, Attempts: 3, Last: errFlaky},
		{Name: "permanent", Policy: plain, Attempt: failN(9, errBad),
			Want: "attempt 1|giveup 1 permanent", Reason: retry.PermanentError, Attempts: 1, Last: errBad},
		{Name: "unknown", Policy: plain, Attempt: failN(9, errOdd),
			Want: "attempt 1|giveup 1 unknown", Reason: retry.UnknownError, Attempts: 1, Last: errOdd},
		{Name: "after below the cap", Policy: func(rec *Recorder) *retry.Policy {
			return rec.Policy(&retry.Policy{MaxAttempts: 2, Schedule: step, MaxAfter: time.Second})
		}, Attempt: failN(1, errBusy),
			Want: "attempt 1|retry 1 500ms|attempt 2|success 2"},
		{Name: "after above the cap", Policy: func(rec *Recorder) *retry.Policy {
			return rec.Policy(&retry.Policy{MaxAttempts: 2, Schedule: step, MaxAfter: time.Second})
		}, Attempt: failN(1, errShed),
			Want: "attempt 1|giveup 1 pushback", Reason: retry.Pushback, Attempts: 1, Last: errShed},
		{Name: "retry would start at the deadline", Policy: func(rec *Recorder) *retry.Policy {
			return rec.Policy(&retry.Policy{MaxAttempts: 5, Schedule: step, Timeout: 30 * time.Millisecond})
		}, Attempt: func(ctx context.Context, n int, _ context.CancelFunc) error {
			time.Sleep(5 * time.Millisecond) // 5+10, 15+5+10 = 30: the second retry is due at the deadline
			return errFlaky
		}, Want: "attempt 1|retry 1 10ms|attempt 2|giveup 2 deadline", Reason: retry.Deadline, Attempts: 2, Last: errFlaky},
		{Name: "attempt timeout", Policy: func(rec *Recorder) *retry.Policy {
			return rec.Policy(&retry.Policy{MaxAttempts: 2, Schedule: step, AttemptTimeout: 50 * time.Millisecond})
		}, Attempt: func(ctx context.Context, n int, _ context.CancelFunc) error {
			if n == 1 {
				<-ctx.Done()
				return fmt.Errorf("%w: %w", errSlow, ctx.Err()) // no class: the own timeout makes it retryable
			}
			return nil
		}, Want: "attempt 1|retry 1 10ms|attempt 2|success 2"},
		{Name: "attempt timeout, Done not watched", Policy: func(rec *Recorder) *retry.Policy {
			return rec.Policy(&retry.Policy{MaxAttempts: 2, Schedule: step, AttemptTimeout: 50 * time.Millisecond})
		}, Attempt: func(ctx context.Context, n int, _ context.CancelFunc) error {
			if n == 1 {
				// Past the bound, never asking the context: virtual time in
				// Check's bubble; on real time (a RealTime driver) a loaded
				// machine only sleeps longer.
				time.Sleep(60 * time.Millisecond)
				return errSlow // no class: the own timeout makes it retryable
			}
			return nil
		}, Want: "attempt 1|retry 1 10ms|attempt 2|success 2"},
		{Name: "attempt timeout exhausted", Policy: func(rec *Recorder) *retry.Policy {
			return rec.Policy(&retry.Policy{MaxAttempts: 2, Schedule: step, AttemptTimeout: 50 * time.Millisecond})
		}, Attempt: func(ctx context.Context, n int, _ context.CancelFunc) error {
			<-ctx.Done()
			return fmt.Errorf("%w: %w", errSlow, ctx.Err())
		}, Want: "attempt 1|retry 1 10ms|attempt 2|giveup 2 exhausted", Reason: retry.Exhausted, Attempts: 2, Last: errSlow},
		{Name: "budget refuses the retry", Policy: func(rec *Recorder) *retry.Policy {
			rec.retryOK = false
			return rec.Policy(&retry.Policy{MaxAttempts: 3, Schedule: step, Budget: rec})
		}, Attempt: failN(9, errFlaky),
			Want: "request|attempt 1|result false|retry? false|giveup 1 budget", Reason: retry.Budget, Attempts: 1, Last: errFlaky},
		{Name: "budget throttles the original", Policy: func(rec *Recorder) *retry.Policy {
			rec.requestOK = false
			return rec.Policy(&retry.Policy{MaxAttempts: 3, Schedule: step, Budget: rec})
		}, Attempt: failN(0, nil), Refused: true,
			Want: "request|giveup 0 budget", Reason: retry.Budget},
		{Name: "budget and limiter around a retry", Policy: func(rec *Recorder) *retry.Policy {
			rec.slots = 1
			return rec.Policy(&retry.Policy{MaxAttempts: 3, Schedule: step, Budget: rec, Limiter: rec})
		}, Attempt: failN(1, errFlaky),
			Want: "acquire|request|attempt 1|result false|release false|retry? true|retry 1 10ms|acquire|attempt 2|result true|release true|success 2"},
		{Name: "limiter refuses", Policy: func(rec *Recorder) *retry.Policy {
			rec.slots = 0
			return rec.Policy(&retry.Policy{MaxAttempts: 3, Schedule: step, Limiter: rec})
		}, Attempt: failN(0, nil), Refused: true,
			Want: "acquire refused|giveup 0 limited", Reason: retry.Limited},
		{Name: "canceled during an attempt", Policy: plain,
			Attempt: func(ctx context.Context, n int, cancel context.CancelFunc) error {
				cancel()
				return fmt.Errorf("%w: %w", errIntr, ctx.Err()) // the end's own error: not judged
			}, Want: "attempt 1|giveup 1 canceled", Reason: retry.Canceled, Attempts: 1, Last: errIntr, Interrupted: true},
		{Name: "own failure while canceled", Policy: plain,
			Attempt: func(ctx context.Context, n int, cancel context.CancelFunc) error {
				cancel()
				return errFlaky // the work's own failure: judged, then no attempt starts
			}, Want: "attempt 1|retry 1 10ms|giveup 1 canceled", Reason: retry.Canceled, Attempts: 1, Last: errFlaky,
			KeptLog: "attempt 1|retry 1 10ms"},
		{Name: "canceled during a wait", Policy: func(rec *Recorder) *retry.Policy {
			return rec.Policy(&retry.Policy{MaxAttempts: 3, Schedule: backoff.Constant(time.Hour)})
		}, Attempt: func(ctx context.Context, n int, cancel context.CancelFunc) error {
			time.AfterFunc(time.Minute, cancel)
			return errFlaky
		}, Want: "attempt 1|retry 1 1h0m0s|giveup 1 canceled", Reason: retry.Canceled, Attempts: 1, Last: errFlaky,
			KeptLog: "attempt 1|retry 1 1h0m0s"},
		{Name: "panic frees the slot", Policy: func(rec *Recorder) *retry.Policy {
			rec.slots = 1
			return rec.Policy(&retry.Policy{MaxAttempts: 1, Schedule: step, Limiter: rec})
		}, Attempt: func(context.Context, int, context.CancelFunc) error { panic(Panic) },
			Panics: true, Want: "acquire|attempt 1|release false"},
	}
}

// Recorder is a Budget and Limiter that logs the calls a driver makes,
// with the policy's hook calls, in one log.
type Recorder struct {
	mu        sync.Mutex
	log       []string
	slots     int
	inflight  int
	requestOK bool
	retryOK   bool
	done      chan struct{}
	ended     bool
}

func newRecorder() *Recorder {
	return &Recorder{slots: 1 << 20, requestOK: true, retryOK: true, done: make(chan struct{})}
}

func (r *Recorder) add(s string) {
	r.mu.Lock()
	r.log = append(r.log, s)
	r.mu.Unlock()
}

func (r *Recorder) end() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.ended {
		r.ended = true
		close(r.done)
	}
}

// Policy sets p's hooks to log to r and returns p.
func (r *Recorder) Policy(p *retry.Policy) *retry.Policy {
	p.Hooks = retry.Hooks{
		OnAttempt: func(e retry.Event) { r.add(fmt.Sprintf("attempt %d", e.Attempt)) },
		OnRetry:   func(e retry.Event) { r.add(fmt.Sprintf("retry %d %v", e.Attempt, e.Delay)) },
		OnSuccess: func(e retry.Event) { r.add(fmt.Sprintf("success %d", e.Attempt)); r.end() },
		OnGiveUp: func(e retry.Event) {
			r.add(fmt.Sprintf("giveup %d %v", e.Attempt, e.Reason))
			r.end()
		},
	}
	return p
}

// RefuseRetries makes the Recorder, as a Budget, refuse every retry (and
// hedge) from now on, for cases of a driver's own.
func (r *Recorder) RefuseRetries() {
	r.mu.Lock()
	r.retryOK = false
	r.mu.Unlock()
}

// Done is closed once a success or a give-up was reported.
func (r *Recorder) Done() <-chan struct{} { return r.done }

// TryAcquire implements limit.Limiter.
func (r *Recorder) TryAcquire() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inflight >= r.slots {
		r.log = append(r.log, "acquire refused")
		return false
	}
	r.inflight++
	r.log = append(r.log, "acquire")
	return true
}

// Release implements limit.Limiter.
func (r *Recorder) Release(ok bool) {
	r.mu.Lock()
	r.inflight--
	r.log = append(r.log, fmt.Sprintf("release %v", ok))
	r.mu.Unlock()
}

// Request implements budget.Budget.
func (r *Recorder) Request(time.Time) bool { r.add("request"); return r.requestOK }

// Retry implements budget.Budget.
func (r *Recorder) Retry(time.Time) bool {
	r.mu.Lock()
	ok := r.retryOK
	r.log = append(r.log, fmt.Sprintf("retry? %v", ok))
	r.mu.Unlock()
	return ok
}

// Result implements budget.Budget.
func (r *Recorder) Result(_ time.Time, ok bool) { r.add(fmt.Sprintf("result %v", ok)) }

// Log returns the calls so far, joined by "|".
func (r *Recorder) Log() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.log, "|")
}

// InFlight is the number of Limiter slots held.
func (r *Recorder) InFlight() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.inflight
}

// Run runs every case against d, each in a testing/synctest bubble of
// its own, and checks it against retry.Do's log and outcome.
func Run(t *testing.T, d Driver) {
	t.Helper()
	if !CheckSkips(t, d) {
		return
	}
	for _, c := range Cases() {
		t.Run(c.Name, func(t *testing.T) {
			if why, ok := d.Skip[c.Name]; ok {
				t.Skipf("%s: does not apply: %s", d.Name, why)
			}
			if d.RealTime {
				t.Parallel()
				Check(t, d, c)
				return
			}
			synctest.Test(t, func(t *testing.T) { Check(t, d, c) })
		})
	}
}

// CheckSkips reports on tb a skip of a case the suite does not have or
// one without a reason, and returns whether d's skip list is sound.
func CheckSkips(tb testing.TB, d Driver) bool {
	tb.Helper()
	ok := true
	for name, why := range d.Skip {
		if !slices.ContainsFunc(Cases(), func(c Case) bool { return c.Name == name }) {
			tb.Errorf("%s: skips %q, which is not a case of the suite", d.Name, name)
			ok = false
		}
		if strings.TrimSpace(why) == "" {
			tb.Errorf("%s: skips %q without saying why", d.Name, name)
			ok = false
		}
	}
	return ok
}

// limit is how much of the bubble's time a case may take before the
// driver counts as stuck.
const limit = 48 * time.Hour

// RealTimeLimit is how long a case of a RealTime driver may take before
// the driver counts as stuck. It bounds a hung test; it is no
// performance assert.
const RealTimeLimit = 60 * time.Second

type tbKey struct{}

// TB returns the testing.TB of the case whose context ctx is (the ctx
// Driver.Run gets), for a driver that builds a fixture per case (a
// broker's topology, cleaned up with the case); nil for another ctx.
func TB(ctx context.Context) testing.TB {
	tb, _ := ctx.Value(tbKey{}).(testing.TB)
	return tb
}

// Check runs case c against d in the caller's testing/synctest bubble (on
// real time for a RealTime driver) and
// reports on tb every way the driver differs from retry.Do: its log of
// hook, Budget and Limiter calls, its outcome, the Limiter slots it left
// held, and a driver that does not return.
func Check(tb testing.TB, d Driver, c Case) {
	tb.Helper()
	rec := newRecorder()
	p := c.Policy(rec)
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), tbKey{}, tb))
	defer cancel()
	var n atomic.Int64 // a hedging driver runs attempts side by side
	attempt := func(actx context.Context) error {
		return c.Attempt(actx, int(n.Add(1)), cancel)
	}
	keeps := c.Reason != retry.NoReason && slices.Contains(d.Keeps, c.Reason)
	var (
		err      error
		panicked any
		finished = make(chan struct{})
	)
	go func() {
		defer close(finished)
		defer func() { panicked = recover() }()
		err = d.Run(ctx, p, attempt)
	}()
	stuckAfter := limit
	if d.RealTime {
		stuckAfter = RealTimeLimit
	}
	stuck := time.NewTimer(stuckAfter)
	defer stuck.Stop()
	ended := rec.Done()
wait:
	for {
		select {
		case <-finished:
			break wait
		case <-ended:
			ended = nil
			if keeps {
				cancel() // the driver keeps the work: stop it, as a shutdown would
			}
		case <-stuck.C:
			tb.Errorf("%s: still running after %v; log so far %s", d.Name, stuckAfter, rec.Log())
			cancel()
			<-finished
			return
		}
	}
	want := c.Want
	switch {
	case keeps && c.KeptLog != "":
		want = c.KeptLog
	case c.Panics && d.RecoversPanics:
		want += "|giveup 1 unknown"
	}
	if d.HoldsDelivered {
		want = releaseAfterSuccess(want)
	}
	if got := rec.Log(); got != want {
		tb.Errorf("%s: calls\n got %s\nwant %s", d.Name, got, want)
	}
	if held := rec.InFlight(); held != 0 {
		tb.Errorf("%s: %d Limiter slots held after the work ended", d.Name, held)
	}
	switch {
	case c.Panics && !d.RecoversPanics:
		if panicked != Panic {
			tb.Errorf("%s: the handler's panic did not go on (recovered %v, returned %v)", d.Name, panicked, err)
		}
	case panicked != nil:
		tb.Errorf("%s: panicked: %v", d.Name, panicked)
	case c.Panics: // recovered into an error of no class, named by its text
		text := d
		text.ErrorText = true
		checkErr(tb, text, retry.UnknownError, 1, errors.New(Panic), err)
	case keeps:
		checkKept(tb, d, c, err)
	default:
		checkErr(tb, d, c.Reason, c.Attempts, c.Last, err)
	}
}

// checkKept checks the outcome of a case whose work the driver kept.
func checkKept(tb testing.TB, d Driver, c Case, err error) {
	tb.Helper()
	var k *Kept
	if !errors.As(err, &k) {
		tb.Errorf("%s: returned %v, want the work kept (a *drivertest.Kept) after the %v give-up", d.Name, err, c.Reason)
		return
	}
	want := c.Attempts
	if c.Refused && d.SpendsRefused {
		want++
	}
	if c.Interrupted && d.Uncounted {
		want--
	}
	if k.Attempts != want {
		tb.Errorf("%s: kept the work with %d attempts, want %d", d.Name, k.Attempts, want)
	}
}

// checkErr checks a driver's returned error against the outcome retry.Do
// returns: nil for a success; else a give-up for reason (errors.Is its
// sentinel) after attempts, wrapping last (or, for an error of no
// class, last itself) and of last's class.
func checkErr(tb testing.TB, d Driver, reason retry.Reason, attempts int, last, err error) {
	tb.Helper()
	if reason == retry.NoReason {
		if err != nil {
			tb.Errorf("%s: returned %v, want nil (a success)", d.Name, err)
		}
		return
	}
	if err == nil {
		tb.Errorf("%s: returned nil, want a %v give-up", d.Name, reason)
		return
	}
	var k *Kept
	if errors.As(err, &k) {
		tb.Errorf("%s: kept the work (%v), want a %v give-up: a driver that keeps work on %v says so in Keeps", d.Name, err, reason, reason)
		return
	}
	var e *retry.Error
	switch {
	case errors.As(err, &e):
		if e.Reason != reason {
			tb.Errorf("%s: returned a %v give-up (%v), want %v", d.Name, e.Reason, err, reason)
		}
		if reason != retry.UnknownError && e.Attempts != attempts {
			tb.Errorf("%s: returned a give-up after %d attempts (%v), want %d", d.Name, e.Attempts, err, attempts)
		}
	case reason != retry.UnknownError:
		tb.Errorf("%s: returned %v (%T), want a *retry.Error for reason %v", d.Name, err, err, reason)
	}
	if s := reason.Err(); s != nil && !errors.Is(err, s) {
		tb.Errorf("%s: returned %v, which is not errors.Is %v (reason %v)", d.Name, err, s, reason)
	}
	switch {
	case last == nil:
		if e != nil && e.Err != nil {
			tb.Errorf("%s: returned a give-up with a last error (%v), want none: no attempt failed", d.Name, e.Err)
		}
	case d.ErrorText:
		if !strings.Contains(err.Error(), last.Error()) {
			tb.Errorf("%s: returned %q, which does not name the last error %q", d.Name, err, last)
		}
	default:
		if !errors.Is(err, last) {
			tb.Errorf("%s: returned %v, which does not wrap the last error %v", d.Name, err, last)
		}
		wantClass, _ := retry.Classify(last)
		if got, _ := retry.Classify(err); got != wantClass && (wantClass != retry.ClassUnknown || !d.Classifies) {
			tb.Errorf("%s: returned an error of class %v (%v), want %v", d.Name, got, err, wantClass)
		}
	}
}

// releaseAfterSuccess moves a successful attempt's slot release after its
// OnSuccess.
func releaseAfterSuccess(log string) string {
	calls := strings.Split(log, "|")
	for i := 0; i+1 < len(calls); i++ {
		if calls[i] == "release true" && strings.HasPrefix(calls[i+1], "success ") {
			calls[i], calls[i+1] = calls[i+1], calls[i]
		}
	}
	return strings.Join(calls, "|")
}
