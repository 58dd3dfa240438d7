package retryhttp

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"net/http/httptrace"
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
// canceled through the Step (Abort); any other gets a cancel of its own.
func (c *call) watch(ctx context.Context) context.Context {
	c.tries, c.refused = 0, false
	c.wrote.Store(false)
	if !c.bounded {
		ctx, c.cancel = context.WithCancelCause(ctx)
	}
	switch {
	case c.trace == nil && httptrace.ContextClientTrace(c.ctx) == nil:
		c.ownTrace = httptrace.ClientTrace{GetConn: c.onGetConn, WroteHeaders: c.onWroteHeaders}
		c.trace = &c.ownTrace
	case c.trace == &c.ownTrace:
		// Written only here and by a refusal, on this goroutine; net/http
		// reads GotConn on it too (the write loop reads WroteHeaders).
		c.ownTrace.GotConn = nil
	default:
		// WithClientTrace composes the caller's own trace into ours,
		// changing the struct: each attempt gets a fresh one.
		c.trace = &httptrace.ClientTrace{GetConn: c.onGetConn, WroteHeaders: c.onWroteHeaders}
	}
	return httptrace.WithClientTrace(ctx, c.trace)
}

// endWire cancels the attempt's own context, if it has one.
func (c *call) endWire() {
	if c.cancel != nil {
		c.cancel(nil)
		c.cancel = nil
	}
}

// onWroteHeaders runs on net/http's write loop when a try wrote its
// request headers.
func (c *call) onWroteHeaders() { c.wrote.Store(true) }

// onGetConn runs when net/http starts a try of the attempt (on the
// goroutine of RoundTrip).
func (c *call) onGetConn(string) {
	c.tries++
	if c.tries == 1 || !c.wrote.Swap(false) || c.refused {
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
		} else {
			// The attempt ends here: its slot goes back as not served
			// (its connection dropped), and its context is canceled.
			c.step.Abort()
		}
		prev := c.trace.GotConn
		c.trace.GotConn = func(info httptrace.GotConnInfo) {
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
