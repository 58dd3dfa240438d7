package staggerotel

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retryhttp"
)

// flakyServer answers 503 to the first fails requests and 200 after, on
// 127.0.0.1, behind a Guard, with tr's server spans.
func flakyServer(t *testing.T, tr *Tracer, fails int64) *httptest.Server {
	t.Helper()
	var n atomic.Int64
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) <= fails {
			http.Error(w, "unavailable", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok")
	})
	return httptest.NewServer(tr.Server(&retryhttp.Guard{Next: app}))
}

func str(s sdktrace.ReadOnlySpan, k attribute.Key) string { v, _ := attr(s, k); return v.String() }

func byKind(spans []sdktrace.ReadOnlySpan, k trace.SpanKind) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.SpanKind() == k {
			out = append(out, s)
		}
	}
	return out
}

// TestTransportSpans: a GET that fails twice (503) and then succeeds makes
// one client span for the request, three client spans for its attempts
// (its children, resend_count 1 and 2 on the resends, the two retried
// ones Unset with will_retry) and three server spans, each the child of
// its attempt's span, with the ledger's attempt number.
func TestTransportSpans(t *testing.T) {
	tr, rec, test := newTracer(t)
	srv := flakyServer(t, tr, 2)
	p := &retry.Policy{MaxAttempts: 5, Schedule: backoff.Constant(0)}
	client := &http.Client{Transport: tr.Transport(retryhttp.New(nil, p))}
	ctx, parent := test.Start(context.Background(), "checkout")
	u := strings.Replace(srv.URL, "http://", "http://user:hunter2@", 1) + "/items?id=7&token=s3cret"
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	srv.Close() // waits for the handlers, so the server spans have ended
	parent.End()
	if string(body) != "ok" {
		t.Fatalf("body %q", body)
	}

	spans := rec.Ended()
	clients := byKind(spans, trace.SpanKindClient)
	servers := byKind(spans, trace.SpanKindServer)
	if len(clients) != 4 || len(servers) != 3 {
		t.Fatalf("%d client spans, %d server spans; want 4 and 3", len(clients), len(servers))
	}
	logical := clients[3] // ends last, with the body
	if logical.Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Error("the request's span is not the caller's child")
	}
	host, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	for _, s := range clients {
		if s.Name() != "GET" || str(s, semconv.HTTPRequestMethodKey) != "GET" || str(s, semconv.ServerAddressKey) != host ||
			str(s, semconv.ServerPortKey) != port {
			t.Errorf("span %q: method %q address %q port %q", s.Name(), str(s, semconv.HTTPRequestMethodKey),
				str(s, semconv.ServerAddressKey), str(s, semconv.ServerPortKey))
		}
		full := str(s, semconv.URLFullKey)
		if strings.Contains(full, "hunter2") || strings.Contains(full, "s3cret") || !strings.Contains(full, "id=7") || !strings.Contains(full, "/items") {
			t.Errorf("url.full %q leaks a secret or lost the path", full)
		}
	}
	if str(logical, semconv.HTTPResponseStatusCodeKey) != "200" || str(logical, KeyAttemptCount) != "3" ||
		logical.Status().Code != codes.Unset || str(logical, semconv.ErrorTypeKey) != "" {
		t.Errorf("request span: status %s, attempts %s, %v, error.type %q", str(logical, semconv.HTTPResponseStatusCodeKey),
			str(logical, KeyAttemptCount), logical.Status(), str(logical, semconv.ErrorTypeKey))
	}
	for i, s := range clients[:3] {
		n := strconv.Itoa(i + 1)
		if s.Parent().SpanID() != logical.SpanContext().SpanID() {
			t.Errorf("attempt %d is not the request's child", i+1)
		}
		resend, hasResend := attr(s, semconv.HTTPRequestResendCountKey)
		if (i == 0) == hasResend || (i > 0 && resend.AsInt64() != int64(i)) {
			t.Errorf("attempt %d: resend_count %v (%v)", i+1, resend.AsInt64(), hasResend)
		}
		wantCode, wantRetry := "503", "true"
		if i == 2 {
			wantCode, wantRetry = "200", ""
		}
		if str(s, KeyAttemptNumber) != n || str(s, semconv.HTTPResponseStatusCodeKey) != wantCode ||
			str(s, KeyWillRetry) != wantRetry || s.Status().Code != codes.Unset {
			t.Errorf("attempt %d: number %s, status %s, will_retry %q, %v", i+1, str(s, KeyAttemptNumber),
				str(s, semconv.HTTPResponseStatusCodeKey), str(s, KeyWillRetry), s.Status())
		}
		if i < 2 && str(s, semconv.ErrorTypeKey) != "503" {
			t.Errorf("attempt %d: error.type %q", i+1, str(s, semconv.ErrorTypeKey))
		}
		srvSpan := servers[i]
		if srvSpan.Parent().SpanID() != s.SpanContext().SpanID() || !srvSpan.Parent().IsRemote() {
			t.Errorf("server span %d is not the child of attempt %d", i+1, i+1)
		}
		wantStatus := codes.Error // a 5xx answer
		if i == 2 {
			wantStatus = codes.Unset
		}
		if str(srvSpan, KeyAttemptNumber) != n || str(srvSpan, semconv.HTTPResponseStatusCodeKey) != wantCode ||
			srvSpan.Status().Code != wantStatus || str(srvSpan, semconv.URLPathKey) != "/items" ||
			str(srvSpan, KeyRequestID) == "" || str(srvSpan, KeyRequestID) != str(servers[0], KeyRequestID) {
			t.Errorf("server span %d: attempt %s, status %s, %v, path %q, request id %q", i+1, str(srvSpan, KeyAttemptNumber),
				str(srvSpan, semconv.HTTPResponseStatusCodeKey), srvSpan.Status(), str(srvSpan, semconv.URLPathKey), str(srvSpan, KeyRequestID))
		}
	}
}

