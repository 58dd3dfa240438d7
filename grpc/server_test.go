package staggergrpc_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	staggergrpc "github.com/staggerhq/stagger/grpc"
	"github.com/staggerhq/stagger/internal/wire/wiretest"
	"github.com/staggerhq/stagger/retry"
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

// TestServerHostileMetadata sends the worst value of every metadata key
// the Server reads, over a real connection where grpc-go's client lets it
// (it refuses non-printable values) and straight into the interceptor
// otherwise: the server keeps serving, and no handler gets an attempt
// number, a deadline or a request ID beyond the rule.
func TestServerHostileMetadata(t *testing.T) {
	const maxTimeout = 3 * time.Second
	const maxBudget = 4
	srv := &staggergrpc.Server{MaxTimeout: maxTimeout, MaxAttempts: maxBudget}
	var mu sync.Mutex
	var bad []string
	check := func(ctx context.Context) {
		mu.Lock()
		defer mu.Unlock()
		if n, ok := staggergrpc.UpstreamAttempt(ctx); !ok || n < 1 || n > 1<<20 {
			bad = append(bad, fmt.Sprintf("attempt %d", n))
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) > maxTimeout {
			bad = append(bad, "deadline in "+time.Until(dl).String())
		}
		if d, ok := retry.DeliveryFrom(ctx); !ok || d.MaxAttempts < 0 || d.MaxAttempts > maxBudget || d.Attempt < 1 || time.Until(d.Deadline) > maxTimeout {
			bad = append(bad, fmt.Sprintf("delivery %d of %d, deadline in %v", d.Attempt, d.MaxAttempts, time.Until(d.Deadline)))
		}
		md, _ := metadata.FromIncomingContext(ctx)
		for _, id := range md.Get(staggergrpc.RequestIDKey) {
			if len(id) > 255 || strings.ContainsFunc(id, func(c rune) bool { return c < 0x20 || c > 0x7e }) {
				bad = append(bad, "request ID "+id[:min(len(id), 20)])
			}
		}
		if n := len(md.Get(staggergrpc.RequestIDKey)); n > 1 {
			bad = append(bad, fmt.Sprintf("%d request IDs", n))
		}
	}
	hc := listenProbe(t, &probe{seen: check}, srv)
	keys := []string{staggergrpc.AttemptKey, staggergrpc.PreviousAttemptsKey, staggergrpc.RequestIDKey, staggergrpc.MaxAttemptsKey}
	unary := srv.Unary()
	for _, h := range wiretest.Cases(keys...) {
		md := metadata.MD{}
		for _, x := range h {
			md.Append(x[0], x[1])
		}
		// Over the wire, with a deadline far beyond the server's bound.
		ctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(context.Background(), md), 1000*time.Hour)
		_, _ = hc.Check(ctx, &healthpb.HealthCheckRequest{}) // refused by grpc-go or served: no crash
		cancel()
		// Straight into the interceptor, with every byte as sent.
		ictx, cancel := context.WithTimeout(metadata.NewIncomingContext(context.Background(), md), 1000*time.Hour)
		_, err := unary(ictx, nil, &grpc.UnaryServerInfo{}, func(ctx context.Context, _ any) (any, error) { check(ctx); return nil, nil })
		cancel()
		if err != nil {
			t.Errorf("interceptor refused %v: %v", h[0][0], err)
		}
	}
	if _, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("a normal call after the hostile ones: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Errorf("handlers saw values beyond the rule: %q", bad)
	}
	if st := srv.Stats(); st.Calls() < int64(len(wiretest.Cases(keys...))) {
		t.Errorf("%d calls counted: the test sends too little", st.Calls())
	}
}

// FuzzServerAttemptMetadata: no attempt metadata makes the Server panic or
// hand a handler an attempt number outside [1, 2^20].
func FuzzServerAttemptMetadata(f *testing.F) {
	for _, v := range wiretest.Values()[:len(wiretest.Values())-1] {
		f.Add(v, "")
		f.Add("", v)
	}
	f.Add("3", "2")
	unary := (&staggergrpc.Server{}).Unary()
	f.Fuzz(func(t *testing.T, attempt, previous string) {
		md := metadata.MD{}
		if attempt != "" {
			md.Append(staggergrpc.AttemptKey, attempt)
		}
		if previous != "" {
			md.Append(staggergrpc.PreviousAttemptsKey, previous)
		}
		ctx := metadata.NewIncomingContext(context.Background(), md)
		_, _ = unary(ctx, nil, &grpc.UnaryServerInfo{}, func(ctx context.Context, _ any) (any, error) {
			if n, ok := staggergrpc.UpstreamAttempt(ctx); !ok || n < 1 || n > 1<<20 {
				t.Errorf("attempt %q, previous %q: handler saw attempt %d", attempt, previous, n)
			}
			return nil, nil
		})
	})
}
