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
	"github.com/staggerhq/stagger/internal/wait"
	"github.com/staggerhq/stagger/limit"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retry/retrydriver"
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
// under a stagger [retry.Policy]. Every attempt runs the shared
// [retrydriver.Step] — the per-attempt rules the in-process loop, the queue, the
// broker processor and the simulator run — so deadlines, attempt bounds,
// budgets, limiters and hooks behave as in [retry.Do].
//
//   - Only idempotent requests (GET, HEAD, OPTIONS, TRACE, PUT, DELETE) and
//     requests carrying an Idempotency-Key are retried; a request body is
//     replayed with GetBody, and a request whose body cannot be replayed is
//     sent once.
//   - Each attempt's outcome is judged once: by Classify (per endpoint with
//     [Routes]), then by Policy.Classify if that left it without a class.
//     A retryable response's Retry-After raises the wait, as the
//     RetryAfter mode allows.
//   - One deadline covers the whole call (the request context's and
//     Policy.Timeout); each attempt gets min(Policy.AttemptTimeout, time
//     left), and a retry that could not start before the deadline is not
//     made.
//   - A failed response is drained (up to MaxDrain bytes) and closed before
//     the wait, so its connection is reused; the concurrency slot is
//     released before the wait too.
//   - What reaches the wire is counted: when net/http's Transport re-sends
//     a request by itself (a reused connection closed before answering),
//     the re-send is an attempt of its own — it carries its own
//     AttemptHeader and needs an attempt left and the Budget's retry, or
//     it is stopped before anything is written.
//   - Every attempt carries the call's ledger: AttemptHeader,
//     MaxAttemptsHeader, RequestIDHeader (the same on every attempt) and,
//     with a deadline, TimeoutHeader. A call inside work that has an
//     attempt budget counts on from that work's attempts (ledger.go). A request whose context says that an upstream owner
//     already retries ([UpstreamAttempt], set by [Guard]) is sent once, so
//     stacked layers do not multiply attempts.
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
	// an upstream owner already retries, with a budget of its own (the
	// upstream ledger's attempts are not counted on). Off by default: one
	// owner.
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

// hostState is a host's entry in the registry: the policies its calls'
// Steps run.
type hostState struct {
	// step[1] is for calls with a deadline, step[0] for the rest. Both are
	// Transport.Policy with the host's budget and limiter, and MaxAfter and
	// ClampAfter as the RetryAfter mode says.
	step [2]retry.Policy
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
			t.single = t.newState("")
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
	p := t.base
	if t.NewBudget != nil {
		p.Budget = nil
		if b := t.NewBudget(host); b != nil {
			p.Budget = b
		}
	}
	if t.NewLimiter != nil {
		p.Limiter = nil
		if l := t.NewLimiter(host); l != nil {
			p.Limiter = l
		}
	}
	s := &hostState{step: [2]retry.Policy{p, p}}
	switch t.RetryAfter {
	case AfterDeadline:
		// A wait that ends before the deadline is honoured; Decide gives
		// up on one that does not.
		s.step[1].MaxAfter, s.step[1].ClampAfter = backoff.MaxDelay, false
	case AfterCap:
		s.step[0].ClampAfter, s.step[1].ClampAfter = true, true
	case AfterAlways:
		for i := range s.step {
			s.step[i].MaxAfter, s.step[i].ClampAfter = backoff.MaxDelay, false
		}
	}
	return s
}

// Budget returns the budget the Transport uses for host (nil if none).
func (t *Transport) Budget(host string) budget.Budget {
	if t.init() != nil {
		return nil
	}
	return t.state(host).step[0].Budget
}

// Limiter returns the limiter the Transport uses for host (nil if none).
func (t *Transport) Limiter(host string) limit.Limiter {
	if t.init() != nil {
		return nil
	}
	return t.state(host).step[0].Limiter
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
	c := &call{t: t, req: req, ctx: req.Context()}
	c.start(t.state(req.URL.Host))
	if err := c.step.Delivery.Exhausted(); err != nil { // no attempt left (ledger.go)
		closeRequestBody(req)
		return nil, err
	}
	return c.run()
}

