package staggergrpc_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/budget"
	staggergrpc "github.com/staggerhq/stagger/grpc"
	"github.com/staggerhq/stagger/limit"
	"github.com/staggerhq/stagger/retry"
)

// health is a grpc-go health server whose answers a test scripts: answer
// is called with each call's number (from 1) and its context.
type health struct {
	healthpb.UnimplementedHealthServer
	calls  atomic.Int64
	answer func(ctx context.Context, n int) error
	// sends is how many messages Watch sends before it answers.
	sends func(n int) int
	// next, if set, is called by Check in its handler context (a nested
	// call to a downstream service).
	next func(ctx context.Context) error
	mu   sync.Mutex
	seen []metadata.MD
}

func (h *health) record(ctx context.Context) int {
	n := int(h.calls.Add(1))
	md, _ := metadata.FromIncomingContext(ctx)
	h.mu.Lock()
	h.seen = append(h.seen, md)
	h.mu.Unlock()
	return n
}

func (h *health) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	n := h.record(ctx)
	if h.next != nil {
		if err := h.next(ctx); err != nil {
			return nil, err
		}
	}
	if h.answer != nil {
		if err := h.answer(ctx, n); err != nil {
			return nil, err
		}
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func (h *health) Watch(_ *healthpb.HealthCheckRequest, ss grpc.ServerStreamingServer[healthpb.HealthCheckResponse]) error {
	n := h.record(ss.Context())
	if h.sends != nil {
		for range h.sends(n) {
			if err := ss.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}); err != nil {
				return err
			}
		}
	}
	if h.answer != nil {
		return h.answer(ss.Context(), n)
	}
	return nil
}

// serve starts h on 127.0.0.1 with srv's interceptors (if any) and returns
// its address.
func serve(t *testing.T, h *health, srv *staggergrpc.Server) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var opts []grpc.ServerOption
	if srv != nil {
		opts = append(opts, grpc.ChainUnaryInterceptor(srv.Unary()), grpc.ChainStreamInterceptor(srv.Stream()))
	}
	s := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(s, h)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

// dial connects to addr through c's interceptors, grpc-go's own retries off.
func dial(t *testing.T, addr string, c *staggergrpc.Client) healthpb.HealthClient {
	t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDisableRetry()}
	if c != nil {
		opts = append(opts, grpc.WithChainUnaryInterceptor(c.Unary()), grpc.WithChainStreamInterceptor(c.Stream()))
	}
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return healthpb.NewHealthClient(cc)
}

var fast = backoff.Constant(time.Millisecond)

func always(code codes.Code) func(context.Context, int) error {
	return func(context.Context, int) error { return status.Error(code, code.String()) }
}

// TestUnaryClasses: each status code is classed as documented, against a
// real grpc-go server on loopback.
func TestUnaryClasses(t *testing.T) {
	for _, c := range []struct {
		code       codes.Code
		retryCodes []codes.Code
		want       int // attempts the server receives
	}{
		{codes.Unavailable, nil, 3},
		{codes.ResourceExhausted, nil, 1},
		{codes.ResourceExhausted, []codes.Code{codes.ResourceExhausted}, 3},
		{codes.Aborted, nil, 1},
		{codes.Aborted, []codes.Code{codes.Aborted}, 3},
		{codes.InvalidArgument, nil, 1},
		{codes.NotFound, nil, 1},
		{codes.PermissionDenied, nil, 1},
		{codes.Unimplemented, nil, 1},
		{codes.Internal, nil, 1},               // unknown: handed back
		{codes.DeadlineExceeded, nil, 1},       // the server's own, not the attempt's
		{codes.Unavailable, []codes.Code{}, 3}, // an empty list adds nothing
	} {
		h := &health{answer: always(c.code)}
		client := &staggergrpc.Client{Policy: &retry.Policy{MaxAttempts: 3, Schedule: fast}, RetryCodes: c.retryCodes}
		_, err := dial(t, serve(t, h, nil), client).Check(context.Background(), &healthpb.HealthCheckRequest{})
		if status.Code(err) != c.code {
			t.Errorf("%v: status %v (%v), want the server's code", c.code, status.Code(err), err)
		}
		if got := int(h.calls.Load()); got != c.want {
			t.Errorf("%v (RetryCodes %v): server received %d attempts, want %d", c.code, c.retryCodes, got, c.want)
		}
	}
}

