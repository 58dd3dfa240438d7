package staggerotel_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/budget"
	staggerotel "github.com/staggerhq/stagger/contrib/otel"
	"github.com/staggerhq/stagger/limit"
	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/queue/queuetest"
	"github.com/staggerhq/stagger/retry"
)

func gaugeSetup(t testing.TB) (metric.Meter, *sdkmetric.ManualReader) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	return mp.Meter(staggerotel.ScopeName), reader
}

// point returns the value of metric name at the point whose attributes
// include every kv, and whether there is one (gauges and sums alike).
func (c collected) point(t *testing.T, name string, kv ...attribute.KeyValue) (float64, bool) {
	t.Helper()
	switch d := c[name].(type) {
	case metricdata.Gauge[float64]:
		for _, p := range d.DataPoints {
			if hasAll(p.Attributes, kv) {
				return p.Value, true
			}
		}
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			if hasAll(p.Attributes, kv) {
				return float64(p.Value), true
			}
		}
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			if hasAll(p.Attributes, kv) {
				return float64(p.Value), true
			}
		}
	case nil:
	default:
		t.Fatalf("%s is %T", name, d)
	}
	return 0, false
}

func TestObserveBudget(t *testing.T) {
	meter, reader := gaugeSetup(t)
	now := time.Unix(100, 0)
	tb := &budget.TokenBucket{}
	g, _ := budget.NewGRPC(10, 0.1)
	r, _ := budget.NewRatio(0.1, time.Minute)
	for name, b := range map[string]budget.Leveler{"tb": tb, "grpc": g, "ratio": r} {
		if _, err := staggerotel.ObserveBudget(meter, name, b, staggerotel.WithClock(func() time.Time { return now })); err != nil {
			t.Fatal(err)
		}
	}
	c := collect(t, reader)
	for n, want := range map[string]float64{"tb": 1, "grpc": 1, "ratio": 0} {
		if v, ok := c.point(t, staggerotel.BudgetLevelName, name(n)); !ok || v != want {
			t.Errorf("%s level %v (%v), want %v", n, v, ok, want)
		}
	}
	// Spend: the next collection sees the budgets as they are now.
	for range 5 {
		tb.Retry(now)
		g.Result(now, false)
	}
	for range 40 {
		r.Request(now)
	}
	r.Retry(now)
	c = collect(t, reader)
	for n, want := range map[string]float64{"tb": 0.75, "grpc": 0.5, "ratio": 0.75} {
		if v, _ := c.point(t, staggerotel.BudgetLevelName, name(n)); math.Abs(v-want) > 1e-9 {
			t.Errorf("%s level %v after spending, want %v", n, v, want)
		}
	}
	// The window moved on: WithClock's time is the one Ratio judges at.
	now = now.Add(2 * time.Minute)
	if v, _ := collect(t, reader).point(t, staggerotel.BudgetLevelName, name("ratio")); v != 0 {
		t.Errorf("ratio level %v after its window, want 0", v)
	}
}

func TestObserveBreaker(t *testing.T) {
	meter, reader := gaugeSetup(t)
	now := time.Unix(100, 0)
	cb, _ := budget.NewCircuitBreaker(budget.CircuitConfig{MinCalls: 1, CoolDown: time.Second})
	rb, _ := budget.NewBreaker(0.5, 1, time.Minute)
	if _, err := staggerotel.ObserveBreaker(meter, "cb", cb); err != nil {
		t.Fatal(err)
	}
	reg, err := staggerotel.ObserveBreaker(meter, "rb", rb)
	if err != nil {
		t.Fatal(err)
	}
	state := func(c collected, n string) string {
		t.Helper()
		var cur []string
		for _, s := range []budget.CircuitState{budget.CircuitClosed, budget.CircuitOpen, budget.CircuitHalfOpen} {
			v, ok := c.point(t, staggerotel.BreakerStateName, name(n), staggerotel.KeyState.String(s.String()))
			if !ok {
				t.Fatalf("%s: no series for state %v", n, s)
			}
			if v == 1 {
				cur = append(cur, s.String())
			} else if v != 0 {
				t.Fatalf("%s: state %v = %v, want 0 or 1", n, s, v)
			}
		}
		return strings.Join(cur, ",")
	}
	c := collect(t, reader)
	if a, b := state(c, "cb"), state(c, "rb"); a != "closed" || b != "closed" {
		t.Fatalf("states %q %q, want closed closed", a, b)
	}
	cb.Result(now, false)
	rb.Result(now, false)
	rb.Retry(now)
	c = collect(t, reader)
	if a, b := state(c, "cb"), state(c, "rb"); a != "open" || b != "open" {
		t.Fatalf("states %q %q, want open open", a, b)
	}
	cb.Request(now.Add(time.Second))
	if a := state(collect(t, reader), "cb"); a != "half-open" {
		t.Fatalf("state %q, want half-open", a)
	}
	if err := reg.Unregister(); err != nil {
		t.Fatal(err)
	}
	if _, ok := collect(t, reader).point(t, staggerotel.BreakerStateName, name("rb")); ok {
		t.Fatal("an unregistered breaker is still reported")
	}
}

