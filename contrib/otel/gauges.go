package staggerotel

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/staggerhq/stagger/budget"
	"github.com/staggerhq/stagger/limit"
)

// Names of the observable gauges: read from the budget, breaker, limiter
// or queue itself at each collection, so they cost the retry path nothing.
// The limiter's follow the semantic conventions' *.usage / *.limit pair
// (as in system.memory.usage / .limit); stagger.limiter.inflight is the
// updown counter of [Metrics.Limiter], which counts only what passes
// through its wrapper.
const (
	BudgetLevelName  = "stagger.budget.level"  // gauge, unit 1: budget.Leveler's Level in [0, 1]
	BreakerStateName = "stagger.breaker.state" // gauge, {state}: 1 for the current stagger.state, 0 for the others
	LimiterUsageName = "stagger.limiter.usage" // async updown counter, {slot}: limit.Gauge's InFlight
	LimiterLimitName = "stagger.limiter.limit" // async updown counter, {slot}: limit.Gauge's Limit
	QueueLagName     = "stagger.queue.lag"     // gauge, s: the age of the queue's oldest due job
)

// GaugeOption configures an Observe function.
type GaugeOption func(*gaugeConfig)

type gaugeConfig struct{ now func() time.Time }

// WithClock makes a gauge read the time from now instead of time.Now (a
// budget driven by a simulator's virtual clock). Only budgets whose level
// depends on a window (budget.Ratio, budget.Adaptive) read it.
func WithClock(now func() time.Time) GaugeOption {
	return func(c *gaugeConfig) {
		if now != nil {
			c.now = now
		}
	}
}

func configure(opts []GaugeOption) gaugeConfig {
	c := gaugeConfig{now: time.Now}
	for _, o := range opts {
		o(&c)
	}
	return c
}

func nameSet(name string) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(KeyName.String(name)))
}

func needMeter(meter metric.Meter, what string, v any) error {
	if meter == nil {
		return fmt.Errorf("staggerotel: %s needs a Meter, got nil", what)
	}
	if v == nil {
		return fmt.Errorf("staggerotel: %s needs something to observe, got nil", what)
	}
	return nil
}

// ObserveBudget reports b's level under name at each collection: gauge
// stagger.budget.level (unit 1, attribute stagger.name), the fraction of
// the budget left — 1 full, 0 refusing every retry (each budget documents
// its threshold: gRPC A6 refuses at 0.5). Observe the budget itself, not
// the wrapper [Metrics.Budget] returns. Call Unregister on the result to
// stop. Reading the level takes no lock and allocates nothing.
func ObserveBudget(meter metric.Meter, name string, b budget.Leveler, opts ...GaugeOption) (metric.Registration, error) {
	if err := needMeter(meter, "ObserveBudget", b); err != nil {
		return nil, err
	}
	g, err := meter.Float64ObservableGauge(BudgetLevelName, metric.WithUnit("1"),
		metric.WithDescription("Fraction of the retry budget left: 1 full, 0 refusing."))
	if err != nil {
		return nil, err
	}
	c, set := configure(opts), []metric.ObserveOption{nameSet(name)}
	return meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveFloat64(g, b.Level(c.now()), set...)
		return nil
	}, g)
}

// ObserveBreaker reports the state of the breaker c (a
// budget.CircuitBreaker, a budget.Breaker, or a circuit's Guard) under
// name at each collection: gauge stagger.breaker.state, one series per
// state (attribute stagger.state: closed, open, half-open) with 1 for the
// current state and 0 for the others, so a dashboard can sum or filter
// them. Call Unregister on the result to stop.
func ObserveBreaker(meter metric.Meter, name string, c budget.Circuit) (metric.Registration, error) {
	if err := needMeter(meter, "ObserveBreaker", c); err != nil {
		return nil, err
	}
	g, err := meter.Int64ObservableGauge(BreakerStateName, metric.WithUnit("{state}"),
		metric.WithDescription("Circuit-breaker state: 1 for the current stagger.state, 0 for the others."))
	if err != nil {
		return nil, err
	}
	var byState [len(circuitStates)][]metric.ObserveOption
	for s, set := range stateSets(name) {
		byState[s] = []metric.ObserveOption{set}
	}
	return meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		cur := c.State()
		for s := range byState {
			var v int64
			if budget.CircuitState(s) == cur {
				v = 1
			}
			o.ObserveInt64(g, v, byState[s]...)
		}
		return nil
	}, g)
}

