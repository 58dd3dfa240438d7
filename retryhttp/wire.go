package retryhttp

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"time"

	"github.com/staggerhq/stagger/retry"
)

// What reaches the wire.
//
// net/http's Transport sends a request again, on a new connection, when a
// reused connection closed before answering (Transport.roundTrip's retry
// loop, persistConn.shouldRetryRequest). For a request it considers
// replayable (GET, HEAD, OPTIONS, TRACE, or an Idempotency-Key, with a
// body it can rewind) that re-send may follow a write the server received:
// a retry below the retry owner. A call counts those re-sends through an
// httptrace.ClientTrace on each attempt's context:
//
//   - GetConn starts each try. The first is the attempt Begin counted; a
//     later one after a try that wrote its headers (WroteHeaders) is a
//     re-send, and goes through Step.Resend: it needs an attempt left and
//     the Budget's retry, and gets its own AttemptHeader. A try after one
//     that wrote nothing is still the same attempt.
//   - When Resend refuses, the attempt's context is canceled (through
//     Step.Abort when the Step bounded it, which also gives its Limiter
//     slot back as not served: the attempt's connection dropped), which stops
//     net/http's loop, and a connection net/http hands over anyway (an
//     idle one, which its select may pick over the canceled context) is
//     closed before anything is written on it (HTTP/1; an HTTP/2
//     connection is shared with other streams and is left alone).
//
// Other requests need no trace: net/http re-sends them only when nothing
// was written (persistConn.shouldRetryRequest's nothingWrittenError case),
// so the server saw none of it.
//
// A try whose headers went into the connection's buffer but whose flush
// then wrote no byte counts too: the count errs toward more attempts, never
// fewer. The header is updated in the request's own header map, which a
// Base that copies the request's header before sending does not see.

// errResendRefused is a refused re-send's error: the connection closed
// before answering, as for any retryable transport error, and the re-send
// net/http would have made had no attempt or no budget left.
var errResendRefused = retry.Retryable(errors.New("retryhttp: the connection closed before an answer, and net/http's re-send on a new connection was refused (no attempt or no retry budget left)"))

// resent reports whether net/http's Transport may re-send req after
// writing it: its isReplayable rule.
func resent(req *http.Request) bool {
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		return false
	}
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	_, key := req.Header["Idempotency-Key"]
	_, xkey := req.Header["X-Idempotency-Key"]
	return key || xkey
}

// watch returns the attempt's context with the hooks that count its tries.
// A refusal must be able to cancel it: a context the Step bounded is
// canceled through the Step (Abort); one whose parent is never done is a
// wireCtx that cancels itself; any other gets a cancel of its own.
//
// Without a caller's trace the hooks come from a pool and the context
// carries them itself (what httptrace.WithClientTrace would add as a value
// of its own) while the attempt's RoundTrip runs (wireCtx.detach). The
// first attempt's context lives in the call: over a parent that is never
// done, or a context the Step bounded, counting the tries costs no
// allocation. A parent that can end but that the Step did not bound (a
// caller's cancel, or a context deadline alone: Step.Context bounds only
// AttemptTimeout and Policy.Timeout) costs each attempt a cancelable
// context of its own (context.WithCancelCause: two allocations), and a
// later attempt costs a wireCtx of its own.
func (c *call) watch(ctx context.Context) context.Context {
	c.tries, c.refused = 0, false
	if c.hooks == nil && traceKey != nil && httptrace.ContextClientTrace(c.ctx) == nil {
		c.hooks = hooksPool.Get().(*hooks)
		c.pooled = true
	}
	if c.pooled {
		c.hooks.c = c
		c.hooks.wrote.Store(false)
		// Written only here and by a refusal, on this goroutine; net/http
		// reads GotConn on it too (the write loop reads WroteHeaders).
		c.hooks.trace.GotConn = nil
		// The first attempt's context lives in the call; a later one gets
		// its own, as net/http may still use the one before it.
		w := &c.wctx
		if c.wcur != nil {
			w = new(wireCtx)
		}
		c.wcur = w
		w.Context = ctx
		w.trace.Store(&c.hooks.trace)
		if !c.bounded {
			if ctx.Done() == nil {
				w.own = true // never done but by a refusal: no cancel of its own to make
			} else {
				w.Context, c.cancel = context.WithCancelCause(ctx)
			}
		}
		return w
	}
	if !c.bounded {
		ctx, c.cancel = context.WithCancelCause(ctx)
	}
	// WithClientTrace composes the caller's own trace into ours, changing
	// the struct: each attempt gets a fresh one.
	c.hooks = newHooks(c)
	return httptrace.WithClientTrace(ctx, &c.hooks.trace)
}

