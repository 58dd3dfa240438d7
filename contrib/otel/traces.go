package staggerotel

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/staggerhq/stagger/contrib/otel/internal/attempts"
	"github.com/staggerhq/stagger/retry"
)

// Span attribute keys (with KeyName and KeyReason).
const (
	// KeyAttemptNumber is the attempt a span is about, counting from 1.
	KeyAttemptNumber = attribute.Key("stagger.attempt.number")
	// KeyDelay is the wait decided before the next attempt, in seconds,
	// on the span of an attempt that will be retried.
	KeyDelay = attribute.Key("stagger.retry.delay")
)

// Tracer records spans for stagger's drivers: a span per attempt of a
// retry loop ([Tracer.Do]), client spans per request and per attempt of
// a retryhttp.Transport ([Tracer.Transport]), server spans around a
// retryhttp.Guard ([Tracer.Server]), producer and consumer spans of the
// queue and the brokers ([Tracer.Propagator], [Tracer.Handler]). Make
// one per process with NewTracer and share it.
//
// One rule sets the status of an attempt's span, in every driver: an
// attempt that succeeded keeps status Unset (Ok is the application's to
// set); a failed attempt that will be retried keeps status Unset, records
// its error as an exception event and gets stagger.retry.will_retry=true;
// the last attempt, when it failed, records its error and gets status
// Error, and so does the span of the logical operation (an HTTP request,
// an RPC) it ends. HTTP answers count as failed from 400 on (client
// spans) and from 500 on (server spans), as the OpenTelemetry HTTP
// semantic conventions ask.
//
// Attributes follow the OpenTelemetry semantic conventions (the schema
// of go.opentelemetry.io/otel/semconv/v1.41.0) where they define one,
// and are named stagger.* where they do not. Trace context crosses the
// wire in the W3C Trace Context format.
type Tracer struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

// NewTracer returns a Tracer on tp's tracer for ScopeName.
func NewTracer(tp trace.TracerProvider) (*Tracer, error) {
	if tp == nil {
		return nil, fmt.Errorf("staggerotel: NewTracer needs a TracerProvider, got nil")
	}
	return &Tracer{
		tracer: tp.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL)),
		prop:   propagation.TraceContext{},
	}, nil
}

// WithPropagator returns a copy of t whose HTTP spans carry trace context
// on the wire in p's format ([Tracer.Transport] injects it,
// [Tracer.Server] extracts it) and whose [Tracer.Propagator] writes it;
// nil means W3C Trace Context, the default.
func (t *Tracer) WithPropagator(p propagation.TextMapPropagator) *Tracer {
	c := *t
	if p == nil {
		p = propagation.TraceContext{}
	}
	c.prop = p
	return &c
}

// Do is retry.Do with one span per attempt, each a child of ctx's span,
// named name, with attributes stagger.name and stagger.attempt.number;
// the attempt's context (fn's argument) carries its span, so what fn
// traces nests under it. The span of an attempt that will be retried gets
// stagger.retry.delay (the decided wait, in seconds),
// stagger.retry.will_retry and the error, status Unset; the last failed
// attempt's gets stagger.reason (the give-up reason), the error and
// status Error (the rule of [Tracer]). An attempt the loop could not start (a budget or circuit
// breaker refused, no limiter slot, no time left) gets a span of no length
// with its number and the reason, so a refusal shows in the trace too.
//
// p's own hooks still run, before the tracing; Do leaves p unchanged (it
// runs a copy), so p may be shared.
func (t *Tracer) Do(ctx context.Context, p *retry.Policy, name string, fn func(context.Context) error) error {
	if p == nil {
		p = &retry.Policy{}
	}
	a := &attemptSpans{t: t.tracer, ctx: ctx, name: name, inner: p.Hooks}
	a.policy = *p
	a.policy.Hooks = retry.Hooks{OnAttempt: a.start, OnRetry: a.retry, OnSuccess: a.success, OnGiveUp: a.giveUp}
	return retry.Do(ctx, &a.policy, func(actx context.Context) error {
		if a.span != nil {
			actx = trace.ContextWithSpan(actx, a.span)
		}
		return fn(actx)
	})
}

// attemptSpans holds the span of the attempt in flight of one loop; the
// hooks run on the loop's goroutine, one at a time.
type attemptSpans struct {
	t      trace.Tracer
	ctx    context.Context
	name   string
	span   trace.Span  // the attempt in flight; nil between attempts
	inner  retry.Hooks // the caller's policy's own hooks, run first
	policy retry.Policy
}

func (a *attemptSpans) start(e retry.Event) {
	if h := a.inner.OnAttempt; h != nil {
		h(e)
	}
	_, a.span = a.t.Start(a.ctx, a.name, trace.WithAttributes(KeyName.String(a.name), KeyAttemptNumber.Int(e.Attempt)))
}

func (a *attemptSpans) end() {
	a.span.End()
	a.span = nil
}

func (a *attemptSpans) retry(e retry.Event) {
	if h := a.inner.OnRetry; h != nil {
		h(e)
	}
	if a.span == nil {
		return
	}
	a.span.SetAttributes(KeyDelay.Float64(e.Delay.Seconds()))
	attempts.Retried(a.span, e.Err, time.Time{}) // zero: now
	a.end()
}

func (a *attemptSpans) success(e retry.Event) {
	if h := a.inner.OnSuccess; h != nil {
		h(e)
	}
	if a.span == nil {
		return
	}
	a.end()
}

func (a *attemptSpans) giveUp(e retry.Event) {
	if h := a.inner.OnGiveUp; h != nil {
		h(e)
	}
	if a.span == nil {
		// Refused before it started: a span of no length for the attempt
		// that could not start.
		_, a.span = a.t.Start(a.ctx, a.name, trace.WithAttributes(KeyName.String(a.name), KeyAttemptNumber.Int(e.Attempt+1)))
	}
	a.span.SetAttributes(KeyReason.String(e.Reason.String()))
	attempts.Final(a.span, true, e.Err, "gave up: "+e.Reason.String())
	a.end()
}