// call is the state of one RoundTrip: the Step that runs its attempts, and
// the attempt in flight.
type call struct {
	t        *Transport
	req      *http.Request
	ctx      context.Context
	step     retrydriver.Step
	upstream int // the upstream owner's attempt number, 0 when none
	waiter   wait.Waiter
	bounded  bool         // the Step gave the attempt its own context
	body     releaseBody  // a delivered response's body, when it holds something
	id       [1]string    // RequestIDHeader's value when the request carries none
	tmo      [1]string    // the first attempt's TimeoutHeader value
	started  time.Time    // the attempt's start (Begin's now)
	first    http.Request // the first attempt's request
	budget   []string     // MaxAttemptsHeader's value (ledger.go)

	// What reaches the wire, for a request net/http re-sends by itself
	// (see wire.go); wire is false for the rest.
	wire    bool
	areq    *http.Request           // the attempt's request
	cancel  context.CancelCauseFunc // cancels the attempt's context
	hooks   *hooks                  // the attempt's trace
	pooled  bool                    // hooks came from the pool, and wctx carries them
	wctx    wireCtx                 // the first attempt's context with pooled hooks
	wcur    *wireCtx                // the attempt's context with pooled hooks (&wctx first), if any
	tries   int                     // GetConn calls in the attempt
	refused bool                    // a re-send was refused: every later try fails
}

// start sets up the Step: the host's policy for the call's RetryAfter
// case, and the ledger the call starts from.
func (c *call) start(st *hostState) {
	d := &c.step.Delivery
	prev, _ := retry.DeliveryFrom(c.ctx)
	d.Deadline = prev.Deadline // the deadline carried on only moves earlier
	if v := c.req.Header[RequestIDHeader]; len(v) > 0 && v[0] != "" {
		d.ID = v[0]
	} else {
		d.ID = prev.ID // the work this call is part of, if a driver runs it
		c.id[0] = d.ID // "": made with the first attempt's header
	}
	if n, ok := UpstreamAttempt(c.ctx); ok && !c.t.NestedRetries {
		c.upstream = n
		d.MaxAttempts = 1 // the upstream owner retries
	}
	if !Replayable(c.req) {
		d.MaxAttempts = 1
	}
	d.Source = "http"
	c.wire = resent(c.req)
	p := &st.step[0]
	if _, ok := c.ctx.Deadline(); ok || p.Timeout > 0 || !d.Deadline.IsZero() {
		p = &st.step[1]
	}
	c.step.Policy = p
	c.ledger(prev)
}

func (c *call) now() time.Time {
	if clk := c.step.Policy.Clock; clk != nil {
		return clk.Now()
	}
	return time.Now()
}

// roundTrip sends one attempt through Base. When Base returns (or
// panics), the attempt's context stops carrying pooled hooks (see
// wireCtx.detach). If Base panics, the attempt's context and its Limiter
// slot (as an overload sign) are released before the panic goes on: a
// panic recovered further up (net/http recovers a handler's) must not hold
// a bulkhead slot for good.
func (c *call) roundTrip(req *http.Request) (*http.Response, error) {
	returned := false
	defer func() {
		if c.wcur != nil {
			c.wcur.detach()
		}
		if !returned {
			c.step.Abort()
			c.endWire()
		}
	}()
	resp, err := c.t.base_().RoundTrip(req)
	returned = true
	return resp, err
}