// TestTransportGivesUp: a request whose attempts all fail ends in an
// Error on its last attempt and on the request's span; the attempt
// before it is Unset with will_retry.
func TestTransportGivesUp(t *testing.T) {
	tr, rec, _ := newTracer(t)
	srv := flakyServer(t, tr, 100)
	defer srv.Close()
	p := &retry.Policy{MaxAttempts: 2, Schedule: backoff.Constant(0)}
	client := &http.Client{Transport: tr.Transport(retryhttp.New(nil, p))}
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	clients := byKind(rec.Ended(), trace.SpanKindClient)
	if len(clients) != 3 {
		t.Fatalf("%d client spans, want 2 attempts + the request", len(clients))
	}
	for i, want := range []codes.Code{codes.Unset, codes.Error, codes.Error} {
		s := clients[i]
		if s.Status().Code != want || str(s, semconv.ErrorTypeKey) != "503" || (str(s, KeyWillRetry) == "true") != (i == 0) {
			t.Errorf("span %d: %v, error.type %q, will_retry %q", i, s.Status(), str(s, semconv.ErrorTypeKey), str(s, KeyWillRetry))
		}
	}
}

// TestTransportError: a request to a closed port on 127.0.0.1 fails with
// a transport error: every attempt's span has error.type, the last and
// the request's are Error with the exception recorded.
func TestTransportError(t *testing.T) {
	tr, rec, _ := newTracer(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p := &retry.Policy{MaxAttempts: 2, Schedule: backoff.Constant(0), Classify: func(error) retry.Class { return retry.ClassRetryable }}
	client := &http.Client{Transport: tr.Transport(retryhttp.New(nil, p))}
	_, err = client.Get("http://" + addr + "/")
	var re *retry.Error
	if !errors.As(err, &re) {
		t.Fatalf("err %v", err)
	}
	clients := byKind(rec.Ended(), trace.SpanKindClient)
	if len(clients) != 3 {
		t.Fatalf("%d client spans, want 2 attempts + the request", len(clients))
	}
	for i, s := range clients {
		et := str(s, semconv.ErrorTypeKey)
		if et == "" || strings.Contains(et, addr) {
			t.Errorf("span %d: error.type %q", i, et)
		}
		if (s.Status().Code == codes.Error) != (i > 0) || len(s.Events()) == 0 || s.Events()[0].Name != "exception" {
			t.Errorf("span %d: %v, events %v", i, s.Status(), s.Events())
		}
	}
}

// TestWithPropagator: a Tracer with the Baggage propagator added carries
// baggage to the server with each attempt; the default carries none.
func TestWithPropagator(t *testing.T) {
	tr, _, _ := newTracer(t)
	var got atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Header.Get("baggage") + "|" + r.Header.Get("traceparent"))
	}))
	defer srv.Close()
	m, _ := baggage.NewMember("tenant", "acme")
	b, _ := baggage.New(m)
	ctx := baggage.ContextWithBaggage(context.Background(), b)
	for _, c := range []struct {
		tr   *Tracer
		want string
	}{{tr, "|"}, {tr.WithPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})), "tenant=acme|"}} {
		client := &http.Client{Transport: c.tr.Transport(retryhttp.New(nil, nil))}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		parts := strings.SplitN(got.Load().(string), "|", 2)
		if parts[0]+"|" != c.want || len(parts[1]) != 55 {
			t.Errorf("baggage %q, traceparent %q; want baggage %q and a traceparent", parts[0], parts[1], strings.TrimSuffix(c.want, "|"))
		}
	}
}

