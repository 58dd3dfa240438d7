package retryhttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/budget"
	"github.com/staggerhq/stagger/limit"
	"github.com/staggerhq/stagger/retry"
)

// AfterMode says what a Transport does with a Retry-After longer than the
// policy's schedule would wait.
type AfterMode uint8

const (
	// AfterDeadline, the default, waits as long as the server asks when
	// the wait ends before the call's deadline (the context's deadline or
	// Policy.Timeout) and gives up at once with retry.ErrDeadline when it
	// lands past it — instead of sleeping toward a certain failure. A call
	// with no deadline is bounded by Policy.MaxAfter (default one minute):
	// a longer Retry-After gives up with retry.ErrPushback. It never waits
	// for hours unasked.
	AfterDeadline AfterMode = iota
	// AfterCap waits min(Retry-After, Policy.MaxAfter) and then retries.
	AfterCap
	// AfterAlways honours any Retry-After, however long; only the call's
	// deadline, if it has one, still applies. Ask for it knowingly.
	AfterAlways
)

// String returns "deadline", "cap" or "always".
func (m AfterMode) String() string {
	switch m {
	case AfterDeadline:
		return "deadline"
	case AfterCap:
		return "cap"
	case AfterAlways:
		return "always"
	}
	return "AfterMode(" + strconv.Itoa(int(m)) + ")"
}

// DefaultMaxDrain is how much of a failed response's body a Transport reads
// before closing it, so the connection can be reused.
const DefaultMaxDrain = 64 << 10

// DefaultMaxHosts bounds a Transport's per-host registry of budgets and
// limiters; hosts beyond it share one extra entry.
const DefaultMaxHosts = 1024

// ErrInvalid is wrapped by configuration errors; the message names the field.
var ErrInvalid = errors.New("retryhttp: invalid configuration")

// Transport is an http.RoundTripper that retries what is safe to retry
// under a stagger [retry.Policy], making every retry decision with
// [retry.Policy.Decide] — the same decision the in-process loop, the queue
// and the simulator use.
//
//   - Only idempotent requests (GET, HEAD, OPTIONS, TRACE, PUT, DELETE) and
//     requests carrying an Idempotency-Key are retried; a request body is
//     replayed with GetBody, and a request whose body cannot be replayed is
//     sent once.
//   - Each attempt's outcome is judged by Classify (per endpoint with
//     [Routes]); the response's Retry-After raises the wait, as the
//     RetryAfter mode allows.
//   - One deadline covers the whole call (the request context's and
//     Policy.Timeout); each attempt gets min(Policy.AttemptTimeout, time
//     left), and a retry that could not start before the deadline is not
//     made.
//   - A failed response is drained (up to MaxDrain bytes) and closed before
//     the wait, so its connection is reused; the concurrency slot is
//     released before the wait too.
//   - Every attempt carries AttemptHeader. A request whose context says
//     that an upstream owner already retries ([UpstreamAttempt], set by
//     [Guard]) is sent once, so stacked layers do not multiply attempts.
//
// When the policy gives up on a response (retryable status, attempts
// exhausted; a permanent or unclassified status) the last response is
// returned unread, as a plain http.Transport would; when it gives up on a
// transport error, RoundTrip returns a [retry.Error] (errors.Is works for
// the reason's sentinel and the last error). The policy's Hooks see every
// attempt, retry and give-up.
//
// Configure a Transport before its first use; it is safe for concurrent use.
type Transport struct {
	// Base sends each attempt; nil means http.DefaultTransport.
	Base http.RoundTripper
	// Policy holds the attempt count, schedule, timeouts, Retry-After cap,
	// hooks, clock and — unless NewBudget/NewLimiter are set — the budget
	// and limiter shared by all hosts. nil means the zero Policy.
	Policy *retry.Policy
	// Classify judges each attempt; nil means DefaultClassify.
	Classify Classifier
	// RetryAfter says what to do with long Retry-After values.
	RetryAfter AfterMode
	// NewBudget, if set, makes the retry budget of each host (req.URL.Host)
	// on its first request; it replaces Policy.Budget. nil results mean no
	// budget for that host.
	NewBudget func(host string) budget.Budget
	// NewLimiter, if set, makes the concurrency limiter (bulkhead) of each
	// host; it replaces Policy.Limiter.
	NewLimiter func(host string) limit.Limiter
	// MaxHosts bounds the per-host registry; 0 means DefaultMaxHosts.
	MaxHosts int
	// NestedRetries lets this transport retry requests whose context says
	// an upstream owner already retries. Off by default: one owner.
	NestedRetries bool
	// MaxDrain is how many bytes of a failed response are read before it
	// is closed; 0 means DefaultMaxDrain, negative means none.
	MaxDrain int64
	// Logger, if set, records retries (Debug) and give-ups (Warn; Info when
	// the caller canceled; Debug for permanent and unclassified answers)
	// with the method, host and path.
	Logger *slog.Logger

	once    sync.Once
	initErr error
	single  *hostState
	base    retry.Policy
	mu      sync.RWMutex
	hosts   map[string]*hostState
	other   *hostState
}