func (c *call) run() (*http.Response, error) {
	s := &c.step
	defer c.done()
	for {
		var now time.Time
		if s.NeedsNow(c.ctx) {
			now = c.now()
		}
		c.started = now
		if r := s.Begin(c.ctx, now); r != retry.NoReason {
			if s.Delivery.Attempt == 0 {
				closeRequestBody(c.req)
			}
			c.logGiveUp(r, nil)
			return nil, s.Err()
		}
		actx := s.Context()
		c.bounded = actx != c.ctx
		if c.wire {
			actx = c.watch(actx)
		}
		areq, err := c.attemptRequest(actx)
		c.areq = areq
		var resp *http.Response
		if err == nil {
			resp, err = c.roundTrip(areq)
			if err != nil && c.refused {
				err = errResendRefused
			}
		} // else GetBody failed: the attempt ends before anything was sent
		if err == nil && resp == nil {
			err = errors.New("retryhttp: Base.RoundTrip returned neither a response nor an error")
		} else if err != nil && resp != nil {
			resp.Body.Close()
			resp, err = nil, fmt.Errorf("retryhttp: Base.RoundTrip returned both a response and an error: %w", err)
		}
		cerr := c.judge(areq, resp, err)
		if resp != nil {
			s.Hold() // a delivered response keeps the slot until its body is closed
		}
		if s.NeedsNow(c.ctx) {
			now = c.now()
		}
		dec := s.End(cerr, now)
		if cerr == nil {
			return c.deliver(resp), nil
		}
		if !dec.Retry {
			c.logGiveUp(dec.Reason, cerr)
			if resp != nil {
				return c.deliver(resp), nil
			}
			c.endWire()
			return nil, s.Err()
		}
		// Retry: free the connection and the slot before the wait.
		if resp != nil {
			drain(resp.Body, c.t.MaxDrain)
			s.Release()
		}
		c.endWire()
		if l := c.t.Logger; l != nil {
			l.LogAttrs(c.ctx, slog.LevelDebug, "http retry",
				slog.String("method", c.req.Method), slog.String("host", c.req.URL.Host),
				slog.String("path", c.req.URL.Path), slog.Int("attempt", s.Delivery.Attempt),
				slog.Duration("delay", dec.Delay), slog.String("error", cerr.Error()))
		}
		if dec.Delay > 0 {
			// A wait the context ends is a give-up: the next Begin refuses
			// the done context.
			_ = c.waiter.Wait(c.ctx, s.Policy.Clock, dec.Delay)
		}
	}
}

// done ends run: the wait's timer and the pooled hooks go back.
func (c *call) done() {
	c.waiter.Stop()
	c.putHooks()
}

// judge is the attempt's outcome in the core vocabulary: nil for a
// response handed to the caller, or the classified failure. Classify (the
// Transport's) runs once and makes the outcome an error; the Step then
// classes it by the one order every driver keeps (Step.Classify: the
// error's own class, then Policy.Classify, at most once), and a retryable
// response's Retry-After becomes its wait.
func (c *call) judge(areq *http.Request, resp *http.Response, err error) error {
	if areq == nil { // GetBody failed
		return err
	}
	classify := c.t.Classify
	if classify == nil {
		classify = DefaultClassify
	}
	cerr := classify(areq, resp, err)
	if cerr == nil {
		return nil
	}
	own, _ := retry.Classify(cerr)
	class, _ := c.step.Classify(cerr)
	if own == retry.ClassUnknown {
		cerr = mark(cerr, class)
	}
	if resp != nil {
		cerr = c.markResponse(cerr, class, resp)
	}
	return cerr
}

// mark gives an error of no class of its own the class Policy.Classify
// found, so the caller of a give-up sees it too.
func mark(cerr error, class retry.Class) error {
	if se, ok := cerr.(*StatusError); ok {
		se.Class = class
		return se
	}
	switch class {
	case retry.ClassRetryable:
		return retry.Retryable(cerr)
	case retry.ClassPermanent:
		return retry.Permanent(cerr)
	}
	return cerr
}

// markResponse adds what the response says about retrying to cerr: a
// Stagger-No-Retry header makes it permanent, a Retry-After on a retryable
// answer becomes its minimum wait (parsed only then).
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

