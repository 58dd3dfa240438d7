package staggergrpc_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/staggerhq/stagger/backoff"
	staggergrpc "github.com/staggerhq/stagger/grpc"
	"github.com/staggerhq/stagger/retry"
)

type flaky struct {
	healthpb.UnimplementedHealthServer
	calls atomic.Int64
}

func (f *flaky) Check(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if f.calls.Add(1) < 3 {
		return nil, status.Error(codes.Unavailable, "warming up")
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// A client retries UNAVAILABLE under a stagger policy; the server counts
// attempts by number. grpc-go's own retries are off, so one layer retries.
func ExampleClient() {
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	srvCount := &staggergrpc.Server{}
	s := grpc.NewServer(grpc.ChainUnaryInterceptor(srvCount.Unary()))
	f := &flaky{}
	healthpb.RegisterHealthServer(s, f)
	go s.Serve(lis)
	defer s.Stop()

	client := &staggergrpc.Client{Policy: &retry.Policy{MaxAttempts: 3, Schedule: backoff.Constant(time.Millisecond)}}
	cc, _ := grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDisableRetry(),
		grpc.WithChainUnaryInterceptor(client.Unary()),
		grpc.WithChainStreamInterceptor(client.Stream()))
	defer cc.Close()

	resp, err := healthpb.NewHealthClient(cc).Check(context.Background(), &healthpb.HealthCheckRequest{})
	st := srvCount.Stats()
	fmt.Println(resp.GetStatus(), err, st.ByAttempt[:3])
	// Output: SERVING <nil> [1 1 1]
}

// A service config's retry parts, moved over unchanged.
func ExampleParseServiceConfig() {
	c, err := staggergrpc.ParseServiceConfig([]byte(`{
	  "methodConfig": [{"name": [{"service": "shop.Orders"}],
	    "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.1s", "maxBackoff": "1s",
	      "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}],
	  "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	m := c.Methods["/shop.Orders/"]
	fmt.Println(m.Policy.MaxAttempts, m.RetryCodes, c.NewBudget != nil)
	// Output: 4 [Unavailable] true
}

type down struct {
	healthpb.UnimplementedHealthServer
}

func (down) Check(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	return nil, status.Error(codes.Unavailable, "down")
}

// A queue job's handler that owns its call: the call is one attempt of
// the job, sent once as the job's attempt — its last one included — and
// not retried; when it fails, the queue retries the job.
func ExampleWithUpstreamAttempt() {
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	srv := &staggergrpc.Server{}
	s := grpc.NewServer(grpc.ChainUnaryInterceptor(srv.Unary()))
	healthpb.RegisterHealthServer(s, down{})
	go s.Serve(lis)
	defer s.Stop()

	client := &staggergrpc.Client{Policy: &retry.Policy{MaxAttempts: 3, Schedule: backoff.Constant(time.Millisecond)}}
	cc, _ := grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDisableRetry(),
		grpc.WithChainUnaryInterceptor(client.Unary()))
	defer cc.Close()

	// What a queue gives the handler of a job's last attempt.
	ctx := retry.Delivery{ID: "job-7", Attempt: 5, MaxAttempts: 5, Source: "queue"}.NewContext(context.Background())

	d, _ := retry.DeliveryFrom(ctx)
	ctx = staggergrpc.WithUpstreamAttempt(ctx, d.Attempt)
	_, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	st := srv.Stats()
	fmt.Println(status.Code(err), st.Calls(), st.ByAttempt[4])
	// Output: Unavailable 1 1
}
