package staggerotelgrpc

import (
	"context"
	"io"
	"net"
	"strconv"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/staggerhq/stagger/backoff"
	staggergrpc "github.com/staggerhq/stagger/grpc"
	"github.com/staggerhq/stagger/retry"
)

// flaky answers UNAVAILABLE to the first fails calls.
type flaky struct {
	healthpb.UnimplementedHealthServer
	n, fails       int64
	wn, watchFails int64 // Watch: calls, and how many fail
}

func (f *flaky) Check(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if atomic.AddInt64(&f.n, 1) <= f.fails {
		return nil, status.Error(grpccodes.Unavailable, "warming up")
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func str(s sdktrace.ReadOnlySpan, k attribute.Key) string {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value.String()
		}
	}
	return ""
}

// setup serves f on a loopback listener with tr's server interceptor
// before a staggergrpc.Server, and dials it with the call interceptor,
// a staggergrpc.Client of maxAttempts and the attempt interceptor.
func setup(t *testing.T, tr *Tracer, f *flaky, maxAttempts int) healthpb.HealthClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	guard := &staggergrpc.Server{}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(tr.UnaryServer(), guard.Unary()),
		grpc.ChainStreamInterceptor(tr.StreamServer(), guard.Stream()))
	healthpb.RegisterHealthServer(srv, f)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	c := &staggergrpc.Client{Policy: &retry.Policy{MaxAttempts: maxAttempts, Schedule: backoff.Constant(0)}}
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDisableRetry(), grpc.WithChainUnaryInterceptor(tr.UnaryClient(), c.Unary(), tr.UnaryClientAttempt()),
		grpc.WithChainStreamInterceptor(tr.StreamClient(), c.Stream(), tr.StreamClientAttempt()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return healthpb.NewHealthClient(conn)
}

func newTracer(t *testing.T) (*Tracer, *tracetest.SpanRecorder) {
	rec := tracetest.NewSpanRecorder()
	tr, err := New(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	if err != nil {
		t.Fatal(err)
	}
	return tr, rec
}

func byKind(spans []sdktrace.ReadOnlySpan, k trace.SpanKind) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.SpanKind() == k {
			out = append(out, s)
		}
	}
	return out
}

// TestUnarySpans: a call that fails twice with UNAVAILABLE and then
// succeeds, over a real loopback connection, makes a client span for the
// call, three attempt spans (its children; the two retried Unset with
// will_retry) and three server spans, each its attempt's child, with the
// ledger's attempt number and the gRPC status.
func TestUnarySpans(t *testing.T) {
	tr, rec := newTracer(t)
	client := setup(t, tr, &flaky{fails: 2}, 5)
	if _, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	spans := rec.Ended()
	clients, servers := byKind(spans, trace.SpanKindClient), byKind(spans, trace.SpanKindServer)
	if len(clients) != 4 || len(servers) != 3 {
		t.Fatalf("%d client and %d server spans, want 4 and 3", len(clients), len(servers))
	}
	call := clients[3]
	const method = "grpc.health.v1.Health/Check"
	if call.Name() != method || str(call, semconv.RPCMethodKey) != method || str(call, semconv.RPCSystemNameKey) != "grpc" ||
		str(call, semconv.ServerAddressKey) != "127.0.0.1" || str(call, semconv.ServerPortKey) == "" ||
		str(call, semconv.RPCResponseStatusCodeKey) != "OK" || str(call, "stagger.attempt.count") != "3" || call.Status().Code != codes.Unset {
		t.Errorf("call span %q: %v, %v", call.Name(), call.Attributes(), call.Status())
	}
	for i := range 3 {
		a, s := clients[i], servers[i]
		n := strconv.Itoa(i + 1)
		wantCode, wantRetry, wantServer := "UNAVAILABLE", "true", codes.Error
		if i == 2 {
			wantCode, wantRetry, wantServer = "OK", "", codes.Unset
		}
		if a.Parent().SpanID() != call.SpanContext().SpanID() || str(a, KeyAttemptNumber) != n ||
			str(a, semconv.RPCResponseStatusCodeKey) != wantCode || str(a, "stagger.retry.will_retry") != wantRetry ||
			a.Status().Code != codes.Unset {
			t.Errorf("attempt %d: parent ok %v, %v, %v", i+1, a.Parent().SpanID() == call.SpanContext().SpanID(), a.Attributes(), a.Status())
		}
		if s.Parent().SpanID() != a.SpanContext().SpanID() || !s.Parent().IsRemote() || str(s, KeyAttemptNumber) != n ||
			str(s, semconv.RPCResponseStatusCodeKey) != wantCode || s.Status().Code != wantServer ||
			str(s, KeyRequestID) == "" || str(s, KeyRequestID) != str(servers[0], KeyRequestID) {
			t.Errorf("server span %d: child of its attempt %v, %v, %v", i+1, s.Parent().SpanID() == a.SpanContext().SpanID(), s.Attributes(), s.Status())
		}
	}
}