// attemptRequest is req for the attempt Begin just counted: its own
// context, the ledger headers and a fresh body.
func (c *call) attemptRequest(ctx context.Context) (*http.Request, error) {
	n := c.step.Delivery.Attempt
	var r *http.Request
	if n == 1 {
		// The first attempt's copy lives in the call (WithContext inlines,
		// so its own copy stays on the stack). A later attempt gets a copy
		// of its own: net/http may still read the one before it.
		c.first = *c.req.WithContext(ctx)
		r = &c.first
	} else {
		r = c.req.WithContext(ctx)
	}
	h := make(http.Header, len(c.req.Header)+4)
	for k, v := range c.req.Header {
		h[k] = v
	}
	c.setBudget(h)
	if c.upstream > 0 {
		h[AttemptHeader] = attemptValue(c.upstream)
	} else {
		h[AttemptHeader] = attemptValue(n)
	}
	if n == 1 {
		c.firstLedger(h)
	} else {
		if c.id[0] != "" {
			h[RequestIDHeader] = c.id[:]
		}
		c.setTimeout(h, c.started)
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

// setTimeout sets h's TimeoutHeader to the time left at now before the
// call's deadline, in whole milliseconds rounded down (none without a
// deadline). A caller's own value is replaced: the call's deadline
// already folds in the context's.
func (c *call) setTimeout(h http.Header, now time.Time) {
	dl := c.step.Delivery.Deadline
	if dl.IsZero() {
		return
	}
	h[TimeoutHeader] = []string{strconv.FormatInt(timeLeft(dl, now), 10)}
}

// firstLedger sets the first attempt's RequestIDHeader and TimeoutHeader
// in h. A request ID the call makes (retrydriver.NewID: 16 random hex digits,
// unique, not secret) is cut from a block of them, and the header values
// live in the call: the first attempt's ledger costs no allocation
// without a deadline, and one (the time left) with one.
func (c *call) firstLedger(h http.Header) {
	if c.id[0] == "" && c.step.Delivery.ID == "" {
		c.id[0] = retrydriver.NewID()
		c.step.Delivery.ID = c.id[0]
	}
	if c.id[0] != "" {
		h[RequestIDHeader] = c.id[:]
	}
	if dl := c.step.Delivery.Deadline; !dl.IsZero() {
		c.tmo[0] = strconv.FormatInt(timeLeft(dl, c.started), 10)
		h[TimeoutHeader] = c.tmo[:]
	}
}

// timeLeft is the TimeoutHeader value at now: whole milliseconds before
// deadline, rounded down, 0 once it passed.
func timeLeft(deadline, now time.Time) int64 {
	return max(deadline.Sub(now).Milliseconds(), 0)
}

// logGiveUp records a give-up for reason r on the Logger, if any; the
// policy's OnGiveUp hook has already run (in the Step).
func (c *call) logGiveUp(r retry.Reason, last error) {
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
		slog.String("path", c.req.URL.Path), slog.Int("attempts", c.step.Delivery.Attempt),
		slog.String("reason", r.String()),
	}
	if last != nil {
		attrs = append(attrs, slog.String("error", last.Error()))
	}
	l.LogAttrs(c.ctx, level, "http gave up", attrs...)
}

// deliver hands resp, the outcome of the attempt End judged under Hold, to
// the caller. What the attempt holds — its Limiter slot, its bounded
// context — is released when the body is closed or read to the end
// (Step.Release).
func (c *call) deliver(resp *http.Response) *http.Response {
	if c.step.Policy.Limiter == nil && !c.bounded && (c.cancel == nil || c.ctx.Done() == nil) {
		// Nothing held. (A cancel whose parent can never end registered
		// nothing anywhere: it needs no call.)
		return resp
	}
	c.body.rc, c.body.c = resp.Body, c
	if rw, isRW := resp.Body.(io.ReadWriteCloser); isRW {
		resp.Body = &releaseRWBody{releaseBody: &c.body, w: rw}
	} else {
		resp.Body = &c.body
	}
	return resp
}

// releaseBody is a delivered response's body: closing it, or reading it to
// the end, releases what the attempt held.
type releaseBody struct {
	rc   io.ReadCloser
	c    *call
	done atomic.Bool
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
	if b.done.CompareAndSwap(false, true) {
		b.c.step.Release()
		b.c.endWire()
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