// TestServerShed: a request the Guard sheds still gets its server span
// (the Guard is inside it): 503, status Error, the ledger's attempt and
// request ID as the request carried them; a malformed attempt is left
// out rather than recorded.
func TestServerShed(t *testing.T) {
	tr, rec, _ := newTracer(t)
	g := &retryhttp.Guard{Next: http.NotFoundHandler(), Overloaded: func(*http.Request) bool { return true }}
	srv := httptest.NewServer(tr.Server(g))
	for _, attempt := range []string{"4", "-1"} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/orders", nil)
		req.Header.Set(retryhttp.AttemptHeader, attempt)
		req.Header.Set(retryhttp.RequestIDHeader, "order-9")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	srv.Close()
	spans := byKind(rec.Ended(), trace.SpanKindServer)
	if len(spans) != 2 {
		t.Fatalf("%d server spans", len(spans))
	}
	for i, want := range []string{"4", ""} {
		s := spans[i]
		if s.Name() != "POST" || str(s, semconv.HTTPResponseStatusCodeKey) != "503" || s.Status().Code != codes.Error ||
			str(s, semconv.ErrorTypeKey) != "503" || str(s, KeyAttemptNumber) != want || str(s, KeyRequestID) != "order-9" {
			t.Errorf("span %d %q: %v %v", i, s.Name(), s.Attributes(), s.Status())
		}
	}
}

// TestTraceAcrossHops: one trace from an HTTP client through a Guard-ed
// server that enqueues the work to the worker that runs it: request span
// (client) → attempt span (client) → server span → "create jobs"
// (producer) → "process jobs" (consumer), each the parent of the next.
func TestTraceAcrossHops(t *testing.T) {
	tr, rec, _ := newTracer(t)
	q, err := queue.New(queue.NewMemoryStore(), queue.Config{Trace: tr.Propagator("stagger.queue", "jobs")})
	if err != nil {
		t.Fatal(err)
	}
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, _, err := q.Enqueue(r.Context(), queue.NewJob{ID: "job-1"}); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	})
	srv := httptest.NewServer(tr.Server(&retryhttp.Guard{Next: app}))
	client := &http.Client{Transport: tr.Transport(retryhttp.New(nil, nil))}
	resp, err := client.Post(srv.URL+"/jobs", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	srv.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if _, err := q.RunOnce(context.Background(), tr.Handler("jobs", func(context.Context, []byte) error { return nil })); err != nil {
		t.Fatal(err)
	}
	spans := rec.Ended()
	find := func(kind trace.SpanKind, name string, nth int) sdktrace.ReadOnlySpan {
		t.Helper()
		for _, s := range spans {
			if s.SpanKind() == kind && s.Name() == name {
				if nth == 0 {
					return s
				}
				nth--
			}
		}
		t.Fatalf("no %v span %q", kind, name)
		return nil
	}
	attempt, request := find(trace.SpanKindClient, "POST", 0), find(trace.SpanKindClient, "POST", 1)
	chain := []sdktrace.ReadOnlySpan{request, attempt, find(trace.SpanKindServer, "POST", 0),
		find(trace.SpanKindProducer, "create jobs", 0), find(trace.SpanKindConsumer, "process jobs", 0)}
	for i := 1; i < len(chain); i++ {
		p, c := chain[i-1], chain[i]
		if c.Parent().SpanID() != p.SpanContext().SpanID() || c.SpanContext().TraceID() != request.SpanContext().TraceID() {
			t.Errorf("%v %q is not the child of %v %q", c.SpanKind(), c.Name(), p.SpanKind(), p.Name())
		}
	}
}

// countingCloser counts CloseIdleConnections calls.
type countingCloser struct {
	http.RoundTripper
	closed int
}

func (c *countingCloser) CloseIdleConnections() { c.closed++ }

// TestTransportCloseIdle: http.Client.CloseIdleConnections reaches the
// Base under the tracing layers and retryhttp.
func TestTransportCloseIdle(t *testing.T) {
	tr, _, _ := newTracer(t)
	base := &countingCloser{RoundTripper: http.DefaultTransport}
	client := &http.Client{Transport: tr.Transport(retryhttp.New(base, nil))}
	client.CloseIdleConnections()
	if base.closed != 1 {
		t.Fatalf("Base closed %d times, want 1", base.closed)
	}
}
