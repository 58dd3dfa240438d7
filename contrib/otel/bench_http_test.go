package staggerotel_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	staggerotel "github.com/staggerhq/stagger/contrib/otel"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retryhttp"
)

// dropProcessor ends spans into nothing.
type dropProcessor struct{ sdktrace.SpanProcessor }

func (dropProcessor) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (dropProcessor) OnEnd(sdktrace.ReadOnlySpan)                     {}
func (dropProcessor) Shutdown(context.Context) error                  { return nil }
func (dropProcessor) ForceFlush(context.Context) error                { return nil }

func benchProvider() *sdktrace.TracerProvider {
	return sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(dropProcessor{}))
}

// benchGet sends b.N GETs through rt to a loopback server and reads each
// body to the end.
func benchGet(b *testing.B, rt http.RoundTripper) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	defer srv.Close()
	client := &http.Client{Transport: rt}
	b.ReportAllocs()
	for b.Loop() {
		resp, err := client.Get(srv.URL + "/items/7")
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

func newBase() *http.Transport { return http.DefaultTransport.(*http.Transport).Clone() }

// BenchmarkLoopbackGet compares, on one loopback GET that succeeds first
// time: a plain http.Transport; otelhttp's client instrumentation on it;
// retryhttp without tracing; retryhttp with Tracer.Transport (a request
// span and an attempt span, trace context injected), all spans sampled.
func BenchmarkLoopbackGet(b *testing.B) {
	p := &retry.Policy{MaxAttempts: 3}
	b.Run("plain", func(b *testing.B) { benchGet(b, newBase()) })
	b.Run("otelhttp", func(b *testing.B) {
		benchGet(b, otelhttp.NewTransport(newBase(), otelhttp.WithTracerProvider(benchProvider()),
			otelhttp.WithPropagators(propagation.TraceContext{})))
	})
	b.Run("retryhttp", func(b *testing.B) { benchGet(b, retryhttp.New(newBase(), p)) })
	b.Run("retryhttp+tracing", func(b *testing.B) {
		tr, _ := staggerotel.NewTracer(benchProvider())
		benchGet(b, tr.Transport(retryhttp.New(newBase(), p)))
	})
	b.Run("retryhttp+otelhttp", func(b *testing.B) {
		// otelhttp as retryhttp's Base: its span per attempt, no request span.
		benchGet(b, retryhttp.New(otelhttp.NewTransport(newBase(), otelhttp.WithTracerProvider(benchProvider()),
			otelhttp.WithPropagators(propagation.TraceContext{})), p))
	})
}

// canned answers every request with 200 and an empty body, without a
// network: what is left is the layers' own cost.
type canned struct{}

func (canned) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
}

func benchRT(b *testing.B, rt http.RoundTripper) {
	req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:8080/items/7", nil)
	b.ReportAllocs()
	for b.Loop() {
		resp, err := rt.RoundTrip(req)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
	}
}

// BenchmarkInstrumentation is BenchmarkLoopbackGet's layers over a
// transport that answers at once, so the numbers are the layers' cost
// alone: otelhttp's over nothing, and Tracer.Transport's over retryhttp.
func BenchmarkInstrumentation(b *testing.B) {
	p := &retry.Policy{MaxAttempts: 3}
	b.Run("otelhttp", func(b *testing.B) {
		benchRT(b, otelhttp.NewTransport(canned{}, otelhttp.WithTracerProvider(benchProvider()),
			otelhttp.WithPropagators(propagation.TraceContext{})))
	})
	b.Run("retryhttp", func(b *testing.B) { benchRT(b, retryhttp.New(canned{}, p)) })
	b.Run("retryhttp+tracing", func(b *testing.B) {
		tr, _ := staggerotel.NewTracer(benchProvider())
		benchRT(b, tr.Transport(retryhttp.New(canned{}, p)))
	})
}