// TestAttemptMetadata: every attempt carries its number, the logical
// request ID (the same on each) and grpc-go's previous-attempts count.
func TestAttemptMetadata(t *testing.T) {
	h := &health{answer: func(_ context.Context, n int) error {
		if n < 3 {
			return status.Error(codes.Unavailable, "down")
		}
		return nil
	}}
	client := &staggergrpc.Client{Policy: &retry.Policy{MaxAttempts: 3, Schedule: fast}}
	if _, err := dial(t, serve(t, h, nil), client).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	id := h.seen[0].Get(staggergrpc.RequestIDKey)
	for i, md := range h.seen {
		want := []string{"1", "2", "3"}[i]
		if got := md.Get(staggergrpc.AttemptKey); len(got) != 1 || got[0] != want {
			t.Errorf("attempt %d: %s = %v", i+1, staggergrpc.AttemptKey, got)
		}
		prev := md.Get(staggergrpc.PreviousAttemptsKey)
		if i == 0 && len(prev) != 0 || i > 0 && (len(prev) != 1 || prev[0] != []string{"", "1", "2"}[i]) {
			t.Errorf("attempt %d: %s = %v", i+1, staggergrpc.PreviousAttemptsKey, prev)
		}
		if got := md.Get(staggergrpc.RequestIDKey); len(id) != 1 || len(got) != 1 || got[0] != id[0] {
			t.Errorf("attempt %d: request ID %v, first %v", i+1, got, id)
		}
	}
}

// TestPushback: grpc-retry-pushback-ms sets the next wait; a negative or
// malformed value stops the retries; a value above MaxAfter gives up.
func TestPushback(t *testing.T) {
	for _, c := range []struct {
		value  string
		want   int
		delay  time.Duration
		reason retry.Reason
	}{
		{"7", 2, 7 * time.Millisecond, retry.Exhausted},
		{"0", 2, time.Millisecond, retry.Exhausted}, // 0 asks for no wait: the schedule's applies
		{"-1", 1, 0, retry.PermanentError},
		{"soon", 1, 0, retry.PermanentError},
		{"3600000", 1, 0, retry.Pushback}, // an hour, above MaxAfter
	} {
		h := &health{answer: func(ctx context.Context, _ int) error {
			grpc.SetTrailer(ctx, metadata.Pairs(staggergrpc.PushbackKey, c.value))
			return status.Error(codes.Unavailable, "busy")
		}}
		var delays []time.Duration
		var gaveUp retry.Reason
		p := &retry.Policy{MaxAttempts: 2, Schedule: fast, MaxAfter: time.Second, Hooks: retry.Hooks{
			OnRetry:  func(e retry.Event) { delays = append(delays, e.Delay) },
			OnGiveUp: func(e retry.Event) { gaveUp = e.Reason },
		}}
		_, err := dial(t, serve(t, h, nil), &staggergrpc.Client{Policy: p}).Check(context.Background(), &healthpb.HealthCheckRequest{})
		if status.Code(err) != codes.Unavailable {
			t.Errorf("pushback %q: %v", c.value, err)
		}
		if got := int(h.calls.Load()); got != c.want || gaveUp != c.reason {
			t.Errorf("pushback %q: %d attempts, gave up %v; want %d, %v", c.value, got, gaveUp, c.want, c.reason)
		}
		if c.delay > 0 && (len(delays) != 1 || delays[0] != c.delay) {
			t.Errorf("pushback %q: waits %v, want [%v]", c.value, delays, c.delay)
		}
	}
}