// endWire cancels the attempt's own context, if it has one.
func (c *call) endWire() {
	if c.cancel != nil {
		c.cancel(nil)
		c.cancel = nil
	}
}

// putHooks gives pooled hooks back when the call is over. No context of
// the call leads to them any more: each attempt's was detached when its
// RoundTrip returned (call.roundTrip; one whose request was never sent,
// GetBody having failed, reached no one), so a request sent later under
// it, or under a context derived from it, is a plain request that reaches
// no call's hooks. GetConn runs only inside an attempt's RoundTrip; a
// hooks value may still hear a late WroteHeaders of this call's last try
// (a write loop that read the trace before the RoundTrip returned and
// finished after it), and the next call that takes it may then count one
// re-send more than it made, never one fewer.
func (c *call) putHooks() {
	if c.pooled {
		c.hooks.c = nil
		hooksPool.Put(c.hooks)
		c.hooks, c.pooled = nil, false
	}
}

// hooks is the ClientTrace that counts an attempt's tries. Its method
// values allocate once per hooks value, so a pool of them serves the calls.
type hooks struct {
	trace httptrace.ClientTrace
	c     *call       // the call whose attempt is in flight
	wrote atomic.Bool // the current try wrote its headers
}

var hooksPool = sync.Pool{New: func() any { return newHooks(nil) }}

func newHooks(c *call) *hooks {
	h := &hooks{c: c}
	h.trace = httptrace.ClientTrace{GetConn: h.onGetConn, WroteHeaders: h.onWroteHeaders}
	return h
}

// onWroteHeaders runs on net/http's write loop when a try wrote its
// request headers.
func (h *hooks) onWroteHeaders() { h.wrote.Store(true) }

// onGetConn runs when net/http starts a try (on the goroutine of
// RoundTrip, while the call is in flight).
func (h *hooks) onGetConn(hostPort string) { h.c.onGetConn(hostPort) }

// traceKey is the key under which httptrace keeps a ClientTrace in a
// context, read once from httptrace.ContextClientTrace (nil if it could
// not be: the calls then use httptrace.WithClientTrace).
var traceKey = func() any {
	var p keyProbe
	httptrace.ContextClientTrace(&p)
	return p.key
}()

// keyProbe is a context that records the key it is asked for.
type keyProbe struct {
	context.Context
	key any
}

func (p *keyProbe) Value(key any) any {
	p.key = key
	return nil
}

// wireCtx is an attempt's context with its hooks: its parent plus the
// ClientTrace under traceKey until detach, and — own — a cancel of its
// own for a parent that is never done (Done nil). Such a parent registers
// nothing anywhere, so the cancel is a flag, a channel made only when Done
// is asked, and the callbacks of AfterFunc (how a context derived from
// this one, such as net/http's, hears of the cancel without a goroutine).
// The trace is atomic: net/http reads it on other goroutines (the write
// loop, a dial) that may outlast the attempt.
type wireCtx struct {
	context.Context
	trace atomic.Pointer[httptrace.ClientTrace] // nil once the attempt's RoundTrip returned
	own   bool

	mu       sync.Mutex
	done     chan struct{}
	err      error
	after    []func() // AfterFunc's registrations, in afterBuf while they fit
	afterBuf [1]func()
}

func (w *wireCtx) Value(key any) any {
	if key == traceKey {
		if t := w.trace.Load(); t != nil {
			return t
		}
	}
	return w.Context.Value(key)
}

