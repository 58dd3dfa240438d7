package staggergrpc_test

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	staggergrpc "github.com/staggerhq/stagger/grpc"
)

// probe is a health server that hands each call's context to seen.
type probe struct {
	healthpb.UnimplementedHealthServer
	seen func(ctx context.Context)
}

func (p *probe) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if p.seen != nil {
		p.seen(ctx)
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// listenProbe serves p behind srv's interceptors on a real listener on
// 127.0.0.1 and returns a client connected to it (no interceptors, no
// retries: the test sends the metadata it wants).
func listenProbe(t *testing.T, p *probe, srv *staggergrpc.Server) healthpb.HealthClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.ChainUnaryInterceptor(srv.Unary()), grpc.ChainStreamInterceptor(srv.Stream()))
	healthpb.RegisterHealthServer(s, p)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDisableRetry())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return healthpb.NewHealthClient(cc)
}

// TestPreviousAttemptsOverflow: grpc-previous-rpc-attempts at the largest
// int64 once made n+1 wrap and the attempt counter index out of range, a
// panic grpc-go does not recover: one call killed the process. The call is
// now served as an unreadable attempt number (a first attempt), and the
// server goes on serving.
func TestPreviousAttemptsOverflow(t *testing.T) {
	srv := &staggergrpc.Server{}
	var got []int
	hc := listenProbe(t, &probe{seen: func(ctx context.Context) {
		n, _ := staggergrpc.UpstreamAttempt(ctx)
		got = append(got, n)
	}}, srv)
	ctx := metadata.AppendToOutgoingContext(context.Background(), staggergrpc.PreviousAttemptsKey, "9223372036854775807")
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("hostile call: %v", err)
	}
	if _, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("the next call: %v", err)
	}
	if len(got) != 2 || got[0] != 1 || got[1] != 1 {
		t.Errorf("attempts seen by the handler %v, want [1 1]", got)
	}
	if st := srv.Stats(); st.Calls() != 2 {
		t.Errorf("calls counted %d, want 2 (%+v)", st.Calls(), st)
	}
}