// TestUnaryGivesUp: when every attempt fails, the last attempt and the
// call are Error with error.type UNAVAILABLE; the one before is Unset.
func TestUnaryGivesUp(t *testing.T) {
	tr, rec := newTracer(t)
	client := setup(t, tr, &flaky{fails: 100}, 2)
	if _, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}); status.Code(err) != grpccodes.Unavailable {
		t.Fatalf("err %v", err)
	}
	clients := byKind(rec.Ended(), trace.SpanKindClient)
	if len(clients) != 3 {
		t.Fatalf("%d client spans, want 3", len(clients))
	}
	for i, want := range []codes.Code{codes.Unset, codes.Error, codes.Error} {
		s := clients[i]
		if s.Status().Code != want || str(s, semconv.ErrorTypeKey) != "UNAVAILABLE" {
			t.Errorf("span %d: %v, error.type %q", i, s.Status(), str(s, semconv.ErrorTypeKey))
		}
	}
}

func (f *flaky) Watch(_ *healthpb.HealthCheckRequest, s grpc.ServerStreamingServer[healthpb.HealthCheckResponse]) error {
	if !trace.SpanFromContext(s.Context()).SpanContext().IsValid() {
		return status.Error(grpccodes.Internal, "the handler's context has no span")
	}
	if atomic.AddInt64(&f.wn, 1) <= f.watchFails {
		return status.Error(grpccodes.Unavailable, "no watching yet")
	}
	return s.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING})
}

// TestStreamServerSpan: a streaming call's server span carries the
// method, the status and, for UNAVAILABLE, status Error; the handler's
// stream context carries the span.
func TestStreamServerSpan(t *testing.T) {
	tr, rec := newTracer(t)
	client := setup(t, tr, &flaky{watchFails: 100}, 1)
	st, err := client.Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != grpccodes.Unavailable {
		t.Fatalf("err %v", err)
	}
	servers := byKind(rec.Ended(), trace.SpanKindServer)
	if len(servers) != 1 {
		t.Fatalf("%d server spans", len(servers))
	}
	if clients := byKind(rec.Ended(), trace.SpanKindClient); len(clients) != 2 || clients[0].Status().Code != codes.Error || clients[1].Status().Code != codes.Error {
		t.Errorf("client spans of a stream that failed once, with no retry: %d", len(clients))
	}
	s := servers[0]
	if s.Name() != "grpc.health.v1.Health/Watch" || str(s, semconv.RPCResponseStatusCodeKey) != "UNAVAILABLE" || s.Status().Code != codes.Error {
		t.Errorf("stream server span %q: %v %v", s.Name(), s.Attributes(), s.Status())
	}
}

// TestStreamClientSpans: a server-streaming call whose first attempt
// fails with UNAVAILABLE and whose second streams an answer makes a call
// span (OK, two attempts, ended at io.EOF), two attempt spans (its
// children: the first retried, Unset) and two server spans.
func TestStreamClientSpans(t *testing.T) {
	tr, rec := newTracer(t)
	client := setup(t, tr, &flaky{watchFails: 1}, 3)
	st, err := client.Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := st.Recv(); err != nil || m.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Recv: %v, %v", m, err)
	}
	if _, err := st.Recv(); err != io.EOF {
		t.Fatalf("second Recv: %v, want io.EOF", err)
	}
	clients := byKind(rec.Ended(), trace.SpanKindClient)
	if len(clients) != 3 {
		t.Fatalf("%d client spans, want 2 attempts + the call", len(clients))
	}
	call := clients[2]
	if str(call, semconv.RPCResponseStatusCodeKey) != "OK" || str(call, "stagger.attempt.count") != "2" || call.Status().Code != codes.Unset {
		t.Errorf("call span: %v %v", call.Attributes(), call.Status())
	}
	for i, want := range []string{"UNAVAILABLE", "OK"} {
		a := clients[i]
		if a.Parent().SpanID() != call.SpanContext().SpanID() || str(a, semconv.RPCResponseStatusCodeKey) != want ||
			a.Status().Code != codes.Unset || (str(a, "stagger.retry.will_retry") == "true") != (i == 0) ||
			str(a, KeyAttemptNumber) != strconv.Itoa(i+1) {
			t.Errorf("attempt %d: %v %v", i+1, a.Attributes(), a.Status())
		}
	}
	if servers := byKind(rec.Ended(), trace.SpanKindServer); len(servers) != 2 {
		t.Errorf("%d server spans, want 2", len(servers))
	}
}
