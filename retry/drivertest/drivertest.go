// Package drivertest is the conformance suite of stagger's retry drivers:
// one scripted set of cases — success, retryable failures, permanent and
// unknown errors, pushback below and above the cap, a retry that would
// start exactly at the deadline, an attempt timeout, budget and limiter
// refusals, cancellation during an attempt (with the context's error and
// with one of the work's own) and during a wait, a panicking handler — run
// against a driver, which must give the same outcome, the
// same hook calls and the same Budget and Limiter calls as retry.Do.
//
// A driver is adapted by a [Driver]; Run checks it. Every case runs inside
// a testing/synctest bubble, so a driver's waits, clocks and timers are
// virtual and a case takes no real time.
package drivertest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
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
	// a give-up, or ctx's end), calling attempt once per attempt with the
	// attempt's context. p.Timeout is the unit of work's deadline, from the
	// moment Run is called (a queue makes it the job's deadline). Run
	// returns when the policy's hooks have reported a success or a
	// give-up, or when ctx ended; the time it reads is the bubble's.
	Run func(ctx context.Context, p *retry.Policy, attempt func(ctx context.Context) error)
	// Durable drivers keep the work when the in-process loop would give up
	// after a refusal; the suite then checks only the calls up to the
	// give-up, which every driver reports through OnGiveUp.
	Durable bool
	// NoWaitCancel: the driver does not wait in process (a broker parks a
	// message, a queue schedules a row), so the "canceled during a wait"
	// case does not apply.
	NoWaitCancel bool
	// Simulated: the driver runs modelled attempts, with no context and
	// no user code (the simulator models timeouts itself), so the cases
	// that end a context, need an attempt timeout or panic do not apply.
	Simulated bool
	// RemoteHandler: the attempt's code runs in another process (a
	// server), whose panics are not the driver's, so the panic case does
	// not apply.
	RemoteHandler bool
	// HoldsDelivered: the driver hands a successful attempt's result to the
	// caller with its Limiter slot still held, released when the caller is
	// done with it (the HTTP transport's response body), so the slot's
	// release comes after OnSuccess.
	HoldsDelivered bool
	// RecoversPanics: the driver turns a handler's panic into an error
	// instead of letting it go on.
	RecoversPanics bool
}

// Do is the reference driver: retry.Do.
var Do = Driver{
	Name: "retry.Do",
	Run: func(ctx context.Context, p *retry.Policy, attempt func(context.Context) error) {
		_ = retry.Do(ctx, p, attempt)
	},
}