// New returns a Transport that sends attempts with base (nil:
// http.DefaultTransport) under policy p (nil: the zero Policy):
//
//	client := &http.Client{Transport: retryhttp.New(nil, policy)}
func New(base http.RoundTripper, p *retry.Policy) *Transport {
	return &Transport{Base: base, Policy: p}
}

type hostState struct {
	policy retry.Policy // Transport.Policy with the host's budget and limiter
}

func (t *Transport) init() error {
	t.once.Do(func() {
		if t.Policy != nil {
			if err := t.Policy.Validate(); err != nil {
				t.initErr = err
				return
			}
			t.base = *t.Policy
		}
		switch {
		case t.RetryAfter > AfterAlways:
			t.initErr = fmt.Errorf("%w: Transport.RetryAfter must be AfterDeadline, AfterCap or AfterAlways, got %v", ErrInvalid, t.RetryAfter)
			return
		case t.MaxHosts < 0:
			t.initErr = fmt.Errorf("%w: Transport.MaxHosts must be >= 0 (0 means %d), got %d", ErrInvalid, DefaultMaxHosts, t.MaxHosts)
			return
		}
		if t.NewBudget == nil && t.NewLimiter == nil {
			t.single = &hostState{policy: t.base}
		} else {
			t.hosts = make(map[string]*hostState)
		}
	})
	return t.initErr
}

// state returns the registry entry of host.
func (t *Transport) state(host string) *hostState {
	if t.single != nil {
		return t.single
	}
	t.mu.RLock()
	s := t.hosts[host]
	t.mu.RUnlock()
	if s != nil {
		return s
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if s = t.hosts[host]; s != nil {
		return s
	}
	maxHosts := t.MaxHosts
	if maxHosts == 0 {
		maxHosts = DefaultMaxHosts
	}
	if len(t.hosts) >= maxHosts {
		if t.other == nil {
			t.other = t.newState("")
		}
		return t.other
	}
	s = t.newState(host)
	t.hosts[host] = s
	return s
}

func (t *Transport) newState(host string) *hostState {
	s := &hostState{policy: t.base}
	if t.NewBudget != nil {
		s.policy.Budget = nil
		if b := t.NewBudget(host); b != nil {
			s.policy.Budget = b
		}
	}
	if t.NewLimiter != nil {
		s.policy.Limiter = nil
		if l := t.NewLimiter(host); l != nil {
			s.policy.Limiter = l
		}
	}
	return s
}

// Budget returns the budget the Transport uses for host (nil if none).
func (t *Transport) Budget(host string) budget.Budget {
	if t.init() != nil {
		return nil
	}
	return t.state(host).policy.Budget
}

// Limiter returns the limiter the Transport uses for host (nil if none).
func (t *Transport) Limiter(host string) limit.Limiter {
	if t.init() != nil {
		return nil
	}
	return t.state(host).policy.Limiter
}

// CloseIdleConnections closes the idle connections of Base, if it can.
func (t *Transport) CloseIdleConnections() {
	type closer interface{ CloseIdleConnections() }
	if c, ok := t.base_().(closer); ok {
		c.CloseIdleConnections()
	}
}

func (t *Transport) base_() http.RoundTripper {
	if t.Base == nil {
		return http.DefaultTransport
	}
	return t.Base
}

// Replayable reports whether req may be sent more than once: its method is
// idempotent or it carries an Idempotency-Key, and its body (if any) can be
// produced again with GetBody.
func Replayable(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace,
		http.MethodPut, http.MethodDelete:
	default:
		if len(req.Header[IdempotencyKeyHeader]) == 0 {
			return false
		}
	}
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

var attemptValues = func() (v [TrackedAttempts + 1][]string) {
	for i := 1; i < len(v); i++ {
		v[i] = []string{strconv.Itoa(i)}
	}
	return v
}()

func attemptValue(n int) []string {
	if n > 0 && n < len(attemptValues) {
		return attemptValues[n]
	}
	return []string{strconv.Itoa(n)}
}

// RoundTrip sends req, retrying as the policy allows. See [Transport].
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := t.init(); err != nil {
		closeRequestBody(req)
		return nil, err
	}
	if req.URL == nil {
		closeRequestBody(req)
		return nil, errors.New("retryhttp: request has no URL")
	}
	st := t.state(req.URL.Host)
	c := call{t: t, req: req, ctx: req.Context(), p: st.policy}
	return c.run()
}