func TestObserveLimiter(t *testing.T) {
	meter, reader := gaugeSetup(t)
	bh, _ := limit.NewBulkhead(4)
	if _, err := staggerotel.ObserveLimiter(meter, "db", bh); err != nil {
		t.Fatal(err)
	}
	bh.TryAcquire()
	bh.TryAcquire()
	bh.TryAcquire()
	c := collect(t, reader)
	u, _ := c.point(t, staggerotel.LimiterUsageName, name("db"))
	l, _ := c.point(t, staggerotel.LimiterLimitName, name("db"))
	if u != 3 || l != 4 {
		t.Fatalf("usage %v limit %v, want 3 and 4", u, l)
	}
	bh.Release(true)
	if u, _ := collect(t, reader).point(t, staggerotel.LimiterUsageName, name("db")); u != 2 {
		t.Fatalf("usage %v after a release, want 2", u)
	}
}

type failingLag struct{}

func (failingLag) Lag(context.Context) (time.Duration, error) { return 0, errors.New("store down") }

func TestObserveQueue(t *testing.T) {
	meter, reader := gaugeSetup(t)
	ctx := context.Background()
	clock := queuetest.NewClock(queuetest.Start)
	q, _ := queue.New(queue.NewMemoryStore(), queue.Config{Now: clock.Now})
	if _, err := staggerotel.ObserveQueue(meter, "mail", q); err != nil {
		t.Fatal(err)
	}
	if v, ok := collect(t, reader).point(t, staggerotel.QueueLagName, name("mail")); !ok || v != 0 {
		t.Fatalf("lag of an empty queue %v (%v), want 0", v, ok)
	}
	q.Enqueue(ctx, queue.NewJob{ID: "j1"})
	clock.Advance(2500)
	if v, _ := collect(t, reader).point(t, staggerotel.QueueLagName, name("mail")); v != 2.5 {
		t.Fatalf("lag %v s, want 2.5", v)
	}
	// A store that fails reports nothing for that queue; others go on.
	if _, err := staggerotel.ObserveQueue(meter, "down", failingLag{}); err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	reader.Collect(ctx, &rm) // the SDK passes the callback's error on
	c := collected{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			c[m.Name] = m.Data
		}
	}
	if _, ok := c.point(t, staggerotel.QueueLagName, name("down")); ok {
		t.Fatal("a failed lag query was reported")
	}
	if v, ok := c.point(t, staggerotel.QueueLagName, name("mail")); !ok || v != 2.5 {
		t.Fatalf("the healthy queue's lag %v (%v), want 2.5", v, ok)
	}
}

func TestObserveBadInput(t *testing.T) {
	meter, _ := gaugeSetup(t)
	for what, err := range map[string]error{
		"nil meter":   func() error { _, err := staggerotel.ObserveBudget(nil, "x", &budget.TokenBucket{}); return err }(),
		"nil budget":  func() error { _, err := staggerotel.ObserveBudget(meter, "x", nil); return err }(),
		"nil breaker": func() error { _, err := staggerotel.ObserveBreaker(meter, "x", nil); return err }(),
		"nil limiter": func() error { _, err := staggerotel.ObserveLimiter(meter, "x", nil); return err }(),
		"nil queue":   func() error { _, err := staggerotel.ObserveQueue(meter, "x", nil); return err }(),
	} {
		if err == nil || !strings.Contains(err.Error(), "staggerotel: Observe") {
			t.Errorf("%s: err %v, want one naming the function", what, err)
		}
	}
}

// Metrics.Budget keeps a circuit breaker a budget.Circuit, so a refusal
// through the counting wrapper still gives up with CircuitOpen.
func TestCountingBudgetKeepsCircuitReason(t *testing.T) {
	m, _ := setup(t)
	cb, _ := budget.NewCircuitBreaker(budget.CircuitConfig{MinCalls: 1, CoolDown: time.Hour})
	p := &retry.Policy{MaxAttempts: 5, Schedule: backoff.Constant(0), Budget: m.Budget("cb", cb)}
	err := retry.Do(context.Background(), p, func(context.Context) error { return retry.Retryable(errors.New("down")) })
	if !errors.Is(err, retry.ErrCircuitOpen) {
		t.Fatalf("err %v, want circuit-open through the counting wrapper", err)
	}
}

