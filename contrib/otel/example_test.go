package staggerotel_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/budget"
	staggerotel "github.com/staggerhq/stagger/contrib/otel"
	"github.com/staggerhq/stagger/retry"
)

func ExampleMetrics_Hooks() {
	reader := sdkmetric.NewManualReader() // in production: a periodic reader and an exporter
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	m, _ := staggerotel.New(mp)

	policy := &retry.Policy{
		MaxAttempts: 5,
		Schedule:    backoff.Constant(0),
		Hooks:       m.Hooks("inventory"),
		Budget:      m.Budget("inventory", &budget.TokenBucket{Initial: 20}), // two retries' worth
	}
	err := retry.Do(context.Background(), policy, func(context.Context) error {
		return retry.Retryable(errors.New("unavailable"))
	})
	fmt.Println(err)

	var rm metricdata.ResourceMetrics
	reader.Collect(context.Background(), &rm)
	var lines []string
	for _, mt := range rm.ScopeMetrics[0].Metrics {
		if s, ok := mt.Data.(metricdata.Sum[int64]); ok {
			var total int64
			for _, p := range s.DataPoints {
				total += p.Value
			}
			lines = append(lines, fmt.Sprint(mt.Name, " ", total))
		}
	}
	sort.Strings(lines)
	fmt.Println(strings.Join(lines, "\n"))
	// Output:
	// retry: gave up (budget) after 3 attempts: unavailable
	// stagger.attempts 3
	// stagger.budget.decisions 4
	// stagger.giveups 1
	// stagger.retries 2
}

// A span per attempt, each a child of the caller's span: two failures,
// then a success.
func ExampleTracer_Do() {
	rec := tracetest.NewSpanRecorder() // in production: a batch span processor and an exporter
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	tr, _ := staggerotel.NewTracer(tp)

	calls := 0
	policy := &retry.Policy{MaxAttempts: 5, Schedule: backoff.Constant(0)}
	err := tr.Do(context.Background(), policy, "inventory", func(context.Context) error {
		if calls++; calls < 3 {
			return retry.Retryable(errors.New("unavailable"))
		}
		return nil
	})
	fmt.Println(err)
	for _, s := range rec.Ended() {
		var attrs []string
		for _, kv := range s.Attributes() {
			attrs = append(attrs, fmt.Sprintf("%s=%s", kv.Key, kv.Value.String()))
		}
		fmt.Println(s.Name(), strings.Join(attrs, " "), s.Status().Code)
	}
	// Output:
	// <nil>
	// inventory stagger.name=inventory stagger.attempt.number=1 stagger.retry.delay=0 stagger.retry.will_retry=true Unset
	// inventory stagger.name=inventory stagger.attempt.number=2 stagger.retry.delay=0 stagger.retry.will_retry=true Unset
	// inventory stagger.name=inventory stagger.attempt.number=3 Unset
}
