package staggerotel_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/staggerhq/stagger/backoff"
	staggerotel "github.com/staggerhq/stagger/contrib/otel"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retryhttp"
)

// A GET that fails once (503) and then succeeds: a client span for the
// request, one per attempt (the retried one Unset with will_retry, the
// resend with http.request.resend_count) and a server span per attempt.
func ExampleTracer_Transport() {
	rec := tracetest.NewSpanRecorder() // in production: a batch span processor and an exporter
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	tr, _ := staggerotel.NewTracer(tp)

	var calls atomic.Int64
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	srv := httptest.NewServer(tr.Server(&retryhttp.Guard{Next: app}))
	policy := &retry.Policy{MaxAttempts: 3, Schedule: backoff.Constant(0)}
	client := &http.Client{Transport: tr.Transport(retryhttp.New(nil, policy))}
	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	srv.Close()

	for _, s := range rec.Ended() {
		line := fmt.Sprint(s.SpanKind(), " ", s.Name())
		for _, kv := range s.Attributes() {
			switch kv.Key {
			case "http.response.status_code", "http.request.resend_count", "stagger.attempt.number",
				"stagger.retry.will_retry", "stagger.attempt.count":
				line += fmt.Sprintf(" %s=%s", kv.Key, kv.Value.String())
			}
		}
		fmt.Println(line, s.Status().Code)
	}
	// Output:
	// server GET stagger.attempt.number=1 http.response.status_code=503 Error
	// client GET stagger.attempt.number=1 http.response.status_code=503 stagger.retry.will_retry=true Unset
	// server GET stagger.attempt.number=2 http.response.status_code=200 Unset
	// client GET stagger.attempt.number=2 http.request.resend_count=1 http.response.status_code=200 Unset
	// client GET http.response.status_code=200 stagger.attempt.count=2 Unset
}
