package staggergrpc_test

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	staggergrpc "github.com/staggerhq/stagger/grpc"
	"github.com/staggerhq/stagger/retry"
)

// seenLedger is each call's stagger-attempt and stagger-max-attempts.
func seenLedger(h *health) [][2]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out [][2]string
	for _, md := range h.seen {
		var a, m string
		if v := md.Get(staggergrpc.AttemptKey); len(v) > 0 {
			a = v[0]
		}
		if v := md.Get(staggergrpc.MaxAttemptsKey); len(v) > 0 {
			m = v[0]
		}
		out = append(out, [2]string{a, m})
	}
	return out
}

func equalLedger(got, want [][2]string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

// TestClientCarriesLedger: a call made inside a Server's handler sends
// the incoming attempt number and budget (it once sent stagger-attempt 1
// every time), and the handler's Delivery has them.
func TestClientCarriesLedger(t *testing.T) {
	bottom := &health{answer: always(codes.Unavailable)}
	addr := serve(t, bottom, &staggergrpc.Server{})
	down := dial(t, addr, &staggergrpc.Client{Policy: &retry.Policy{MaxAttempts: 9, Schedule: fast}})
	var ds []retry.Delivery
	mid := &health{next: func(ctx context.Context) error {
		d, _ := retry.DeliveryFrom(ctx)
		ds = append(ds, d)
		_, err := down.Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}}
	top := dial(t, serve(t, mid, &staggergrpc.Server{}), &staggergrpc.Client{Policy: &retry.Policy{MaxAttempts: 3, Schedule: fast}})
	top.Check(context.Background(), &healthpb.HealthCheckRequest{})
	if got, want := seenLedger(bottom), [][2]string{{"1", "3"}, {"2", "3"}, {"3", "3"}}; !equalLedger(got, want) {
		t.Errorf("the bottom saw (attempt, budget) %q, want %q", got, want)
	}
	if len(ds) != 3 || ds[2].Attempt != 3 || ds[2].MaxAttempts != 3 || ds[2].Source != "grpc" || ds[2].ID == "" {
		t.Errorf("the middle's Deliveries %+v", ds)
	}
}

// TestClientCountsOnFromWork: a call inside work with a budget (a queue
// job, a broker message) counts on from its attempts, within its budget;
// with no attempt left it sends nothing.
func TestClientCountsOnFromWork(t *testing.T) {
	h := &health{answer: always(codes.Unavailable)}
	hc := dial(t, serve(t, h, &staggergrpc.Server{}), &staggergrpc.Client{Policy: &retry.Policy{MaxAttempts: 10, Schedule: fast}})
	ctx := retry.Delivery{ID: "job-1", Attempt: 2, MaxAttempts: 5, Source: "queue"}.NewContext(context.Background())
	hc.Check(ctx, &healthpb.HealthCheckRequest{})
	if got, want := seenLedger(h), [][2]string{{"3", "5"}, {"4", "5"}, {"5", "5"}}; !equalLedger(got, want) {
		t.Errorf("server saw (attempt, budget) %q, want %q", got, want)
	}
	h.seen = nil
	ctx = retry.Delivery{ID: "job-2", Attempt: 5, MaxAttempts: 5, Source: "queue"}.NewContext(context.Background())
	_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
	var re *retry.Error
	if len(seenLedger(h)) != 0 || !errors.As(err, &re) && status.Code(err) == codes.OK {
		t.Errorf("no attempt left: sent %d, error %v", len(seenLedger(h)), err)
	}
}

// TestGRPCRetryLayerCounted: grpc-go's own retries below a stagger Client
// re-send the attempt's metadata; the Server counts them as repeats of
// the logical request (they are not new work).
func TestGRPCRetryLayerCounted(t *testing.T) {
	h := &health{answer: always(codes.Unavailable)}
	srv := &staggergrpc.Server{}
	addr := serve(t, h, srv)
	c := &staggergrpc.Client{Policy: &retry.Policy{MaxAttempts: 2, Schedule: fast}}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(c.Unary()),
		grpc.WithDefaultServiceConfig(`{"methodConfig":[{"name":[{"service":"grpc.health.v1.Health"}],
		"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.001s","maxBackoff":"0.001s","backoffMultiplier":1,"retryableStatusCodes":["UNAVAILABLE"]}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	healthpb.NewHealthClient(cc).Check(context.Background(), &healthpb.HealthCheckRequest{})
	st := srv.Stats()
	if st.Calls() != 6 || st.Repeats != 4 {
		t.Errorf("server counted %d calls, %d repeats; want 6 calls (2 attempts × 3 grpc-go tries), 4 repeats", st.Calls(), st.Repeats)
	}
}

// TestWithUpstreamAttempt: a call marked as one attempt of the work its
// context carries (a queue job's attempt) is sent once, numbered as that
// attempt with the work's budget and ID, and not retried — on the job's
// last attempt too; NestedRetries gives it the Client's own budget; n < 1
// leaves the work unmarked, so the call is the work's next hop.
func TestWithUpstreamAttempt(t *testing.T) {
	h := &health{answer: always(codes.Unavailable)}
	addr := serve(t, h, &staggergrpc.Server{})
	hc := dial(t, addr, &staggergrpc.Client{Policy: &retry.Policy{MaxAttempts: 10, Schedule: fast}})
	job := func(attempt int) context.Context {
		return retry.Delivery{ID: "job-1", Attempt: attempt, MaxAttempts: 5, Source: "queue"}.NewContext(context.Background())
	}

	for _, n := range []int{1, 5} {
		h.seen = nil
		_, err := hc.Check(staggergrpc.WithUpstreamAttempt(job(n), n), &healthpb.HealthCheckRequest{})
		want := [][2]string{{strconv.Itoa(n), "5"}}
		if got := seenLedger(h); !equalLedger(got, want) || status.Code(err) != codes.Unavailable {
			t.Errorf("job attempt %d: server saw (attempt, budget) %q, error %v; want %q and UNAVAILABLE", n, got, err, want)
		}
		if id := h.seen[0].Get(staggergrpc.RequestIDKey); len(id) != 1 || id[0] != "job-1" {
			t.Errorf("job attempt %d: request ID %q, want the job's", n, id)
		}
	}

	h.seen = nil
	hc.Check(staggergrpc.WithUpstreamAttempt(context.Background(), 2), &healthpb.HealthCheckRequest{})
	if got, want := seenLedger(h), [][2]string{{"2", ""}}; !equalLedger(got, want) {
		t.Errorf("no work in the context: server saw %q, want %q", got, want)
	}

	h.seen = nil
	nested := dial(t, addr, &staggergrpc.Client{Policy: &retry.Policy{MaxAttempts: 3, Schedule: fast}, NestedRetries: true})
	nested.Check(staggergrpc.WithUpstreamAttempt(job(5), 5), &healthpb.HealthCheckRequest{})
	if got, want := seenLedger(h), [][2]string{{"1", "3"}, {"2", "3"}, {"3", "3"}}; !equalLedger(got, want) {
		t.Errorf("NestedRetries: server saw %q, want %q (the Client's own budget)", got, want)
	}

	for _, n := range []int{0, -1} {
		ctx := staggergrpc.WithUpstreamAttempt(job(2), n)
		if m, ok := staggergrpc.UpstreamAttempt(ctx); ok {
			t.Errorf("WithUpstreamAttempt(ctx, %d): UpstreamAttempt reports %d", n, m)
		}
		h.seen = nil
		hc.Check(ctx, &healthpb.HealthCheckRequest{})
		if got, want := seenLedger(h), [][2]string{{"3", "5"}, {"4", "5"}, {"5", "5"}}; !equalLedger(got, want) {
			t.Errorf("n = %d: server saw %q, want the job's next hops %q", n, got, want)
		}
	}
	if n, ok := staggergrpc.UpstreamAttempt(staggergrpc.WithUpstreamAttempt(context.Background(), 4)); !ok || n != 4 {
		t.Errorf("UpstreamAttempt = %d, %v; want 4, true", n, ok)
	}
}
