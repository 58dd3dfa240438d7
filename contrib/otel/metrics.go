// Package staggerotel records OpenTelemetry metrics for stagger's retry
// loops, budgets, limiters and HTTP layers — from the core's hooks, so the
// core stays standard-library only.
//
//	m, _ := staggerotel.New(otel.GetMeterProvider())
//	policy := &retry.Policy{
//		Hooks:   m.Hooks("payments"),
//		Budget:  m.Budget("payments", &budget.TokenBucket{}),
//		Limiter: m.Limiter("payments", bulkhead),
//	}
//
// The same Hooks observe retry.Do, the durable queue and retryhttp (set them
// on the Policy a retryhttp.Transport uses); [Metrics.ObserveGuard] reports
// a retryhttp.Guard's counts per attempt number.
//
// Instruments (all with attribute stagger.name):
//
//	stagger.attempts            counter   attempts started
//	stagger.retries             counter   failed attempts that will be retried
//	stagger.successes           counter   operations that succeeded
//	stagger.giveups             counter   operations that stopped, by stagger.reason
//	stagger.retry.delay         histogram seconds waited before a retry
//	stagger.budget.decisions    counter   budget answers, by stagger.kind (request|retry) and stagger.allowed
//	stagger.limiter.rejections  counter   attempts refused for want of a slot
//	stagger.limiter.inflight    updown    slots held
//	stagger.guard.requests      counter   requests a Guard saw, by stagger.attempt (1..15, 16+, none, malformed)
//	stagger.guard.shed          counter   requests a Guard shed
//	stagger.circuit.changes     counter   circuit-breaker state changes, by stagger.state ([Metrics.CircuitStateChanges])
//	http.client.request.duration histogram seconds per logical HTTP request ([Metrics.Transport]; semantic-convention attributes)
//	http.server.request.duration histogram seconds per request served ([Metrics.Server])
//
// Gauges, read at each collection ([ObserveBudget], [ObserveBreaker],
// [ObserveLimiter], [ObserveQueue]; they cost the retry path nothing):
//
//	stagger.budget.level        gauge     fraction of the budget left, 1 full, 0 refusing
//	stagger.breaker.state       gauge     1 for the current stagger.state, 0 for the others
//	stagger.limiter.usage       updown    slots in use, read from the limiter
//	stagger.limiter.limit       updown    slots in all
//	stagger.queue.lag           gauge     seconds the oldest due job has waited
//
// contrib/grafana/stagger.json is a Grafana dashboard of all of these.
//
// Traces ([Tracer]): [Tracer.Do] is retry.Do with a span per attempt;
// [Tracer.Transport] gives a retryhttp.Transport a client span per request
// and per attempt, [Tracer.Server] a Guard a server span per request,
// [Tracer.Propagator] and [Tracer.Handler] the queue and the brokers
// producer and consumer spans; package staggerotelgrpc (contrib/otel/grpc)
// does the same for the gRPC interceptors. Span attributes follow the
// OpenTelemetry semantic conventions; docs/metrics.md lists them all.
package staggerotel

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/staggerhq/stagger/budget"
	"github.com/staggerhq/stagger/limit"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retryhttp"
)

// ScopeName is the instrumentation scope of the meter.
const ScopeName = "github.com/staggerhq/stagger/contrib/otel"

// Attribute keys.
const (
	KeyName    = attribute.Key("stagger.name")    // the name given to Hooks, Budget, Limiter or ObserveGuard; on every instrument
	KeyReason  = attribute.Key("stagger.reason")  // stagger.giveups: the retry.Reason's String, e.g. "exhausted"
	KeyKind    = attribute.Key("stagger.kind")    // stagger.budget.decisions: "request" or "retry"
	KeyAllowed = attribute.Key("stagger.allowed") // stagger.budget.decisions: the budget's answer (bool)
	KeyAttempt = attribute.Key("stagger.attempt") // stagger.guard.requests: "1", "2", …, the last with "+", "none" or "malformed"
)

// DelayBuckets are the delay histogram's bucket bounds in seconds.
var DelayBuckets = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}

