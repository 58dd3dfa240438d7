package staggerotel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/staggerhq/stagger/contrib/otel/internal/attempts"
	"github.com/staggerhq/stagger/internal/redact"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retryhttp"
)

// Span attribute keys of the HTTP spans (with KeyAttemptNumber).
const (
	// KeyWillRetry is true on the span of an attempt another attempt
	// follows (see [Tracer] for the rule of statuses).
	KeyWillRetry = attempts.KeyWillRetry
	// KeyAttemptCount is the number of attempts a logical request made,
	// on its span.
	KeyAttemptCount = attempts.KeyAttemptCount
	// KeyRequestID is the request's Stagger-Request-Id on a Guard's
	// server span.
	KeyRequestID = attribute.Key("stagger.request.id")
)

// Transport instruments rt with a span per request and a span per
// attempt, and returns the RoundTripper to use in rt's place:
//
//	client := &http.Client{Transport: tr.Transport(retryhttp.New(nil, policy))}
//
// It sets rt.Base to a layer that traces each attempt (so call it before
// rt's first use, once). Each request gets a span of kind client, named
// by its method, with http.request.method, server.address, server.port
// and url.full (user information and secret-looking query values
// masked), and at its end http.response.status_code (the answer handed
// to the caller), error.type, stagger.attempt.count and, when it failed
// (a transport error or a status of 400 or more), status Error. It ends
// when the caller closes the response's body or reads it to the end.
// Each attempt is a child span of kind client with the same attributes,
// stagger.attempt.number (the ledger's, from Stagger-Attempt) and, from
// the second on, http.request.resend_count (the number of times the
// request was sent before it, as the OpenTelemetry HTTP semantic
// conventions define it); the attempt's trace context is injected into
// its request (W3C Trace Context), so the server's span is the
// attempt's child. A failed attempt that is retried keeps status Unset
// and gets stagger.retry.will_retry=true; the last one, failed, gets
// status Error.
//
// An attempt net/http's Transport re-sends by itself inside one call of
// Base (a reused connection closed before answering) shares its span.
func (t *Tracer) Transport(rt *retryhttp.Transport) http.RoundTripper {
	rt.Base = &attemptTransport{t: t, base: rt.Base}
	return &clientTransport{t: t, next: rt}
}

type clientTransport struct {
	t    *Tracer
	next http.RoundTripper
}

type attemptTransport struct {
	t    *Tracer
	base http.RoundTripper
}

// clientAttrs are the attributes of a client span of req (url.full
// only when full), with room for more.
func clientAttrs(req *http.Request, more int, full bool) []attribute.KeyValue {
	kv := make([]attribute.KeyValue, 0, 4+more)
	kv = append(kv, semconv.HTTPRequestMethodKey.String(method(req.Method)))
	if u := req.URL; u != nil {
		host, port := u.Hostname(), u.Port()
		kv = append(kv, semconv.ServerAddress(host))
		if p, err := strconv.Atoi(port); err == nil {
			kv = append(kv, semconv.ServerPort(p))
		} else if p := defaultPort(u.Scheme); p > 0 {
			kv = append(kv, semconv.ServerPort(p))
		}
		if full {
			kv = append(kv, semconv.URLFull(fullURL(u)))
		}
	}
	return kv
}

// method is m as http.request.method takes it: "GET" for "", "_OTHER"
// for a method not in RFC 9110 or RFC 5789.
func method(m string) string {
	switch m {
	case "":
		return http.MethodGet
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete,
		http.MethodConnect, http.MethodOptions, http.MethodTrace, http.MethodPatch:
		return m
	}
	return "_OTHER"
}

func defaultPort(scheme string) int {
	switch scheme {
	case "http":
		return 80
	case "https":
		return 443
	}
	return 0
}

// fullURL is u for url.full: user information and secret-looking query
// values masked (internal/redact).
func fullURL(u *url.URL) string {
	if u.User == nil && u.RawQuery == "" {
		return u.String()
	}
	c := *u
	c.User = nil
	s := c.String()
	if u.User != nil {
		s = c.Scheme + "://" + redact.Mask + "@" + s[len(c.Scheme)+3:]
	}
	if u.RawQuery != "" {
		s = redact.String(s)
	}
	return s
}

// Span start options of each kind, made once.
var (
	kindClient   = trace.WithSpanKind(trace.SpanKindClient)
	kindServer   = trace.WithSpanKind(trace.SpanKindServer)
	kindProducer = trace.WithSpanKind(trace.SpanKindProducer)
	kindConsumer = trace.WithSpanKind(trace.SpanKindConsumer)
)

func (c *clientTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	kv := clientAttrs(req, 0, true)
	ctx, span := c.t.tracer.Start(req.Context(), method(req.Method), kindClient, trace.WithAttributes(kv...))
	call := &attempts.Call{Span: span, Attrs: kv}
	resp, err := c.next.RoundTrip(req.WithContext(attempts.With(ctx, call)))
	if err != nil {
		call.Finish(attempts.Outcome{Failed: true, Err: err, Desc: errorType(err),
			Attrs: []attribute.KeyValue{semconv.ErrorTypeKey.String(errorType(err))}})
		return nil, err
	}
	out := responseOutcome(resp)
	if resp.Body == nil || resp.Body == http.NoBody {
		call.Finish(out)
		return resp, nil
	}
	b := &tracedBody{rc: resp.Body, call: call, out: out}
	if w, ok := resp.Body.(io.Writer); ok { // a 101 Switching Protocols body
		resp.Body = &tracedRWBody{tracedBody: b, w: w}
	} else {
		resp.Body = b
	}
	return resp, nil
}