var (
	errFlaky = retry.Retryable(errors.New("flaky"))
	errBad   = retry.Permanent(errors.New("bad input"))
	errOdd   = errors.New("unclassified")
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
	// Want is the log Do produces, checked for Do itself; other drivers
	// must match Do's log.
	Want string
	// Refusal: the in-process loop gives up where a durable driver may
	// keep the work (a refusal by the budget or the limiter, pushback, a
	// context that ended after a judged failure), so a durable driver's
	// log is compared up to that point.
	Refusal bool
	// WaitCancel: the case cancels during a wait.
	WaitCancel bool
	// Panics: the handler panics.
	Panics bool
	// UsesContext: the case ends the driver's context or needs the
	// attempt's own timeout.
	UsesContext bool
}

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
			Want: "attempt 1|retry 1 10ms|attempt 2|retry 2 10ms|attempt 3|giveup 3 exhausted"},
		{Name: "permanent", Policy: plain, Attempt: failN(9, errBad),
			Want: "attempt 1|giveup 1 permanent"},
		{Name: "unknown", Policy: plain, Attempt: failN(9, errOdd),
			Want: "attempt 1|giveup 1 unknown"},
		{Name: "after below the cap", Policy: func(rec *Recorder) *retry.Policy {
			return rec.Policy(&retry.Policy{MaxAttempts: 2, Schedule: step, MaxAfter: time.Second})
		}, Attempt: failN(1, retry.After(errors.New("busy"), 500*time.Millisecond)),
			Want: "attempt 1|retry 1 500ms|attempt 2|success 2"},
		{Name: "after above the cap", Policy: func(rec *Recorder) *retry.Policy {
			return rec.Policy(&retry.Policy{MaxAttempts: 2, Schedule: step, MaxAfter: time.Second})
		}, Attempt: failN(1, retry.After(errors.New("busy"), time.Hour)), Refusal: true,
			Want: "attempt 1|giveup 1 pushback"},
		{Name: "retry would start at the deadline", Policy: func(rec *Recorder) *retry.Policy {
			return rec.Policy(&retry.Policy{MaxAttempts: 5, Schedule: step, Timeout: 30 * time.Millisecond})
		}, Attempt: func(ctx context.Context, n int, _ context.CancelFunc) error {
			time.Sleep(5 * time.Millisecond) // 5+10, 15+5+10 = 30: the second retry is due at the deadline
			return errFlaky
		}, Want: "attempt 1|retry 1 10ms|attempt 2|giveup 2 deadline"},
		{Name: "attempt timeout", Policy: func(rec *Recorder) *retry.Policy {
			return rec.Policy(&retry.Policy{MaxAttempts: 2, Schedule: step, AttemptTimeout: 50 * time.Millisecond})
		}, Attempt: func(ctx context.Context, n int, _ context.CancelFunc) error {
			if n == 1 {
				<-ctx.Done()
				return fmt.Errorf("slow: %w", ctx.Err()) // no class: the own timeout makes it retryable
			}
			return nil
		}, UsesContext: true, Want: "attempt 1|retry 1 10ms|attempt 2|success 2"},
		{Name: "budget refuses the retry", Policy: func(rec *Recorder) *retry.Policy {
			rec.retryOK = false
			return rec.Policy(&retry.Policy{MaxAttempts: 3, Schedule: step, Budget: rec})
		}, Attempt: failN(9, errFlaky), Refusal: true,
			Want: "request|attempt 1|result false|retry? false|giveup 1 budget"},
		{Name: "budget throttles the original", Policy: func(rec *Recorder) *retry.Policy {
			rec.requestOK = false
			return rec.Policy(&retry.Policy{MaxAttempts: 3, Schedule: step, Budget: rec})
		}, Attempt: failN(0, nil), Refusal: true,
			Want: "request|giveup 0 budget"},
		{Name: "budget and limiter around a retry", Policy: func(rec *Recorder) *retry.Policy {
			rec.slots = 1
			return rec.Policy(&retry.Policy{MaxAttempts: 3, Schedule: step, Budget: rec, Limiter: rec})
		}, Attempt: failN(1, errFlaky),
			Want: "acquire|request|attempt 1|result false|release false|retry? true|retry 1 10ms|acquire|attempt 2|result true|release true|success 2"},
		{Name: "limiter refuses", Policy: func(rec *Recorder) *retry.Policy {
			rec.slots = 0
			return rec.Policy(&retry.Policy{MaxAttempts: 3, Schedule: step, Limiter: rec})
		}, Attempt: failN(0, nil), Refusal: true,
			Want: "acquire refused|giveup 0 limited"},
		{Name: "canceled during an attempt", Policy: plain,
			Attempt: func(ctx context.Context, n int, cancel context.CancelFunc) error {
				cancel()
				return fmt.Errorf("interrupted: %w", ctx.Err()) // the end's own error: not judged
			}, UsesContext: true, Want: "attempt 1|giveup 1 canceled"},
		{Name: "own failure while canceled", Policy: plain,
			Attempt: func(ctx context.Context, n int, cancel context.CancelFunc) error {
				cancel()
				return errFlaky // the work's own failure: judged, then no attempt starts
			}, UsesContext: true, Refusal: true, Want: "attempt 1|retry 1 10ms|giveup 1 canceled"},
		{Name: "canceled during a wait", Policy: func(rec *Recorder) *retry.Policy {
			return rec.Policy(&retry.Policy{MaxAttempts: 3, Schedule: backoff.Constant(time.Hour)})
		}, Attempt: func(ctx context.Context, n int, cancel context.CancelFunc) error {
			time.AfterFunc(time.Minute, cancel)
			return errFlaky
		}, WaitCancel: true, UsesContext: true, Want: "attempt 1|retry 1 1h0m0s|giveup 1 canceled"},
		{Name: "panic frees the slot", Policy: func(rec *Recorder) *retry.Policy {
			rec.slots = 1
			return rec.Policy(&retry.Policy{MaxAttempts: 1, Schedule: step, Limiter: rec})
		}, Attempt: func(context.Context, int, context.CancelFunc) error { panic("handler bug") },
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
	r.add(fmt.Sprintf("retry? %v", r.retryOK))
	return r.retryOK
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

// Run runs every case against d and checks it against the reference log.
func Run(t *testing.T, d Driver) {
	for _, c := range Cases() {
		if c.WaitCancel && d.NoWaitCancel || (c.UsesContext || c.Panics) && d.Simulated || c.Panics && d.RemoteHandler {
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				got, inflight := runCase(t, d, c)
				want := c.Want
				if d.HoldsDelivered {
					want = releaseAfterSuccess(want)
				}
				if got != want {
					t.Errorf("%s: calls\n got %s\nwant %s", d.Name, got, want)
				}
				if inflight != 0 {
					t.Errorf("%s: %d Limiter slots held after the work ended", d.Name, inflight)
				}
			})
		})
	}
}

func runCase(t *testing.T, d Driver, c Case) (string, int) {
	rec := newRecorder()
	p := c.Policy(rec)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	n := 0
	attempt := func(actx context.Context) error {
		n++
		return c.Attempt(actx, n, cancel)
	}
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		defer func() {
			if v := recover(); v != nil {
				if !c.Panics {
					panic(v)
				}
				rec.end()
			}
		}()
		d.Run(ctx, p, attempt)
	}()
	select {
	case <-rec.Done():
	case <-finished:
	}
	if c.Refusal && d.Durable || c.Panics && d.RecoversPanics {
		// The durable driver keeps the work or reports the recovered panic
		// as an unknown error: compare up to the first end.
		cancel()
		<-finished
		log := rec.Log()
		if c.Panics && strings.HasPrefix(log, "acquire|attempt 1|") {
			log = c.Want // recovered into an error the driver then judges
		}
		return trimAfterEnd(log, c.Want), rec.InFlight()
	}
	<-finished
	return rec.Log(), rec.InFlight()
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

// trimAfterEnd compares a durable driver's log with want up to want's
// give-up: the driver may go on past it (it keeps the work) or stop just
// before it (it kept the work and nothing ended it). It returns want when
// log agrees so far.
func trimAfterEnd(log, want string) string {
	if strings.HasPrefix(log, want) {
		return want
	}
	if i := strings.LastIndex(want, "|giveup "); i >= 0 && log == want[:i] {
		return want
	}
	return log
}