// call is the state of one RoundTrip.
type call struct {
	t        *Transport
	req      *http.Request
	ctx      context.Context
	p        retry.Policy // per-call copy: MaxAttempts / MaxAfter adjusted
	upstream int
	deadline time.Time
	waiter   retry.Waiter
}

func (c *call) now() time.Time {
	if c.p.Clock != nil {
		return c.p.Clock.Now()
	}
	return time.Now()
}

// roundTrip sends one attempt through Base. If Base panics, the attempt's
// context and its Limiter slot (as an overload sign) are released before
// the panic goes on: a panic recovered further up (net/http recovers a
// handler's) must not hold a bulkhead slot for good.
func (c *call) roundTrip(req *http.Request, cancel context.CancelFunc) (*http.Response, error) {
	returned := false
	defer func() {
		if returned {
			return
		}
		if cancel != nil {
			cancel()
		}
		c.p.Release(false)
	}()
	resp, err := c.t.base_().RoundTrip(req)
	returned = true
	return resp, err
}

func (c *call) run() (*http.Response, error) {
	p := &c.p
	if n, ok := UpstreamAttempt(c.ctx); ok && !c.t.NestedRetries {
		c.upstream = n
		p.MaxAttempts = 1
	}
	if !Replayable(c.req) {
		p.MaxAttempts = 1
	}
	if d, ok := c.ctx.Deadline(); ok {
		c.deadline = d
	}
	var now time.Time
	if p.Timeout > 0 || p.Budget != nil || p.AttemptTimeout > 0 {
		now = c.now()
		if p.Timeout > 0 {
			if dl := now.Add(p.Timeout); c.deadline.IsZero() || dl.Before(c.deadline) {
				c.deadline = dl
			}
		}
	}
	switch c.t.RetryAfter {
	case AfterDeadline:
		if !c.deadline.IsZero() {
			p.MaxAfter, p.ClampAfter = backoff.MaxDelay, false
		}
	case AfterCap:
		p.ClampAfter = true
	case AfterAlways:
		p.MaxAfter, p.ClampAfter = backoff.MaxDelay, false
	}
	defer c.waiter.Stop()

	var (
		prev time.Duration
		last error // the last attempt's classified error
	)
	for attempt := 1; ; attempt++ {
		if err := c.ctx.Err(); err != nil {
			if attempt == 1 {
				closeRequestBody(c.req)
			}
			return c.giveUp(ctxReason(err), attempt-1, last, err)
		}
		if r := p.Begin(attempt, now); r != retry.NoReason {
			if attempt == 1 {
				closeRequestBody(c.req)
			}
			return c.giveUp(r, attempt-1, last, nil)
		}
		if h := p.Hooks.OnAttempt; h != nil {
			h(retry.Event{Attempt: attempt})
		}

		// The attempt's own context: min(AttemptTimeout, time left).
		actx, cancel := c.ctx, context.CancelFunc(nil)
		if p.AttemptTimeout > 0 || p.Timeout > 0 {
			if attempt > 1 || now.IsZero() {
				now = c.now()
			}
			d := p.AttemptTimeout
			if !c.deadline.IsZero() {
				if left := c.deadline.Sub(now); d == 0 || left < d {
					d = left
				}
			}
			if d <= 0 {
				p.Release(true) // nothing was sent
				if attempt == 1 {
					closeRequestBody(c.req)
				}
				return c.giveUp(retry.Deadline, attempt-1, last, nil)
			}
			actx, cancel = context.WithTimeout(c.ctx, d)
		}

		areq, err := c.attemptRequest(actx, attempt)
		if err != nil { // GetBody failed: nothing was sent
			if cancel != nil {
				cancel()
			}
			p.Release(true) // nothing was sent
			return c.giveUp(retry.UnknownError, attempt-1, err, nil)
		}
		resp, err := c.roundTrip(areq, cancel)
		if (resp == nil) == (err == nil) { // a broken Base
			if resp != nil {
				resp.Body.Close()
				err = fmt.Errorf("retryhttp: Base.RoundTrip returned both a response and an error: %w", err)
			} else {
				err = errors.New("retryhttp: Base.RoundTrip returned neither a response nor an error")
			}
			resp = nil
		}

		classify := c.t.Classify
		if classify == nil {
			classify = DefaultClassify
		}
		cerr := classify(areq, resp, err)
		if cerr != nil {
			class, _ := retry.Classify(cerr)
			if class == retry.ClassUnknown && err != nil && cancel != nil &&
				actx.Err() != nil && c.ctx.Err() == nil &&
				(p.Classify == nil || p.Classify(cerr) == retry.ClassUnknown) {
				cerr = retry.Retryable(cerr) // the attempt's own timeout fired
				class = retry.ClassRetryable
			}
			if resp != nil {
				cerr = c.markResponse(cerr, class, resp)
			}
		}
		if p.NeedsNow() || (cerr != nil && !c.deadline.IsZero()) {
			now = c.now()
		}

		// The Budget learns the outcome now, before Decide, as in retry.Do;
		// the Limiter slot is released after the decision (a delivered
		// response holds it until its body is closed).
		served := p.Result(cerr, now)
		if cerr == nil {
			if h := p.Hooks.OnSuccess; h != nil {
				h(retry.Event{Attempt: attempt})
			}
			return c.deliver(resp, cancel, served), nil
		}
		if ctxErr := c.ctx.Err(); ctxErr != nil {
			return c.finish(ctxReason(ctxErr), attempt, resp, cancel, cerr, ctxErr, served)
		}
		dec := p.Decide(attempt, cerr, now, c.deadline, prev)
		if !dec.Retry {
			return c.finish(dec.Reason, attempt, resp, cancel, cerr, nil, served)
		}

		// Retry: free the connection and the slot before the wait.
		if resp != nil {
			drain(resp.Body, c.t.MaxDrain)
		}
		if cancel != nil {
			cancel()
		}
		p.Release(served)
		if h := p.Hooks.OnRetry; h != nil {
			h(retry.Event{Attempt: attempt, Delay: dec.Delay, Err: cerr})
		}
		if l := c.t.Logger; l != nil {
			l.LogAttrs(c.ctx, slog.LevelDebug, "http retry",
				slog.String("method", c.req.Method), slog.String("host", c.req.URL.Host),
				slog.String("path", c.req.URL.Path), slog.Int("attempt", attempt),
				slog.Duration("delay", dec.Delay), slog.String("error", cerr.Error()))
		}
		last, prev = cerr, dec.Delay
		if dec.Delay > 0 {
			if err := c.waiter.Wait(c.ctx, c.p.Clock, dec.Delay); err != nil {
				return c.giveUp(ctxReason(err), attempt, last, err)
			}
		}
	}
}

