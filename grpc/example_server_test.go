package staggergrpc_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	staggergrpc "github.com/staggerhq/stagger/grpc"
)

// A client cannot give a handler a deadline further away than the server
// allows, nor an attempt number out of range: a call with a 1000-hour
// deadline and grpc-previous-rpc-attempts at the largest int64 reaches its
// handler with at most Server.MaxTimeout and as a first attempt.
func ExampleServer_maxTimeout() {
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	srv := &staggergrpc.Server{MaxTimeout: 30 * time.Second}
	s := grpc.NewServer(grpc.ChainUnaryInterceptor(srv.Unary()))
	healthpb.RegisterHealthServer(s, &probe{seen: func(ctx context.Context) {
		dl, _ := ctx.Deadline()
		n, _ := staggergrpc.UpstreamAttempt(ctx)
		fmt.Println("deadline within 30s:", time.Until(dl) <= 30*time.Second, "attempt:", n)
	}})
	go s.Serve(lis)
	defer s.Stop()

	cc, _ := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 1000*time.Hour)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, staggergrpc.PreviousAttemptsKey, "9223372036854775807")
	_, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	fmt.Println(err)
	// Output:
	// deadline within 30s: true attempt: 1
	// <nil>
}
