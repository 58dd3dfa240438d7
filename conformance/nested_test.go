package conformance_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	staggergrpc "github.com/staggerhq/stagger/grpc"
	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retryhttp"
)

// TestNestedCallInJob: the rule for a call a job's handler makes
// (docs/architecture.md, "Calls inside a job"). A job with a budget of 5
// attempts calls a dependency that always fails, and fails in turn.
//
// By default the call is the work's next hop: on job attempt k its tries
// are attempts k+1 … 5, so the dependency gets 4+3+2+1 = 10 sends and the
// job's last attempt sends nothing (retry.ErrExhausted). Marked as one
// attempt of the job (retryhttp.WithUpstreamAttempt(ctx, d.Attempt), or
// staggergrpc.WithUpstreamAttempt for a gRPC call), the call is sent once
// per job attempt, numbered as that attempt, the last included: 5 sends
// for a budget of 5, attempts 1 … 5. Both are measured over HTTP and over
// gRPC, each against a server on loopback.
func TestNestedCallInJob(t *testing.T) {
	for _, dep := range []struct {
		name string
		// start serves the dependency, which records the attempt number of
		// every send; call calls it, marked as one attempt of the job when
		// owned.
		start func(t *testing.T, record func(n int)) (call func(ctx context.Context, owned bool) error)
	}{
		{"HTTP", nestedHTTP},
		{"GRPC", nestedGRPC},
	} {
		for _, c := range []struct {
			name     string
			owned    bool // the job owns the call's retries
			want     []int
			refusals int
		}{
			{"NextHop", false, []int{2, 3, 4, 5, 3, 4, 5, 4, 5, 5}, 1},
			{"OneAttemptOfTheJob", true, []int{1, 2, 3, 4, 5}, 0},
		} {
			t.Run(dep.name+"/"+c.name, func(t *testing.T) {
				var (
					mu   sync.Mutex
					sent []int
				)
				call := dep.start(t, func(n int) {
					mu.Lock()
					sent = append(sent, n)
					mu.Unlock()
				})
				now := time.Now().UnixMilli()
				q, err := queue.New(queue.NewMemoryStore(), queue.Config{Policy: &retry.Policy{MaxAttempts: own, Schedule: tick},
					Now: func() int64 { return now }})
				if err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				if _, _, err := q.Enqueue(ctx, queue.NewJob{ID: "job", MaxAttempts: budget}); err != nil {
					t.Fatal(err)
				}
				refusals := 0
				sends := func() int {
					mu.Lock()
					defer mu.Unlock()
					return len(sent)
				}
				// A refused call sends nothing: its error is the
				// ledger's (retry.ErrExhausted), not the dependency's.
				h := func(ctx context.Context, _ []byte) error {
					before := sends()
					if err := call(ctx, c.owned); errors.Is(err, retry.ErrExhausted) && sends() == before {
						refusals++
					}
					return retry.Retryable(errors.New("the dependency failed"))
				}
				for range budget {
					j, err := q.RunOnce(ctx, h)
					if err != nil || j == nil {
						t.Fatalf("RunOnce: job %v, %v", j, err)
					}
					now += 60_000
				}
				j, err := q.Get(ctx, "job")
				if err != nil || j.State != queue.Dead || j.Attempts != budget {
					t.Fatalf("job %+v, %v: want dead after %d attempts", j, err, budget)
				}
				mu.Lock()
				defer mu.Unlock()
				if !slices.Equal(sent, c.want) || refusals != c.refusals {
					t.Errorf("the dependency got attempts %v with %d refused calls, want %v and %d", sent, refusals, c.want, c.refusals)
				}
			})
		}
	}
}

// nestedHTTP serves a dependency that answers 503 through a
// retryhttp.Transport.
func nestedHTTP(t *testing.T, record func(n int)) func(context.Context, bool) error {
	dep := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.Header.Get(retryhttp.AttemptHeader))
		record(n)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(dep.Close)
	client := &http.Client{Transport: retryhttp.New(nil, &retry.Policy{MaxAttempts: own, Schedule: tick})}
	return func(ctx context.Context, owned bool) error {
		if owned {
			d, _ := retry.DeliveryFrom(ctx)
			ctx = retryhttp.WithUpstreamAttempt(ctx, d.Attempt)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, dep.URL, nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
}

// nestedGRPC serves a dependency that answers UNAVAILABLE behind a
// staggergrpc.Server, called through a staggergrpc.Client.
func nestedGRPC(t *testing.T, record func(n int)) func(context.Context, bool) error {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor((&staggergrpc.Server{}).Unary()))
	healthpb.RegisterHealthServer(srv, &healthFn{check: func(ctx context.Context, _ string) error {
		n, _ := staggergrpc.UpstreamAttempt(ctx)
		record(n)
		return status.Error(codes.Unavailable, "down")
	}})
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	client := &staggergrpc.Client{Policy: &retry.Policy{MaxAttempts: own, Schedule: tick}}
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDisableRetry(), grpc.WithChainUnaryInterceptor(client.Unary()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	hc := healthpb.NewHealthClient(cc)
	return func(ctx context.Context, owned bool) error {
		if owned {
			d, _ := retry.DeliveryFrom(ctx)
			ctx = staggergrpc.WithUpstreamAttempt(ctx, d.Attempt)
		}
		_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
}
