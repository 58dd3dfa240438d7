package staggerotel_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/budget"
	staggerotel "github.com/staggerhq/stagger/contrib/otel"
	"github.com/staggerhq/stagger/limit"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retryhttp"
)

func setup(t *testing.T) (*staggerotel.Metrics, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	m, err := staggerotel.New(mp)
	if err != nil {
		t.Fatal(err)
	}
	return m, reader
}

// collected holds one collection: metric name → data.
type collected map[string]metricdata.Aggregation

func collect(t *testing.T, r *sdkmetric.ManualReader) collected {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	c := collected{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != staggerotel.ScopeName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, staggerotel.ScopeName)
		}
		for _, m := range sm.Metrics {
			c[m.Name] = m.Data
		}
	}
	return c
}

// sum returns the int64 sum of metric name over points whose attributes
// include every kv given.
func (c collected) sum(t *testing.T, name string, kv ...attribute.KeyValue) int64 {
	t.Helper()
	var total int64
	switch d := c[name].(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			if hasAll(p.Attributes, kv) {
				total += p.Value
			}
		}
	case nil:
		return 0
	default:
		t.Fatalf("%s is %T", name, d)
	}
	return total
}

func hasAll(s attribute.Set, kv []attribute.KeyValue) bool {
	for _, want := range kv {
		if v, ok := s.Value(want.Key); !ok || v != want.Value {
			return false
		}
	}
	return true
}

var name = staggerotel.KeyName.String

