package staggerotel_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/budget"
	staggerotel "github.com/staggerhq/stagger/contrib/otel"
	"github.com/staggerhq/stagger/limit"
	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retryhttp"
)

// dashboardPath is the Grafana dashboard shipped for these metrics.
const dashboardPath = "../grafana/stagger.json"

// emitted exercises every instrument of the package through the SDK's
// manual reader and returns the names a Prometheus exporter gives the
// series (metric → kind) and the label names it gives the attributes.
func emitted(t *testing.T) (series map[string]string, labels map[string]bool) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	m, err := staggerotel.New(mp)
	if err != nil {
		t.Fatal(err)
	}
	meter := mp.Meter(staggerotel.ScopeName)
	ctx := context.Background()

	onChange, err := m.CircuitStateChanges("x")
	if err != nil {
		t.Fatal(err)
	}
	cb, _ := budget.NewCircuitBreaker(budget.CircuitConfig{MinCalls: 3, CoolDown: time.Hour, OnStateChange: onChange})
	tb := &budget.TokenBucket{Initial: 10}
	bh, _ := limit.NewBulkhead(1)
	p := &retry.Policy{MaxAttempts: 3, Schedule: backoff.Constant(time.Millisecond),
		Hooks: m.Hooks("x"), Budget: m.Budget("x", cb.Guard(tb)), Limiter: m.Limiter("x", bh)}
	n := 0
	retry.Do(ctx, p, func(context.Context) error { // fails, retried, succeeds
		if n++; n == 1 {
			return retry.Retryable(errors.New("down"))
		}
		return nil
	})
	retry.Do(ctx, p, func(context.Context) error { return retry.Retryable(errors.New("down")) }) // opens the circuit: a give-up
	if bh.TryAcquire() {
		p.Limiter.TryAcquire() // refused: a rejection
		bh.Release(true)
	}
	guard := &retryhttp.Guard{Next: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})}
	req := httptest.NewRequest("GET", "/", nil)
	req.Header.Set(retryhttp.AttemptHeader, "2")
	guard.ServeHTTP(httptest.NewRecorder(), req)
	reg, err := m.ObserveGuard("x", guard)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Unregister()
	q, _ := queue.New(queue.NewMemoryStore(), queue.Config{})
	for _, err := range []error{
		func() error { _, err := staggerotel.ObserveBudget(meter, "x", tb); return err }(),
		func() error { _, err := staggerotel.ObserveBreaker(meter, "x", cb); return err }(),
		func() error { _, err := staggerotel.ObserveLimiter(meter, "x", bh); return err }(),
		func() error { _, err := staggerotel.ObserveQueue(meter, "x", q); return err }(),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	series, labels = map[string]string{}, map[string]bool{"le": true} // le: a histogram's bucket bound
	addLabels := func(s attribute.Set) {
		for _, kv := range s.ToSlice() {
			labels[promName(string(kv.Key))] = true
		}
	}
	for _, sm := range rm.ScopeMetrics {
		for _, md := range sm.Metrics {
			base := promName(md.Name)
			switch md.Unit {
			case "s":
				base += "_seconds"
			case "1":
				base += "_ratio"
			} // a unit in braces ({attempt}) is a count: no suffix
			switch d := md.Data.(type) {
			case metricdata.Sum[int64]:
				if d.IsMonotonic {
					series[base+"_total"] = "counter"
				} else {
					series[base] = "gauge"
				}
				for _, p := range d.DataPoints {
					addLabels(p.Attributes)
				}
			case metricdata.Gauge[int64]:
				series[base] = "gauge"
				for _, p := range d.DataPoints {
					addLabels(p.Attributes)
				}
			case metricdata.Gauge[float64]:
				series[base] = "gauge"
				for _, p := range d.DataPoints {
					addLabels(p.Attributes)
				}
			case metricdata.Histogram[float64]:
				for _, s := range []string{"_bucket", "_sum", "_count"} {
					series[base+s] = "histogram"
				}
				for _, p := range d.DataPoints {
					addLabels(p.Attributes)
				}
			default:
				t.Fatalf("%s: %T has no mapping to Prometheus here; add one", md.Name, d)
			}
		}
	}
	return series, labels
}