// circuitStates are the states a circuit breaker reports, by value.
var circuitStates = [...]budget.CircuitState{budget.CircuitClosed, budget.CircuitOpen, budget.CircuitHalfOpen}

// stateSets returns the attribute sets (stagger.name, stagger.state) of
// name's circuit, one per state, indexed by the state.
func stateSets(name string) (sets [len(circuitStates)]metric.MeasurementOption) {
	for i, s := range circuitStates {
		sets[i] = metric.WithAttributeSet(attribute.NewSet(KeyName.String(name), KeyState.String(s.String())))
	}
	return sets
}

// ObserveLimiter reports what l holds under name at each collection:
// stagger.limiter.usage (slots in use, limit.Gauge's InFlight) and
// stagger.limiter.limit (limit.Gauge's Limit), both {slot} with attribute
// stagger.name; usage / limit is the limiter's utilization, and a limiter
// refuses while usage >= limit. Observe the limiter itself, not the
// wrapper [Metrics.Limiter] returns. Call Unregister on the result to
// stop.
func ObserveLimiter(meter metric.Meter, name string, l limit.Gauge) (metric.Registration, error) {
	if err := needMeter(meter, "ObserveLimiter", l); err != nil {
		return nil, err
	}
	usage, err := meter.Int64ObservableUpDownCounter(LimiterUsageName, metric.WithUnit("{slot}"),
		metric.WithDescription("Limiter slots in use (starts of the current burst for a rate limit)."))
	if err != nil {
		return nil, err
	}
	lim, err := meter.Int64ObservableUpDownCounter(LimiterLimitName, metric.WithUnit("{slot}"),
		metric.WithDescription("Limiter slots available in all (the burst for a rate limit)."))
	if err != nil {
		return nil, err
	}
	set := []metric.ObserveOption{nameSet(name)}
	return meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(usage, int64(l.InFlight()), set...)
		o.ObserveInt64(lim, int64(l.Limit()), set...)
		return nil
	}, usage, lim)
}

// Lagger is what ObserveQueue reads: *queue.Queue is one.
type Lagger interface {
	Lag(ctx context.Context) (time.Duration, error)
}

// ObserveQueue reports q's lag under name at each collection: gauge
// stagger.queue.lag (seconds, attribute stagger.name), how long the
// oldest due job has waited (0: nothing due). Each collection makes one
// read-only query of the queue's store, under the collection's context;
// a failed query reports nothing for that collection and returns its
// error to the SDK. Call Unregister on the result to stop.
func ObserveQueue(meter metric.Meter, name string, q Lagger) (metric.Registration, error) {
	if err := needMeter(meter, "ObserveQueue", q); err != nil {
		return nil, err
	}
	g, err := meter.Float64ObservableGauge(QueueLagName, metric.WithUnit("s"),
		metric.WithDescription("Age of the queue's oldest due job (0: nothing due)."))
	if err != nil {
		return nil, err
	}
	set := []metric.ObserveOption{nameSet(name)}
	return meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		lag, err := q.Lag(ctx)
		if err != nil {
			return fmt.Errorf("staggerotel: %s: %w", QueueLagName, err)
		}
		o.ObserveFloat64(g, lag.Seconds(), set...)
		return nil
	}, g)
}

// Meter returns the meter m's instruments live on (ScopeName's), for the
// Observe functions.
func (m *Metrics) Meter() metric.Meter { return m.meter }
