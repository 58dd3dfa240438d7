package staggerotel

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/budget"
	"github.com/staggerhq/stagger/retry"
)

func newTracer(t *testing.T) (*Tracer, *tracetest.SpanRecorder, trace.Tracer) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tr, err := NewTracer(tp)
	if err != nil {
		t.Fatal(err)
	}
	return tr, rec, tp.Tracer("test")
}

func attr(s sdktrace.ReadOnlySpan, k attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

var errFlaky = retry.Retryable(errors.New("flaky"))

// TestTracerSpanPerAttempt: two failures then a success make three spans,
// children of the caller's span, numbered 1..3; the failed ones carry the
// decided delay and the error; fn's context carries its attempt's span.
func TestTracerSpanPerAttempt(t *testing.T) {
	tr, rec, test := newTracer(t)
	ctx, parent := test.Start(context.Background(), "caller")
	p := &retry.Policy{MaxAttempts: 5, Schedule: backoff.Constant(time.Millisecond)}
	var seen []trace.SpanID
	calls := 0
	err := tr.Do(ctx, p, "payments", func(ctx context.Context) error {
		seen = append(seen, trace.SpanFromContext(ctx).SpanContext().SpanID())
		if calls++; calls < 3 {
			return errFlaky
		}
		return nil
	})
	parent.End()
	if err != nil {
		t.Fatal(err)
	}
	spans := rec.Ended()
	if len(spans) != 4 { // three attempts and the caller's
		t.Fatalf("%d spans, want 3 attempts + the caller", len(spans))
	}
	for i, s := range spans[:3] {
		if s.Name() != "payments" || s.Parent().SpanID() != parent.SpanContext().SpanID() || s.SpanContext().SpanID() != seen[i] {
			t.Errorf("span %d: %q, parent %v (want %v), fn saw %v", i, s.Name(), s.Parent().SpanID(), parent.SpanContext().SpanID(), seen[i])
		}
		if n, _ := attr(s, KeyAttemptNumber); n.AsInt64() != int64(i+1) {
			t.Errorf("span %d: attempt %v", i, n.AsInt64())
		}
		d, hasDelay := attr(s, KeyDelay)
		if i < 2 && (!hasDelay || d.AsFloat64() != 0.001 || len(s.Events()) != 1 || s.Events()[0].Name != "exception") {
			t.Errorf("failed attempt %d: delay %v (%v), events %v", i+1, d.AsFloat64(), hasDelay, s.Events())
		}
		if w, _ := attr(s, KeyWillRetry); i < 2 && (!w.AsBool() || s.Status().Code != codes.Unset) {
			t.Errorf("retried attempt %d: will_retry %v, status %v", i+1, w.AsBool(), s.Status())
		}
		if i == 2 && (hasDelay || s.Status().Code != codes.Unset) {
			t.Errorf("the successful attempt: delay %v, status %v", hasDelay, s.Status())
		}
	}
}

// TestTracerGiveUp: the last attempt's span says why the loop stopped; an
// original the circuit breaker refused gets a span of its own, with no
// length, and fn never runs.
func TestTracerGiveUp(t *testing.T) {
	tr, rec, _ := newTracer(t)
	cb, _ := budget.NewCircuitBreaker(budget.CircuitConfig{MinCalls: 2, CoolDown: time.Hour})
	var hooked []retry.Reason
	p := &retry.Policy{MaxAttempts: 2, Schedule: backoff.Constant(0), Budget: cb,
		Hooks: retry.Hooks{OnGiveUp: func(e retry.Event) { hooked = append(hooked, e.Reason) }}}
	err := tr.Do(context.Background(), p, "db", func(context.Context) error { return errFlaky })
	if !errors.Is(err, retry.ErrExhausted) {
		t.Fatalf("first call: %v", err)
	}
	err = tr.Do(context.Background(), p, "db", func(context.Context) error { t.Fatal("ran against an open circuit"); return nil })
	if !errors.Is(err, retry.ErrCircuitOpen) {
		t.Fatalf("second call: %v", err)
	}
	spans := rec.Ended()
	if len(spans) != 3 {
		t.Fatalf("%d spans, want 2 attempts + 1 refusal", len(spans))
	}
	for i, want := range []struct {
		attempt int64
		reason  string
	}{{1, ""}, {2, "exhausted"}, {1, "circuit-open"}} {
		s := spans[i]
		n, _ := attr(s, KeyAttemptNumber)
		r, _ := attr(s, KeyReason)
		if n.AsInt64() != want.attempt || r.AsString() != want.reason {
			t.Errorf("span %d: attempt %d reason %q, want %d %q", i, n.AsInt64(), r.AsString(), want.attempt, want.reason)
		}
		if want.reason != "" && s.Status().Code != codes.Error {
			t.Errorf("span %d: status %v", i, s.Status())
		}
	}
	if !spans[2].EndTime().Equal(spans[2].StartTime()) && spans[2].EndTime().Sub(spans[2].StartTime()) > time.Second {
		t.Errorf("the refusal's span lasted %v", spans[2].EndTime().Sub(spans[2].StartTime()))
	}
	if len(hooked) != 2 || hooked[1] != retry.CircuitOpen {
		t.Errorf("the policy's own hooks saw %v", hooked)
	}
	if p.Hooks.OnRetry != nil || p.Hooks.OnAttempt != nil {
		t.Error("Do changed the caller's policy")
	}
}

func TestNewTracerNil(t *testing.T) {
	if _, err := NewTracer(nil); err == nil {
		t.Fatal("NewTracer(nil) must fail")
	}
}

// BenchmarkTracerDo: one succeeding call with a span, on a recording SDK
// tracer provider that samples nothing (what tracing costs a loop when the
// trace is not kept).
func BenchmarkTracerDo(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	tr, _ := NewTracer(tp)
	p := &retry.Policy{MaxAttempts: 3}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := tr.Do(ctx, p, "op", func(context.Context) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
}

// TestCircuitStateChanges: the callback counts each change by the state
// entered.
func TestCircuitStateChanges(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	m, err := New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	if err != nil {
		t.Fatal(err)
	}
	onChange, err := m.CircuitStateChanges("db")
	if err != nil {
		t.Fatal(err)
	}
	cb, _ := budget.NewCircuitBreaker(budget.CircuitConfig{MinCalls: 1, CoolDown: time.Second, OnStateChange: onChange})
	t0 := time.Now()
	cb.Result(t0, false)                  // → open
	cb.Request(t0.Add(time.Second))       // → half-open
	cb.Result(t0.Add(time.Second), false) // → open
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			if mt.Name != "stagger.circuit.changes" {
				continue
			}
			for _, dp := range mt.Data.(metricdata.Sum[int64]).DataPoints {
				st, _ := dp.Attributes.Value(KeyState)
				name, _ := dp.Attributes.Value(KeyName)
				if name.AsString() != "db" {
					t.Errorf("name %q", name.AsString())
				}
				got[st.AsString()] = dp.Value
			}
		}
	}
	if got["open"] != 2 || got["half-open"] != 1 || got["closed"] != 0 {
		t.Fatalf("changes by state: %v", got)
	}
}