// Metrics holds the instruments. Make one per process with New and share it.
type Metrics struct {
	meter      metric.Meter
	attempts   metric.Int64ObservableCounter
	retries    metric.Int64ObservableCounter
	successes  metric.Int64ObservableCounter
	giveups    metric.Int64ObservableCounter
	delay      metric.Float64Histogram
	decisions  metric.Int64Counter
	rejections metric.Int64Counter
	inflight   metric.Int64UpDownCounter
	guardReqs  metric.Int64ObservableCounter
	guardShed  metric.Int64ObservableCounter
	loops      loopCounts // what Hooks count, by name
}

// New creates the instruments on mp's meter for ScopeName.
func New(mp metric.MeterProvider) (*Metrics, error) {
	if mp == nil {
		return nil, fmt.Errorf("staggerotel: New needs a MeterProvider, got nil")
	}
	m := &Metrics{meter: mp.Meter(ScopeName)}
	var err error
	if m.attempts, err = m.meter.Int64ObservableCounter("stagger.attempts", metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts started.")); err != nil {
		return nil, err
	}
	if m.retries, err = m.meter.Int64ObservableCounter("stagger.retries", metric.WithUnit("{retry}"),
		metric.WithDescription("Failed attempts that will be retried.")); err != nil {
		return nil, err
	}
	if m.successes, err = m.meter.Int64ObservableCounter("stagger.successes", metric.WithUnit("{operation}"),
		metric.WithDescription("Operations that succeeded.")); err != nil {
		return nil, err
	}
	if m.giveups, err = m.meter.Int64ObservableCounter("stagger.giveups", metric.WithUnit("{operation}"),
		metric.WithDescription("Operations that stopped without success, by reason.")); err != nil {
		return nil, err
	}
	if m.delay, err = m.meter.Float64Histogram("stagger.retry.delay", metric.WithUnit("s"),
		metric.WithDescription("Wait before each retry."), metric.WithExplicitBucketBoundaries(DelayBuckets...)); err != nil {
		return nil, err
	}
	if m.decisions, err = m.meter.Int64Counter("stagger.budget.decisions", metric.WithUnit("{decision}"),
		metric.WithDescription("Retry-budget answers, by kind (request, retry) and allowed.")); err != nil {
		return nil, err
	}
	if m.rejections, err = m.meter.Int64Counter("stagger.limiter.rejections", metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts refused by a concurrency limiter.")); err != nil {
		return nil, err
	}
	if m.inflight, err = m.meter.Int64UpDownCounter("stagger.limiter.inflight", metric.WithUnit("{attempt}"),
		metric.WithDescription("Concurrency slots held.")); err != nil {
		return nil, err
	}
	if m.guardReqs, err = m.meter.Int64ObservableCounter("stagger.guard.requests", metric.WithUnit("{request}"),
		metric.WithDescription("Requests seen by a retryhttp.Guard, by attempt number.")); err != nil {
		return nil, err
	}
	if m.guardShed, err = m.meter.Int64ObservableCounter("stagger.guard.shed", metric.WithUnit("{request}"),
		metric.WithDescription("Requests a retryhttp.Guard shed with 503.")); err != nil {
		return nil, err
	}
	if _, err = m.meter.RegisterCallback(m.observeLoops, m.attempts, m.retries, m.successes, m.giveups); err != nil {
		return nil, err
	}
	return m, nil
}

var bg = context.Background()

// Hooks returns retry hooks that record the loop of the operation name.
// Attempts, retries, successes and give-ups are atomic adds to counts
// kept per name (Hooks called twice with one name share them), reported
// at each collection; only OnRetry records into the SDK (the delay
// histogram). Recording takes no lock and does not allocate. Join them
// with other hooks using retry.Hooks.Join.
func (m *Metrics) Hooks(name string) retry.Hooks {
	// Options are kept in slices so that passing them does not allocate.
	rec := []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(KeyName.String(name)))}
	c := m.loops.get(name)
	return retry.Hooks{
		OnAttempt: func(retry.Event) { c.attempts.Add(1) },
		OnRetry: func(e retry.Event) {
			c.retries.Add(1)
			m.delay.Record(bg, e.Delay.Seconds(), rec...)
		},
		OnSuccess: func(retry.Event) { c.successes.Add(1) },
		OnGiveUp:  func(e retry.Event) { c.giveups[e.Reason].Add(1) },
	}
}

