package staggerotelgrpc_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/staggerhq/stagger/backoff"
	staggerotelgrpc "github.com/staggerhq/stagger/contrib/otel/grpc"
	staggergrpc "github.com/staggerhq/stagger/grpc"
	"github.com/staggerhq/stagger/retry"
)

type warmingUp struct {
	healthpb.UnimplementedHealthServer
	calls atomic.Int64
}

func (w *warmingUp) Check(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if w.calls.Add(1) == 1 {
		return nil, status.Error(codes.Unavailable, "warming up")
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// A call retried once by a staggergrpc.Client: the call's client span,
// one client span per attempt and a server span per attempt.
func Example() {
	rec := tracetest.NewSpanRecorder() // in production: a batch span processor and an exporter
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	tr, _ := staggerotelgrpc.New(tp)

	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	guard := &staggergrpc.Server{}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(tr.UnaryServer(), guard.Unary()))
	healthpb.RegisterHealthServer(srv, &warmingUp{})
	go srv.Serve(ln)
	defer srv.Stop()

	retrying := &staggergrpc.Client{Policy: &retry.Policy{MaxAttempts: 3, Schedule: backoff.Constant(0)}}
	conn, _ := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDisableRetry(),
		grpc.WithChainUnaryInterceptor(tr.UnaryClient(), retrying.Unary(), tr.UnaryClientAttempt()))
	defer conn.Close()
	_, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	fmt.Println("error:", err)

	for _, s := range rec.Ended() {
		line := fmt.Sprint(s.SpanKind(), " ", s.Name())
		for _, kv := range s.Attributes() {
			switch kv.Key {
			case "rpc.response.status_code", "stagger.attempt.number", "stagger.retry.will_retry", "stagger.attempt.count":
				line += fmt.Sprintf(" %s=%s", kv.Key, kv.Value.String())
			}
		}
		fmt.Println(line, s.Status().Code)
	}
	// Output:
	// error: <nil>
	// server grpc.health.v1.Health/Check stagger.attempt.number=1 rpc.response.status_code=UNAVAILABLE Error
	// client grpc.health.v1.Health/Check stagger.attempt.number=1 rpc.response.status_code=UNAVAILABLE stagger.retry.will_retry=true Unset
	// server grpc.health.v1.Health/Check stagger.attempt.number=2 rpc.response.status_code=OK Unset
	// client grpc.health.v1.Health/Check stagger.attempt.number=2 rpc.response.status_code=OK Unset
	// client grpc.health.v1.Health/Check rpc.response.status_code=OK stagger.attempt.count=2 Unset
}