// promName is the Prometheus exporter's name for an OTel name or
// attribute key (the OpenTelemetry specification's Prometheus
// compatibility rules): every character outside [a-zA-Z0-9_:] becomes
// '_', and runs of '_' become one.
func promName(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == '_' || r == ':' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, s)
	for strings.Contains(s, "__") {
		s = strings.ReplaceAll(s, "__", "_")
	}
	return s
}

// queries returns every PromQL expression of the dashboard: the panels'
// targets (rows nest panels) and the template variables' queries.
func queries(t *testing.T, raw []byte) []string {
	var d struct {
		Panels     []json.RawMessage `json:"panels"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	type panel struct {
		ID      int               `json:"id"`
		Title   string            `json:"title"`
		Type    string            `json:"type"`
		Panels  []json.RawMessage `json:"panels"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	}
	var out []string
	ids := map[int]bool{}
	var walk func([]json.RawMessage)
	walk = func(ps []json.RawMessage) {
		for _, raw := range ps {
			var p panel
			if err := json.Unmarshal(raw, &p); err != nil {
				t.Fatal(err)
			}
			if ids[p.ID] {
				t.Errorf("panel id %d used twice", p.ID)
			}
			ids[p.ID] = true
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("panel %q queries nothing", p.Title)
			}
			for _, tg := range p.Targets {
				out = append(out, tg.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		out = append(out, v.Definition)
	}
	return out
}

var (
	promString = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	promIdent  = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	promLabel  = regexp.MustCompile(`^\s*(=~|!~|!=|=[^=])`)
)

// TestDashboardQueriesEmittedMetrics: every metric the Grafana dashboard
// queries is one the code emits (as the Prometheus exporter names it),
// every label it uses is an attribute the code sets, and the dashboard
// shows every gauge.
func TestDashboardQueriesEmittedMetrics(t *testing.T) {
	raw, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	series, labels := emitted(t)
	exprs := queries(t, raw)
	if len(exprs) < 10 {
		t.Fatalf("%d queries in the dashboard; the parse found too few", len(exprs))
	}
	used := map[string]bool{}
	for _, e := range exprs {
		e = promString.ReplaceAllString(e, `""`) // label values and regexes are not names
		for _, loc := range promIdent.FindAllStringIndex(e, -1) {
			tok := e[loc[0]:loc[1]]
			if !strings.HasPrefix(tok, "stagger") {
				continue // PromQL functions, keywords, le, Grafana's $variables
			}
			if loc[0] > 0 && e[loc[0]-1] == '$' {
				continue
			}
			asLabel := promLabel.MatchString(e[loc[1]:]) || labels[tok] && !strings.HasSuffix(tok, "_total")
			switch {
			case asLabel && labels[tok]:
			case asLabel:
				t.Errorf("label %s in %q is no attribute the code sets (labels: %v)", tok, e, keys(labels))
			case series[tok] != "":
				used[tok] = true
			default:
				t.Errorf("metric %s in %q is not emitted (emitted: %v)", tok, e, keys(series))
			}
		}
	}
	for _, g := range []string{"stagger_budget_level_ratio", "stagger_breaker_state", "stagger_limiter_usage",
		"stagger_limiter_limit", "stagger_queue_lag_seconds", "stagger_attempts_total", "stagger_giveups_total"} {
		if series[g] == "" {
			t.Errorf("%s is not emitted: the name mapping or the exercise is wrong", g)
		}
		if !used[g] {
			t.Errorf("the dashboard does not show %s", g)
		}
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// The test's parser finds a misspelt metric (a check that could fail).
func TestDashboardCheckCatchesUnknownMetric(t *testing.T) {
	series, labels := emitted(t)
	bad := `sum by (stagger_name) (rate(stagger_attempt_total{stagger_name=~"$name"}[5m]))`
	e := promString.ReplaceAllString(bad, `""`)
	var unknown []string
	for _, tok := range promIdent.FindAllString(e, -1) {
		if strings.HasPrefix(tok, "stagger") && series[tok] == "" && !labels[tok] {
			unknown = append(unknown, tok)
		}
	}
	if !slices.Equal(unknown, []string{"stagger_attempt_total"}) {
		t.Fatalf("unknown names %v, want [stagger_attempt_total]", unknown)
	}
}