// Budget wraps b so that its answers are counted under name. The wrapper is
// a budget.Budget, and a budget.Circuit when b is one (its refusals keep
// their reason); use it where b would go. A nil b gives nil (no budget),
// so a retryhttp.Transport's NewBudget may wrap whatever it makes.
func (m *Metrics) Budget(name string, b budget.Budget) budget.Budget {
	if b == nil {
		return nil
	}
	opt := func(kind string, allowed bool) []metric.AddOption {
		return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(KeyName.String(name), KeyKind.String(kind), KeyAllowed.Bool(allowed)))}
	}
	cb := &countingBudget{b: b, m: m,
		reqOK: opt("request", true), reqNo: opt("request", false),
		retryOK: opt("retry", true), retryNo: opt("retry", false)}
	if c, ok := b.(budget.Circuit); ok {
		// Keep the circuit's state visible, so that a driver still gives
		// its refusals their own reason (retry.CircuitOpen).
		return countingCircuit{cb, c}
	}
	return cb
}

type countingCircuit struct {
	*countingBudget
	c budget.Circuit
}

func (c countingCircuit) State() budget.CircuitState { return c.c.State() }

type countingBudget struct {
	b                              budget.Budget
	m                              *Metrics
	reqOK, reqNo, retryOK, retryNo []metric.AddOption
}

func (c *countingBudget) Request(now time.Time) bool {
	ok := c.b.Request(now)
	if ok {
		c.m.decisions.Add(bg, 1, c.reqOK...)
	} else {
		c.m.decisions.Add(bg, 1, c.reqNo...)
	}
	return ok
}

func (c *countingBudget) Retry(now time.Time) bool {
	ok := c.b.Retry(now)
	if ok {
		c.m.decisions.Add(bg, 1, c.retryOK...)
	} else {
		c.m.decisions.Add(bg, 1, c.retryNo...)
	}
	return ok
}

func (c *countingBudget) Result(now time.Time, ok bool) { c.b.Result(now, ok) }

// Limiter wraps l so that its rejections and held slots are counted under
// name. The wrapper is a limit.Limiter; use it where l would go. A nil l
// gives nil (no limiter).
func (m *Metrics) Limiter(name string, l limit.Limiter) limit.Limiter {
	if l == nil {
		return nil
	}
	set := metric.WithAttributeSet(attribute.NewSet(KeyName.String(name)))
	return &countingLimiter{l: l, m: m, set: []metric.AddOption{set}}
}

type countingLimiter struct {
	l   limit.Limiter
	m   *Metrics
	set []metric.AddOption
}

func (c *countingLimiter) TryAcquire() bool {
	if c.l.TryAcquire() {
		c.m.inflight.Add(bg, 1, c.set...)
		return true
	}
	c.m.rejections.Add(bg, 1, c.set...)
	return false
}

func (c *countingLimiter) Release(ok bool) {
	c.l.Release(ok)
	c.m.inflight.Add(bg, -1, c.set...)
}

// ObserveGuard reports g's counts under name at each collection. Call
// Unregister on the result to stop.
func (m *Metrics) ObserveGuard(name string, g *retryhttp.Guard) (metric.Registration, error) {
	var byAttempt [retryhttp.TrackedAttempts]metric.ObserveOption
	for i := range byAttempt {
		label := strconv.Itoa(i + 1)
		if i == len(byAttempt)-1 {
			label += "+"
		}
		byAttempt[i] = metric.WithAttributeSet(attribute.NewSet(KeyName.String(name), KeyAttempt.String(label)))
	}
	none := metric.WithAttributeSet(attribute.NewSet(KeyName.String(name), KeyAttempt.String("none")))
	malformed := metric.WithAttributeSet(attribute.NewSet(KeyName.String(name), KeyAttempt.String("malformed")))
	set := metric.WithAttributeSet(attribute.NewSet(KeyName.String(name)))
	return m.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s := g.Stats()
		for i, n := range s.ByAttempt {
			if n > 0 {
				o.ObserveInt64(m.guardReqs, n, byAttempt[i])
			}
		}
		o.ObserveInt64(m.guardReqs, s.Unmarked, none)
		if s.Malformed > 0 {
			o.ObserveInt64(m.guardReqs, s.Malformed, malformed)
		}
		o.ObserveInt64(m.guardShed, s.Shed, set)
		return nil
	}, m.guardReqs, m.guardShed)
}
