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