// Collections while the budget, breaker and limiter are in use (-race).
func TestGaugesConcurrent(t *testing.T) {
	m, reader := setup(t)
	meter := m.Meter()
	tb := &budget.TokenBucket{}
	cb, _ := budget.NewCircuitBreaker(budget.CircuitConfig{MinCalls: 5})
	bh, _ := limit.NewBulkhead(2)
	staggerotel.ObserveBudget(meter, "x", tb)
	staggerotel.ObserveBreaker(meter, "x", cb)
	staggerotel.ObserveLimiter(meter, "x", bh)
	p := &retry.Policy{MaxAttempts: 3, Schedule: backoff.Constant(0), Budget: cb.Guard(tb), Limiter: bh, Hooks: m.Hooks("x")}
	var attempts atomic.Int64
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				retry.Do(context.Background(), p, func(context.Context) error {
					attempts.Add(1)
					if (i+w)%4 == 0 {
						return retry.Retryable(errors.New("down"))
					}
					return nil
				})
			}
		}()
	}
	for range 50 {
		c := collect(t, reader)
		if v, ok := c.point(t, staggerotel.BudgetLevelName, name("x")); !ok || v < 0 || v > 1 {
			t.Fatalf("level %v (%v)", v, ok)
		}
		if u, _ := c.point(t, staggerotel.LimiterUsageName, name("x")); u < 0 || u > 2 {
			t.Fatalf("usage %v outside [0, 2]", u)
		}
	}
	wg.Wait()
	if got, want := collect(t, reader).sum(t, "stagger.attempts", name("x")), attempts.Load(); got != want {
		t.Fatalf("stagger.attempts %d, want the %d attempts made", got, want)
	}
}

// Gauges read the budget, breaker, limiter and queue at each collection;
// nothing is recorded on the retry path.
func ExampleObserveBudget() {
	reader := sdkmetric.NewManualReader() // in production: a periodic reader and an exporter
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	meter := mp.Meter(staggerotel.ScopeName)

	tb := &budget.TokenBucket{} // full: 200 credits
	cb, _ := budget.NewCircuitBreaker(budget.CircuitConfig{})
	bulkhead, _ := limit.NewBulkhead(8)
	staggerotel.ObserveBudget(meter, "payments", tb)
	staggerotel.ObserveBreaker(meter, "payments", cb)
	staggerotel.ObserveLimiter(meter, "payments", bulkhead)

	tb.Retry(time.Now()) // spends 10
	bulkhead.TryAcquire()

	var rm metricdata.ResourceMetrics
	reader.Collect(context.Background(), &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		switch d := m.Data.(type) {
		case metricdata.Gauge[float64]:
			fmt.Println(m.Name, d.DataPoints[0].Value)
		case metricdata.Gauge[int64]:
			for _, p := range d.DataPoints {
				if p.Value == 1 {
					s, _ := p.Attributes.Value(staggerotel.KeyState)
					fmt.Println(m.Name, s.AsString())
				}
			}
		case metricdata.Sum[int64]:
			fmt.Println(m.Name, d.DataPoints[0].Value)
		}
	}
	// Output:
	// stagger.budget.level 0.95
	// stagger.breaker.state closed
	// stagger.limiter.usage 1
	// stagger.limiter.limit 8
}

// Hooks made twice for one name count into the same series, and a reason
// the package does not know yet is still counted under its name.
func TestHooksSameNameShareCounts(t *testing.T) {
	m, reader := setup(t)
	h1, h2 := m.Hooks("a"), m.Hooks("a")
	h1.OnAttempt(retry.Event{Attempt: 1})
	h2.OnAttempt(retry.Event{Attempt: 1})
	h2.OnGiveUp(retry.Event{Attempt: 1, Reason: retry.Reason(200)})
	c := collect(t, reader)
	if got := c.sum(t, "stagger.attempts", name("a")); got != 2 {
		t.Fatalf("attempts %d, want 2 in one series", got)
	}
	if got := c.sum(t, "stagger.giveups", name("a"), staggerotel.KeyReason.String("Reason(200)")); got != 1 {
		t.Fatalf("give-ups with an unknown reason %d, want 1", got)
	}
	if d, ok := c["stagger.attempts"].(metricdata.Sum[int64]); !ok || len(d.DataPoints) != 1 || !d.IsMonotonic {
		t.Fatalf("stagger.attempts %#v, want one monotonic series", c["stagger.attempts"])
	}
}
