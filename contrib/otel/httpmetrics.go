package staggerotel

import (
	"net/http"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
)

// HTTPDurationBuckets are the bucket bounds (seconds) of
// http.client.request.duration, those the HTTP semantic conventions
// advise.
var HTTPDurationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}

// Transport wraps next (a retryhttp.Transport, or [Tracer.Transport]'s
// result) so that each logical request — all its attempts and waits —
// is measured in the histogram http.client.request.duration (seconds,
// from the call to the response's headers or the error), with the
// semantic conventions' attributes http.request.method, server.address,
// server.port, http.response.status_code (the answer handed to the
// caller) and error.type (its status from 400 on, or the transport
// error's type). The attempts themselves are counted by [Metrics.Hooks]
// on the transport's Policy (stagger.attempts, stagger.retries).
func (m *Metrics) Transport(next http.RoundTripper) (http.RoundTripper, error) {
	h, err := m.meter.Float64Histogram("http.client.request.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of HTTP client requests, each with all its attempts."),
		metric.WithExplicitBucketBoundaries(HTTPDurationBuckets...))
	if err != nil {
		return nil, err
	}
	return &meteredTransport{next: next, h: h}, nil
}

type meteredTransport struct {
	next http.RoundTripper
	h    metric.Float64Histogram
}

func (t *meteredTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := t.next.RoundTrip(req)
	d := time.Since(start).Seconds()
	kv := clientAttrs(req, 2, false) // no url.full: metric attributes are of low cardinality
	if err != nil {
		kv = append(kv, semconv.ErrorTypeKey.String(errorType(err)))
	} else {
		kv = append(kv, responseOutcome(resp).Attrs...)
	}
	t.h.Record(req.Context(), d, metric.WithAttributeSet(attribute.NewSet(kv...)))
	return resp, err
}

// Server wraps h (a retryhttp.Guard, or the handler behind one) so that
// each request is measured in the histogram http.server.request.duration
// (seconds, until h returns), with the semantic conventions' attributes
// http.request.method, url.scheme, http.response.status_code and
// error.type (a status of 500 or more). Put it outside the Guard, so
// shed requests are measured too; the Guard's own counts per attempt are
// [Metrics.ObserveGuard]'s.
func (m *Metrics) Server(h http.Handler) (http.Handler, error) {
	d, err := m.meter.Float64Histogram("http.server.request.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of HTTP server requests."),
		metric.WithExplicitBucketBoundaries(HTTPDurationBuckets...))
	if err != nil {
		return nil, err
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			code := sw.status()
			kv := make([]attribute.KeyValue, 0, 4)
			kv = append(kv, semconv.HTTPRequestMethodKey.String(method(r.Method)), semconv.URLScheme(scheme(r)),
				semconv.HTTPResponseStatusCode(code))
			if code >= 500 {
				kv = append(kv, semconv.ErrorTypeKey.String(strconv.Itoa(code)))
			}
			d.Record(r.Context(), time.Since(start).Seconds(), metric.WithAttributeSet(attribute.NewSet(kv...)))
		}()
		h.ServeHTTP(sw, r)
	}), nil
}