// TestDeadlineSplit: each attempt's deadline is min(AttemptTimeout, the
// call's time left); an attempt whose own timeout fired is retried while
// the call's deadline leaves time.
func TestDeadlineSplit(t *testing.T) {
	var left []time.Duration
	h := &health{answer: func(ctx context.Context, n int) error {
		dl, ok := ctx.Deadline()
		if !ok {
			return status.Error(codes.Internal, "no deadline")
		}
		left = append(left, time.Until(dl))
		if n == 1 {
			<-ctx.Done() // hangs until the attempt's timeout
			return status.Error(codes.DeadlineExceeded, "slow")
		}
		return nil
	}}
	client := &staggergrpc.Client{Policy: &retry.Policy{MaxAttempts: 3, Schedule: fast, AttemptTimeout: 50 * time.Millisecond}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := dial(t, serve(t, h, nil), client).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("the retry after the attempt's own timeout must succeed: %v", err)
	}
	if len(left) != 2 || left[0] > 50*time.Millisecond || left[1] > 50*time.Millisecond {
		t.Errorf("server-side time left per attempt %v, want two, each at most the 50ms attempt timeout", left)
	}

	// The call's own deadline ends it: no retry after it.
	h2 := &health{answer: func(ctx context.Context, n int) error { <-ctx.Done(); return ctx.Err() }}
	client2 := &staggergrpc.Client{Policy: &retry.Policy{MaxAttempts: 3, Schedule: fast}}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel2()
	_, err := dial(t, serve(t, h2, nil), client2).Check(ctx2, &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.DeadlineExceeded || h2.calls.Load() != 1 {
		t.Errorf("call deadline: %v after %d attempts, want DEADLINE_EXCEEDED after 1", err, h2.calls.Load())
	}
}

// TestStreamRetriedUntilFirstMessage: a server-streaming call is retried
// while no response message has arrived, never after.
func TestStreamRetriedUntilFirstMessage(t *testing.T) {
	recvAll := func(hc healthpb.HealthClient) (int, error) {
		st, err := hc.Watch(context.Background(), &healthpb.HealthCheckRequest{})
		if err != nil {
			return 0, err
		}
		n := 0
		for {
			if _, err := st.Recv(); err != nil {
				if err == io.EOF {
					return n, nil
				}
				return n, err
			}
			n++
		}
	}
	policy := &retry.Policy{MaxAttempts: 3, Schedule: fast}

	// Fails before the first message twice, then streams two.
	before := &health{
		sends: func(n int) int { return map[bool]int{true: 2}[n == 3] },
		answer: func(_ context.Context, n int) error {
			if n < 3 {
				return status.Error(codes.Unavailable, "down")
			}
			return nil
		},
	}
	got, err := recvAll(dial(t, serve(t, before, nil), &staggergrpc.Client{Policy: policy}))
	if err != nil || got != 2 || before.calls.Load() != 3 {
		t.Errorf("before the first message: %d messages, err %v, %d attempts; want 2, nil, 3", got, err, before.calls.Load())
	}

	// Fails after one message: committed, not retried.
	after := &health{sends: func(int) int { return 1 }, answer: always(codes.Unavailable)}
	got, err = recvAll(dial(t, serve(t, after, nil), &staggergrpc.Client{Policy: policy}))
	if status.Code(err) != codes.Unavailable || got != 1 || after.calls.Load() != 1 {
		t.Errorf("after the first message: %d messages, err %v, %d attempts; want 1, UNAVAILABLE, 1", got, err, after.calls.Load())
	}
}

// TestStackedServicesOneOwner: three services, each a Client and a Server,
// with the bottom one down: the bottom receives 3 attempts (the top
// caller's), not 3×3×3 = 27.
func TestStackedServicesOneOwner(t *testing.T) {
	policy := &retry.Policy{MaxAttempts: 3, Schedule: fast}
	bottom := &health{answer: always(codes.Unavailable)}
	bottomSrv := &staggergrpc.Server{}
	addr := serve(t, bottom, bottomSrv)
	for range 2 {
		down := dial(t, addr, &staggergrpc.Client{Policy: policy})
		layer := &health{next: func(ctx context.Context) error {
			_, err := down.Check(ctx, &healthpb.HealthCheckRequest{})
			return err
		}}
		addr = serve(t, layer, &staggergrpc.Server{})
	}
	_, err := dial(t, addr, &staggergrpc.Client{Policy: policy}).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("top: %v", err)
	}
	st := bottomSrv.Stats()
	if bottom.calls.Load() != 3 || st.Calls() != 3 {
		t.Errorf("bottom received %d attempts (server counted %d), want 3", bottom.calls.Load(), st.Calls())
	}
	// Each layer's single attempt carries the top caller's attempt number;
	// the logical request ID, carried down by every layer, ties the
	// bottom's three attempts to the one request the top caller made.
	ids := map[string]bool{}
	for _, md := range bottom.seen {
		if v := md.Get(staggergrpc.RequestIDKey); len(v) == 1 {
			ids[v[0]] = true
		}
	}
	if len(ids) != 1 {
		t.Errorf("bottom saw %d request IDs, want 1: one logical request", len(ids))
	}
}