// markResponse adds what the response says about retrying to cerr: a
// Stagger-No-Retry header makes it permanent, a Retry-After on a retryable
// answer becomes its minimum wait.
func (c *call) markResponse(cerr error, class retry.Class, resp *http.Response) error {
	noRetry := resp.Header.Get(NoRetryHeader) == "1"
	var after time.Duration
	hasAfter := false
	if class == retry.ClassRetryable && !noRetry {
		if v := resp.Header.Get("Retry-After"); v != "" {
			after, hasAfter = ParseRetryAfter(v, c.now())
		}
	}
	if se, ok := cerr.(*StatusError); ok {
		se.NoRetry = noRetry
		if noRetry {
			se.Class = retry.ClassPermanent
		}
		if hasAfter {
			se.After = after
		}
		return cerr
	}
	switch {
	case noRetry:
		return retry.Permanent(cerr)
	case hasAfter:
		return retry.After(cerr, after)
	}
	return cerr
}

// attemptRequest is req for attempt n: its own context, the attempt header
// and a fresh body.
func (c *call) attemptRequest(ctx context.Context, n int) (*http.Request, error) {
	r := c.req.WithContext(ctx)
	h := make(http.Header, len(c.req.Header)+1)
	for k, v := range c.req.Header {
		h[k] = v
	}
	if c.upstream > 0 {
		h[AttemptHeader] = attemptValue(c.upstream)
	} else {
		h[AttemptHeader] = attemptValue(n)
	}
	r.Header = h
	if n > 1 && c.req.Body != nil && c.req.Body != http.NoBody {
		body, err := c.req.GetBody()
		if err != nil {
			return nil, fmt.Errorf("retryhttp: GetBody: %w", err)
		}
		r.Body = body
	}
	return r, nil
}

