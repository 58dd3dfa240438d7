package staggerotel_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

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
