package bench

// The gRPC comparison: stagger's interceptors next to grpc-go's own
// retries (A6 through the service config), on a grpc-go health server.
//
//	BenchmarkGRPCSuccess/<client>  one successful unary call over an
//	                               in-memory connection (bufconn): plain,
//	                               grpc-go's retry policy, stagger
//	BenchmarkGRPCOutage/<client>   calls to a server that answers
//	                               UNAVAILABLE: the server counts the
//	                               attempts it received (attempts/call)

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/staggerhq/stagger/backoff"
	staggergrpc "github.com/staggerhq/stagger/grpc"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retry/retrydriver"
)

type benchHealth struct {
	healthpb.UnimplementedHealthServer
	down  bool
	calls atomic.Int64
}

func (h *benchHealth) Check(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	h.calls.Add(1)
	if h.down {
		return nil, status.Error(codes.Unavailable, "down")
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// The same policy for both retry owners: 3 attempts, 1 ms → 4 ms, and (for
// the throttled variants) A6's throttle with 10 tokens and ratio 0.1.
const (
	grpcRetryPolicy = `{"methodConfig":[{"name":[{"service":"grpc.health.v1.Health"}],
	  "retryPolicy":{"maxAttempts":3,"initialBackoff":"0.001s","maxBackoff":"0.004s",
	  "backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]`
	grpcServiceConfig          = grpcRetryPolicy + `}`
	grpcServiceConfigThrottled = grpcRetryPolicy + `,"retryThrottling":{"maxTokens":10,"tokenRatio":0.1}}`
)

type grpcClient struct {
	name string
	opts func(b *testing.B) []grpc.DialOption
	srv  []grpc.ServerOption // the server's interceptors, if any
}

func grpcClients() []grpcClient {
	stagger := func(cfg string) func(b *testing.B) []grpc.DialOption {
		return func(b *testing.B) []grpc.DialOption {
			c, err := staggergrpc.ParseServiceConfig([]byte(cfg))
			if err != nil {
				b.Fatal(err)
			}
			return []grpc.DialOption{grpc.WithDisableRetry(), grpc.WithChainUnaryInterceptor(c.Unary())}
		}
	}
	return []grpcClient{
		{"plain", func(*testing.B) []grpc.DialOption { return []grpc.DialOption{grpc.WithDisableRetry()} }, nil},
		{"grpc-go-retry", func(*testing.B) []grpc.DialOption {
			return []grpc.DialOption{grpc.WithDefaultServiceConfig(grpcServiceConfig)}
		}, nil},
		{"grpc-go-retry-throttled", func(*testing.B) []grpc.DialOption {
			return []grpc.DialOption{grpc.WithDefaultServiceConfig(grpcServiceConfigThrottled)}
		}, nil},
		{"grpc-go-retry-keys", func(*testing.B) []grpc.DialOption {
			return []grpc.DialOption{grpc.WithDefaultServiceConfig(grpcServiceConfig), grpc.WithChainUnaryInterceptor(ledgerKeys)}
		}, nil},
		{"stagger", stagger(grpcServiceConfig), nil},
		{"stagger-throttled", stagger(grpcServiceConfigThrottled), nil},
		{"stagger-policy", func(*testing.B) []grpc.DialOption {
			c := &staggergrpc.Client{Policy: &retry.Policy{MaxAttempts: 3, Schedule: backoff.Constant(time.Millisecond)}}
			return []grpc.DialOption{grpc.WithDisableRetry(), grpc.WithChainUnaryInterceptor(c.Unary())}
		}, nil},
		{"stagger-server", stagger(grpcServiceConfig),
			[]grpc.ServerOption{grpc.ChainUnaryInterceptor((&staggergrpc.Server{}).Unary())}},
	}
}

// ledgerKeys sends the metadata of a Client's first attempt (attempt,
// request ID, budget) and nothing else.
func ledgerKeys(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	ctx = metadata.AppendToOutgoingContext(ctx, staggergrpc.AttemptKey, "1",
		staggergrpc.RequestIDKey, retrydriver.NewID(), staggergrpc.MaxAttemptsKey, "3")
	return invoker(ctx, method, req, reply, cc, opts...)
}

func bufconnClient(b *testing.B, h *benchHealth, opts []grpc.DialOption, srv ...grpc.ServerOption) healthpb.HealthClient {
	lis := bufconn.Listen(1 << 20)
	s := grpc.NewServer(srv...)
	healthpb.RegisterHealthServer(s, h)
	go s.Serve(lis)
	b.Cleanup(s.Stop)
	opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	cc, err := grpc.NewClient("passthrough:///bufnet", opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cc.Close() })
	return healthpb.NewHealthClient(cc)
}

func BenchmarkGRPCSuccess(b *testing.B) {
	for _, c := range grpcClients() {
		b.Run(c.name, func(b *testing.B) {
			hc := bufconnClient(b, &benchHealth{}, c.opts(b), c.srv...)
			ctx := context.Background()
			req := &healthpb.HealthCheckRequest{}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := hc.Check(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkGRPCOutage: every call fails; attempts/call is what the server
// received per logical call (3 without throttling; with A6's throttle the
// retries stop once the tokens fall to half).
func BenchmarkGRPCOutage(b *testing.B) {
	for _, c := range grpcClients() {
		if c.name == "plain" {
			continue
		}
		b.Run(c.name, func(b *testing.B) {
			h := &benchHealth{down: true}
			hc := bufconnClient(b, h, c.opts(b), c.srv...)
			ctx := context.Background()
			req := &healthpb.HealthCheckRequest{}
			calls := 0
			for b.Loop() {
				hc.Check(ctx, req)
				calls++
			}
			b.ReportMetric(float64(h.calls.Load())/float64(calls), "attempts/call")
		})
	}
}