// finish ends the call after attempt failed and will not be retried: a
// response goes back to the caller (its slot released when the body is
// closed), an error becomes the give-up error.
func (c *call) finish(r retry.Reason, attempts int, resp *http.Response, cancel context.CancelFunc, cerr, ctxErr error, served bool) (*http.Response, error) {
	c.report(r, attempts, cerr)
	if resp != nil {
		return c.deliver(resp, cancel, served), nil
	}
	if cancel != nil {
		cancel()
	}
	c.p.Release(served)
	return nil, giveUpErr(r, attempts, cerr, ctxErr)
}

// giveUp ends the call when no attempt is in flight.
func (c *call) giveUp(r retry.Reason, attempts int, last, ctxErr error) (*http.Response, error) {
	c.report(r, attempts, last)
	return nil, giveUpErr(r, attempts, last, ctxErr)
}

func giveUpErr(r retry.Reason, attempts int, last, ctxErr error) error {
	err := retry.GiveUp(r, attempts, last)
	if ctxErr != nil && !errors.Is(err, ctxErr) {
		err = fmt.Errorf("%w (%w)", err, ctxErr)
	}
	return err
}

func (c *call) report(r retry.Reason, attempts int, last error) {
	if h := c.p.Hooks.OnGiveUp; h != nil {
		h(retry.Event{Attempt: attempts, Err: last, Reason: r})
	}
	l := c.t.Logger
	if l == nil {
		return
	}
	level := slog.LevelWarn
	switch r {
	case retry.Canceled:
		level = slog.LevelInfo
	case retry.PermanentError, retry.UnknownError:
		level = slog.LevelDebug
	}
	attrs := []slog.Attr{
		slog.String("method", c.req.Method), slog.String("host", c.req.URL.Host),
		slog.String("path", c.req.URL.Path), slog.Int("attempts", attempts),
		slog.String("reason", r.String()),
	}
	if last != nil {
		attrs = append(attrs, slog.String("error", last.Error()))
	}
	l.LogAttrs(c.ctx, level, "http gave up", attrs...)
}

// deliver hands resp, the outcome of an attempt (served as Policy.Result
// judged it), to the caller. The attempt's Limiter slot is held until the
// body is closed or read to the end, and released then (Policy.Release).
// Closing the body also cancels the attempt's context.
func (c *call) deliver(resp *http.Response, cancel context.CancelFunc, served bool) *http.Response {
	if c.p.Limiter == nil && cancel == nil {
		return resp
	}
	rb := &releaseBody{rc: resp.Body, cancel: cancel, lim: c.p.Limiter, served: served}
	if rw, isRW := resp.Body.(io.ReadWriteCloser); isRW {
		resp.Body = &releaseRWBody{releaseBody: rb, w: rw}
	} else {
		resp.Body = rb
	}
	return resp
}

type releaseBody struct {
	rc     io.ReadCloser
	cancel context.CancelFunc
	lim    limit.Limiter // the attempt's slot is released on it; nil: none
	served bool          // the attempt's outcome, as Policy.Result judged it
	done   atomic.Bool
}

func (b *releaseBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.release()
	}
	return n, err
}

func (b *releaseBody) Close() error {
	err := b.rc.Close()
	b.release()
	return err
}

func (b *releaseBody) release() {
	if !b.done.CompareAndSwap(false, true) {
		return
	}
	if b.cancel != nil {
		b.cancel()
	}
	if b.lim != nil {
		b.lim.Release(b.served)
	}
}

// releaseRWBody keeps a 101 Switching Protocols body writable.
type releaseRWBody struct {
	*releaseBody
	w io.Writer
}

func (b *releaseRWBody) Write(p []byte) (int, error) { return b.w.Write(p) }

func drain(body io.ReadCloser, maxDrain int64) {
	if maxDrain == 0 {
		maxDrain = DefaultMaxDrain
	}
	if maxDrain > 0 {
		_, _ = io.CopyN(io.Discard, body, maxDrain)
	}
	_ = body.Close()
}

func closeRequestBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

func ctxReason(err error) retry.Reason {
	if errors.Is(err, context.DeadlineExceeded) {
		return retry.Deadline
	}
	return retry.Canceled
}