// detach ends the attempt's use of the call's hooks: w then carries no
// trace of its own, nor does any context derived from it. net/http reads
// the trace while the attempt's RoundTrip runs (at its start, and for
// each try) and keeps what it read; what asks w later — a request sent
// under resp.Request.Context() after the call — must not reach hooks that
// go back to the pool, maybe to a call in flight.
func (w *wireCtx) detach() { w.trace.Store(nil) }

func (w *wireCtx) Done() <-chan struct{} {
	if !w.own {
		return w.Context.Done()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done == nil {
		w.done = make(chan struct{})
		if w.err != nil {
			close(w.done)
		}
	}
	return w.done
}

func (w *wireCtx) Err() error {
	if !w.own {
		return w.Context.Err()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// AfterFunc arranges to call f in its own goroutine once w is canceled
// (context.AfterFunc's contract). The context package is its one caller
// (a context derived from w registers its cancel here), and the stop it
// returns does not undo the registration: it is one function for every
// call, so a registration costs no allocation. What a stopped
// registration may still run is harmless, as the context package's
// callbacks are: a derived context's cancel does nothing once it ended,
// and context.AfterFunc's runs its function only if its own stop has not.
// The registrations stay with w, an attempt's context, until it is
// dropped; w is canceled only while its attempt's RoundTrip runs, so once
// it returned (detached) nothing more is registered.
func (w *wireCtx) AfterFunc(f func()) (stop func() bool) {
	if !w.own {
		return context.AfterFunc(w.Context, f)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		go f()
		return keepAfter
	}
	if w.trace.Load() == nil {
		return keepAfter // detached, never to be canceled: f would never run
	}
	if w.after == nil {
		w.after = w.afterBuf[:0]
	}
	w.after = append(w.after, f)
	return keepAfter
}

// keepAfter is the stop of every wireCtx.AfterFunc registration: it
// leaves f registered and reports so.
func keepAfter() bool { return false }

// cancel ends an own wireCtx with context.Canceled.
func (w *wireCtx) cancel() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return
	}
	w.err = context.Canceled
	if w.done != nil {
		close(w.done)
	}
	for _, f := range w.after {
		go f()
	}
	w.after = nil
}

// onGetConn runs when net/http starts a try of the attempt (on the
// goroutine of RoundTrip).
func (c *call) onGetConn(string) {
	c.tries++
	if c.tries == 1 || !c.hooks.wrote.Swap(false) || c.refused {
		return // the attempt's first try, or one after a try that wrote nothing
	}
	var now time.Time
	if c.step.NeedsNow(c.ctx) {
		now = c.now()
	}
	if !c.step.Resend(now) {
		c.refused = true
		if c.cancel != nil {
			c.cancel(errResendRefused)
		} else if c.wcur != nil && c.wcur.own {
			c.wcur.cancel()
		} else {
			// The attempt ends here: its slot goes back as not served
			// (its connection dropped), and its context is canceled.
			c.step.Abort()
		}
		prev := c.hooks.trace.GotConn
		c.hooks.trace.GotConn = func(info httptrace.GotConnInfo) {
			if prev != nil {
				prev(info)
			}
			if tc, ok := info.Conn.(*tls.Conn); ok && tc.ConnectionState().NegotiatedProtocol == "h2" {
				return // shared with other streams
			}
			_ = info.Conn.Close() // nothing has been written on it yet
		}
		return
	}
	// The previous try is over: net/http waits for its write loop to end
	// before it decides on a re-send (persistConn.mapRoundTripError,
	// "<-pc.writeLoopDone", net/http/transport.go:2248 in Go 1.26; HTTP/2
	// waits for the stream's cs.donec, h2_bundle.go:8700), so the header
	// map the re-send writes is no longer read by anyone.
	if c.upstream == 0 {
		c.areq.Header[AttemptHeader] = attemptValue(c.step.Delivery.Attempt)
	}
	c.setTimeout(c.areq.Header, now)
}