func TestRetryLoopMetrics(t *testing.T) {
	m, reader := setup(t)
	p := &retry.Policy{MaxAttempts: 4, Schedule: backoff.Sequence{10 * time.Millisecond, 20 * time.Millisecond, 30 * time.Millisecond},
		Clock: newFakeClock(), Hooks: m.Hooks("orders")}
	errDown := errors.New("down")
	// 1: fails twice then succeeds. 2: exhausted (4 attempts). 3: permanent.
	calls := 0
	if err := retry.Do(context.Background(), p, func(context.Context) error {
		calls++
		if calls < 3 {
			return retry.Retryable(errDown)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	retry.Do(context.Background(), p, func(context.Context) error { return retry.Retryable(errDown) })
	retry.Do(context.Background(), p, func(context.Context) error { return retry.Permanent(errDown) })

	c := collect(t, reader)
	checks := []struct {
		metric string
		kv     []attribute.KeyValue
		want   int64
	}{
		{"stagger.attempts", []attribute.KeyValue{name("orders")}, 3 + 4 + 1},
		{"stagger.retries", []attribute.KeyValue{name("orders")}, 2 + 3},
		{"stagger.successes", []attribute.KeyValue{name("orders")}, 1},
		{"stagger.giveups", []attribute.KeyValue{name("orders"), staggerotel.KeyReason.String("exhausted")}, 1},
		{"stagger.giveups", []attribute.KeyValue{name("orders"), staggerotel.KeyReason.String("permanent")}, 1},
		{"stagger.giveups", []attribute.KeyValue{name("orders")}, 2},
	}
	for _, ch := range checks {
		if got := c.sum(t, ch.metric, ch.kv...); got != ch.want {
			t.Errorf("%s %v = %d, want %d", ch.metric, ch.kv, got, ch.want)
		}
	}
	h, ok := c["stagger.retry.delay"].(metricdata.Histogram[float64])
	if !ok || len(h.DataPoints) != 1 {
		t.Fatalf("delay histogram: %#v", c["stagger.retry.delay"])
	}
	dp := h.DataPoints[0]
	// Delays: 10ms, 20ms (call 1) and 10, 20, 30 ms (call 2).
	if dp.Count != 5 || !near(dp.Sum, 0.090) {
		t.Errorf("delay histogram count %d sum %v, want 5 and 0.090 s", dp.Count, dp.Sum)
	}
	if mn, _ := dp.Min.Value(); !near(mn, 0.010) {
		t.Errorf("min delay %v, want 0.010", mn)
	}
	if mx, _ := dp.Max.Value(); !near(mx, 0.030) {
		t.Errorf("max delay %v, want 0.030", mx)
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

func TestBudgetAndLimiterMetrics(t *testing.T) {
	m, reader := setup(t)
	b := m.Budget("payments", &budget.TokenBucket{Initial: 20})
	bulkhead, _ := limit.NewBulkhead(1)
	l := m.Limiter("payments", bulkhead)
	p := &retry.Policy{MaxAttempts: 10, Schedule: backoff.Constant(0), Budget: b, Limiter: l, Hooks: m.Hooks("payments")}
	errDown := errors.New("down")
	// 20 + 1 credits: two retries, then the budget refuses.
	err := retry.Do(context.Background(), p, func(context.Context) error { return retry.Retryable(errDown) })
	if !errors.Is(err, retry.ErrBudget) {
		t.Fatalf("err = %v, want a budget give-up", err)
	}
	// Hold the only slot: the next operation is refused.
	if !l.TryAcquire() {
		t.Fatal("slot not free")
	}
	if err := retry.Do(context.Background(), p, func(context.Context) error { return nil }); !errors.Is(err, limit.ErrLimited) {
		t.Fatalf("err = %v, want ErrLimited", err)
	}

	c := collect(t, reader)
	kind := staggerotel.KeyKind.String
	allowed := staggerotel.KeyAllowed.Bool
	checks := []struct {
		metric string
		kv     []attribute.KeyValue
		want   int64
	}{
		{"stagger.budget.decisions", []attribute.KeyValue{name("payments"), kind("request"), allowed(true)}, 1},
		{"stagger.budget.decisions", []attribute.KeyValue{name("payments"), kind("retry"), allowed(true)}, 2},
		{"stagger.budget.decisions", []attribute.KeyValue{name("payments"), kind("retry"), allowed(false)}, 1},
		{"stagger.limiter.rejections", []attribute.KeyValue{name("payments")}, 1},
		{"stagger.limiter.inflight", []attribute.KeyValue{name("payments")}, 1}, // the slot still held
		{"stagger.giveups", []attribute.KeyValue{name("payments"), staggerotel.KeyReason.String("budget")}, 1},
		{"stagger.giveups", []attribute.KeyValue{name("payments"), staggerotel.KeyReason.String("limited")}, 1},
		{"stagger.attempts", []attribute.KeyValue{name("payments")}, 3},
	}
	for _, ch := range checks {
		if got := c.sum(t, ch.metric, ch.kv...); got != ch.want {
			t.Errorf("%s %v = %d, want %d", ch.metric, ch.kv, got, ch.want)
		}
	}
	l.Release(true)
	if got := collect(t, reader).sum(t, "stagger.limiter.inflight", name("payments")); got != 0 {
		t.Errorf("in flight after release = %d, want 0", got)
	}
}

// retryhttp: the Transport's policy hooks and a Guard observed on the server.
func TestHTTPMetrics(t *testing.T) {
	m, reader := setup(t)
	var calls atomic.Int64
	guard := &retryhttp.Guard{Next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok")
	})}
	reg, err := m.ObserveGuard("api", guard)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Unregister()
	srv := httptest.NewServer(guard)
	defer srv.Close()
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	tr := retryhttp.New(base, &retry.Policy{MaxAttempts: 3, Schedule: backoff.Constant(0), Hooks: m.Hooks("api-client")})
	tr.NewBudget = func(host string) budget.Budget { return m.Budget(host, &budget.TokenBucket{Initial: 200}) }
	resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	host := srv.Listener.Addr().String()
	c := collect(t, reader)
	attempt := staggerotel.KeyAttempt.String
	checks := []struct {
		metric string
		kv     []attribute.KeyValue
		want   int64
	}{
		{"stagger.attempts", []attribute.KeyValue{name("api-client")}, 3},
		{"stagger.retries", []attribute.KeyValue{name("api-client")}, 2},
		{"stagger.successes", []attribute.KeyValue{name("api-client")}, 1},
		{"stagger.budget.decisions", []attribute.KeyValue{name(host), staggerotel.KeyKind.String("retry")}, 2},
		{"stagger.guard.requests", []attribute.KeyValue{name("api"), attempt("1")}, 1},
		{"stagger.guard.requests", []attribute.KeyValue{name("api"), attempt("2")}, 1},
		{"stagger.guard.requests", []attribute.KeyValue{name("api"), attempt("3")}, 1},
		{"stagger.guard.requests", []attribute.KeyValue{name("api"), attempt("none")}, 0},
		{"stagger.guard.shed", []attribute.KeyValue{name("api")}, 0},
	}
	for _, ch := range checks {
		if got := c.sum(t, ch.metric, ch.kv...); got != ch.want {
			t.Errorf("%s %v = %d, want %d", ch.metric, ch.kv, got, ch.want)
		}
	}
}

// TestWrapNil: wrapping no budget or no limiter gives none, not a wrapper
// that panics on first use (retryhttp's NewBudget may return nil).
func TestWrapNil(t *testing.T) {
	m, _ := setup(t)
	if b := m.Budget("x", nil); b != nil {
		t.Errorf("Budget(nil) = %#v, want nil", b)
	}
	if l := m.Limiter("x", nil); l != nil {
		t.Errorf("Limiter(nil) = %#v, want nil", l)
	}
	tr := retryhttp.New(http.DefaultTransport, &retry.Policy{MaxAttempts: 1})
	tr.NewBudget = func(host string) budget.Budget { return m.Budget(host, nil) }
	tr.NewLimiter = func(host string) limit.Limiter { return m.Limiter(host, nil) }
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

func TestNewNil(t *testing.T) {
	if _, err := staggerotel.New(nil); err == nil {
		t.Error("New(nil) succeeded")
	}
}

// fakeClock fires timers at once and advances its time by their duration.
type fakeClock struct{ now atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.now.Store(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *fakeClock) Now() time.Time { return time.Unix(0, c.now.Load()) }
func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	ch <- time.Unix(0, c.now.Add(int64(d)))
	return ch
}

func BenchmarkHooks(b *testing.B) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	m, _ := staggerotel.New(mp)
	h := m.Hooks("bench")
	e := retry.Event{Attempt: 1, Delay: 10 * time.Millisecond}
	b.ReportAllocs()
	for b.Loop() {
		h.OnAttempt(e)
		h.OnRetry(e)
	}
}

// TestHTTPClientDuration: each logical request through a retryhttp
// Transport (a success after two 503s, then a give-up on 503s) is one
// http.client.request.duration point, with the conventions' attributes
// of the answer handed to the caller, and no url.full.
func TestHTTPClientDuration(t *testing.T) {
	m, reader := setup(t)
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/down" || n.Add(1) <= 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	p := &retry.Policy{MaxAttempts: 3, Schedule: backoff.Constant(0), Hooks: m.Hooks("api")}
	rt, err := m.Transport(retryhttp.New(nil, p))
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: rt}
	for _, path := range []string{"/ok", "/down"} {
		resp, err := client.Get(srv.URL + path + "?token=x")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	c := collect(t, reader)
	h, ok := c["http.client.request.duration"].(metricdata.Histogram[float64])
	if !ok || len(h.DataPoints) != 2 {
		t.Fatalf("duration histogram: %#v", c["http.client.request.duration"])
	}
	byCode := map[int64]metricdata.HistogramDataPoint[float64]{}
	for _, dp := range h.DataPoints {
		code, _ := dp.Attributes.Value("http.response.status_code")
		byCode[code.AsInt64()] = dp
		if _, has := dp.Attributes.Value("url.full"); has {
			t.Error("url.full on a metric")
		}
		if m, _ := dp.Attributes.Value("http.request.method"); m.AsString() != "GET" || dp.Count != 1 {
			t.Errorf("point %v: count %d", dp.Attributes, dp.Count)
		}
	}
	down, up := byCode[503], byCode[200]
	if et, _ := down.Attributes.Value("error.type"); et.AsString() != "503" {
		t.Errorf("the give-up's error.type %q", et.AsString())
	}
	if _, has := up.Attributes.Value("error.type"); has || up.Count != 1 {
		t.Errorf("the success: %v", up.Attributes)
	}
	if got := c.sum(t, "stagger.attempts", name("api")); got != 3+3 {
		t.Errorf("attempts %d, want 6", got)
	}
}

// TestHTTPServerDuration: each request a Guard-ed handler serves is one
// http.server.request.duration point, by status; a 5xx has error.type.
func TestHTTPServerDuration(t *testing.T) {
	m, reader := setup(t)
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/down" {
			w.WriteHeader(http.StatusBadGateway)
		}
	})
	h, err := m.Server(&retryhttp.Guard{Next: app})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	for _, path := range []string{"/a", "/b", "/down"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	srv.Close()
	hist, ok := collect(t, reader)["http.server.request.duration"].(metricdata.Histogram[float64])
	if !ok || len(hist.DataPoints) != 2 {
		t.Fatalf("duration histogram: %#v", hist)
	}
	for _, dp := range hist.DataPoints {
		code, _ := dp.Attributes.Value("http.response.status_code")
		et, hasET := dp.Attributes.Value("error.type")
		switch code.AsInt64() {
		case 200:
			if dp.Count != 2 || hasET {
				t.Errorf("200: count %d, error.type %v", dp.Count, hasET)
			}
		case 502:
			if dp.Count != 1 || et.AsString() != "502" {
				t.Errorf("502: count %d, error.type %q", dp.Count, et.AsString())
			}
		default:
			t.Errorf("status %d", code.AsInt64())
		}
	}
}
