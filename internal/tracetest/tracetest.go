// Package tracetest is the trace propagator of stagger's conformance
// suites: it keeps a W3C trace context as a context value, as a tracing
// library keeps its span, so that a test can see whether a driver carried
// it from the enqueuer or publisher into every attempt.
package tracetest

import "context"

// Context is a W3C trace context: a traceparent and a tracestate.
type Context struct{ Parent, State string }

type key struct{}

// With returns ctx carrying c.
func With(ctx context.Context, c Context) context.Context {
	return context.WithValue(ctx, key{}, c)
}

// From returns the trace context ctx carries (zero: none).
func From(ctx context.Context) Context {
	c, _ := ctx.Value(key{}).(Context)
	return c
}

// Propagator is a retry.Propagator over With and From.
type Propagator struct{}

// Inject implements retry.Propagator.
func (Propagator) Inject(ctx context.Context) (parent, state string) {
	c := From(ctx)
	return c.Parent, c.State
}

// Extract implements retry.Propagator: an empty parent leaves ctx alone.
func (Propagator) Extract(ctx context.Context, parent, state string) context.Context {
	if parent == "" {
		return ctx
	}
	return With(ctx, Context{parent, state})
}