// responseOutcome is what an answer with resp's status comes to on a
// client span: a failure from 400 on, error.type its code.
func responseOutcome(resp *http.Response) attempts.Outcome {
	if c := resp.StatusCode; c >= 200 && c < 200+len(success) {
		return attempts.Outcome{Attrs: success[c-200]}
	}
	code := semconv.HTTPResponseStatusCode(resp.StatusCode)
	if resp.StatusCode < 400 {
		return attempts.Outcome{Attrs: []attribute.KeyValue{code}}
	}
	s := strconv.Itoa(resp.StatusCode)
	return attempts.Outcome{Failed: true, Desc: s, Attrs: []attribute.KeyValue{code, semconv.ErrorTypeKey.String(s)}}
}

// success holds the attributes of the answers 200 to 299, made once
// (length and capacity 1: an append copies).
var success = func() (s [100][]attribute.KeyValue) {
	for i := range s {
		s[i] = []attribute.KeyValue{semconv.HTTPResponseStatusCode(200 + i)}[:1:1]
	}
	return s
}()

// errorType is error.type of a transport error: "timeout", "canceled",
// or the Go type of the innermost error (the last attempt's, for a
// retry.Error).
func errorType(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	var re *retry.Error
	if errors.As(err, &re) && re.Err != nil {
		err = re.Err
	}
	var op *net.OpError
	if errors.As(err, &op) {
		return "net.OpError:" + op.Op
	}
	for u := errors.Unwrap(err); u != nil; u = errors.Unwrap(err) {
		err = u
	}
	return fmt.Sprintf("%T", err)
}

func (a *attemptTransport) next() http.RoundTripper {
	if a.base == nil {
		return http.DefaultTransport
	}
	return a.base
}

func (a *attemptTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	call := attempts.From(ctx)
	n := 1
	if call != nil {
		n = call.Begin()
	}
	var kv []attribute.KeyValue
	if call != nil {
		kv = append(make([]attribute.KeyValue, 0, len(call.Attrs)+2), call.Attrs...)
	} else {
		kv = clientAttrs(req, 2, true)
	}
	if v := req.Header[retryhttp.AttemptHeader]; len(v) == 1 {
		if ln, ok := retryhttp.ParseAttempt(v[0]); ok {
			kv = append(kv, KeyAttemptNumber.Int(ln))
		}
	}
	if n > 1 {
		kv = append(kv, semconv.HTTPRequestResendCount(n-1))
	}
	ctx, span := a.t.tracer.Start(ctx, method(req.Method), kindClient, trace.WithAttributes(kv...))
	// retryhttp gives every attempt a header map of its own: the trace
	// context goes into it, not into the caller's request.
	a.t.prop.Inject(ctx, headerCarrier(req.Header))
	resp, err := a.next().RoundTrip(req.WithContext(ctx))
	var out attempts.Outcome
	if err != nil {
		et := errorType(err)
		out = attempts.Outcome{Failed: true, Err: err, Desc: et, Attrs: []attribute.KeyValue{semconv.ErrorTypeKey.String(et)}}
	} else if resp != nil {
		out = responseOutcome(resp)
	}
	if call == nil { // used on its own: every attempt is the last one
		span.SetAttributes(out.Attrs...)
		attempts.Final(span, out.Failed, out.Err, out.Desc)
		span.End()
	} else {
		call.Done(span, out)
	}
	return resp, err
}

// tracedBody ends the request's spans when the body is read to the end
// or closed.
type tracedBody struct {
	rc   io.ReadCloser
	call *attempts.Call
	out  attempts.Outcome
	once sync.Once
}

func (b *tracedBody) finish() { b.once.Do(func() { b.call.Finish(b.out) }) }

func (b *tracedBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.finish()
	}
	return n, err
}

func (b *tracedBody) Close() error {
	err := b.rc.Close()
	b.finish()
	return err
}

type tracedRWBody struct {
	*tracedBody
	w io.Writer
}

func (b *tracedRWBody) Write(p []byte) (int, error) { return b.w.Write(p) }

// headerCarrier is propagation.HeaderCarrier with the W3C fields' keys in
// canonical form already, so setting or reading them does not canonicalize
// (and allocate) a key per request.
type headerCarrier http.Header

func canonicalKey(k string) string {
	switch k {
	case fieldParent:
		return "Traceparent"
	case fieldState:
		return "Tracestate"
	}
	return http.CanonicalHeaderKey(k)
}

func (h headerCarrier) Get(k string) string {
	if v := h[canonicalKey(k)]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func (h headerCarrier) Set(k, v string) { h[canonicalKey(k)] = []string{v} }

func (h headerCarrier) Keys() []string { return propagation.HeaderCarrier(h).Keys() }

type idleCloser interface{ CloseIdleConnections() }

// CloseIdleConnections closes the idle connections of the transport
// below, so http.Client.CloseIdleConnections reaches it through the
// tracing layers.
func (a *attemptTransport) CloseIdleConnections() {
	if c, ok := a.next().(idleCloser); ok {
		c.CloseIdleConnections()
	}
}

// CloseIdleConnections closes the idle connections of the retryhttp
// Transport and its Base.
func (c *clientTransport) CloseIdleConnections() {
	if ic, ok := c.next.(idleCloser); ok {
		ic.CloseIdleConnections()
	}
}