// TestThrottling: with A6's throttle (maxTokens 10, tokenRatio 0.1) and a
// server that always fails, retries stop once the tokens fall to half:
// 20 calls of 3 attempts make 3 + 2 + 18 = 23 attempts, not 60.
func TestThrottling(t *testing.T) {
	h := &health{answer: always(codes.Unavailable)}
	client := &staggergrpc.Client{
		Policy:    &retry.Policy{MaxAttempts: 3, Schedule: fast},
		NewBudget: func(string) budget.Budget { b, _ := budget.NewGRPC(10, 0.1); return b },
	}
	hc := dial(t, serve(t, h, nil), client)
	for range 20 {
		hc.Check(context.Background(), &healthpb.HealthCheckRequest{})
	}
	if got := h.calls.Load(); got != 23 {
		t.Errorf("server received %d attempts, want 23", got)
	}
}

// TestServerSheds: a Server with a full Limiter answers UNAVAILABLE with
// pushback without running the handler, and a Client waits as asked.
func TestServerSheds(t *testing.T) {
	bh, _ := limit.NewBulkhead(1)
	if !bh.TryAcquire() { // the one slot is taken
		t.Fatal("bulkhead")
	}
	h := &health{}
	srv := &staggergrpc.Server{Limiter: bh, Pushback: 3 * time.Millisecond}
	var delays []time.Duration
	p := &retry.Policy{MaxAttempts: 2, Schedule: fast, Hooks: retry.Hooks{OnRetry: func(e retry.Event) { delays = append(delays, e.Delay) }}}
	_, err := dial(t, serve(t, h, srv), &staggergrpc.Client{Policy: p}).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.Unavailable || h.calls.Load() != 0 {
		t.Errorf("shed: %v, handler ran %d times", err, h.calls.Load())
	}
	if st := srv.Stats(); st.Shed != 2 || st.Calls() != 2 || st.ByAttempt[0] != 1 || st.ByAttempt[1] != 1 {
		t.Errorf("server stats %+v", st)
	}
	if len(delays) != 1 || delays[0] != 3*time.Millisecond {
		t.Errorf("client waits %v, want [3ms] (the pushback)", delays)
	}
}

// TestGRPCRetriesCountedByServer: grpc-go's own retries (service config)
// are counted by attempt number from grpc-previous-rpc-attempts.
func TestGRPCRetriesCountedByServer(t *testing.T) {
	h := &health{answer: always(codes.Unavailable)}
	srv := &staggergrpc.Server{}
	addr := serve(t, h, srv)
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"methodConfig":[{"name":[{"service":"grpc.health.v1.Health"}],
		"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.001s","maxBackoff":"0.001s","backoffMultiplier":1,"retryableStatusCodes":["UNAVAILABLE"]}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	healthpb.NewHealthClient(cc).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if st := srv.Stats(); st.Calls() != 3 || st.ByAttempt[0] != 1 || st.ByAttempt[1] != 1 || st.ByAttempt[2] != 1 {
		t.Errorf("grpc-go's retries counted as %+v, want one each of attempts 1, 2, 3", st)
	}
}

func TestInvalidClient(t *testing.T) {
	for _, c := range []*staggergrpc.Client{
		{Policy: &retry.Policy{MaxAttempts: -1}},
		{MaxTargets: -1},
		{MaxBuffer: -1},
		{Methods: map[string]staggergrpc.Method{"/a/": {}}},
	} {
		h := &health{}
		_, err := dial(t, serve(t, h, nil), c).Check(context.Background(), &healthpb.HealthCheckRequest{})
		if err == nil || h.calls.Load() != 0 {
			t.Errorf("%+v: err %v, %d calls", c, err, h.calls.Load())
		}
		if !errors.Is(err, staggergrpc.ErrInvalid) && !errors.Is(err, retry.ErrInvalid) {
			t.Errorf("%+v: %v does not wrap ErrInvalid", c, err)
		}
	}
}

// TestUnreachable: a closed port is UNAVAILABLE, retried, and ends.
func TestUnreachable(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	attempts := 0
	p := &retry.Policy{MaxAttempts: 3, Schedule: fast, Hooks: retry.Hooks{OnAttempt: func(retry.Event) { attempts++ }}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = dial(t, addr, &staggergrpc.Client{Policy: p}).Check(ctx, &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.Unavailable || attempts != 3 {
		t.Errorf("closed port: %v after %d attempts, want UNAVAILABLE after 3", err, attempts)
	}
}
