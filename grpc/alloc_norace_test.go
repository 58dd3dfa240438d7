//go:build !race

package staggergrpc

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/staggerhq/stagger/retry"
)

// TestUnaryAllocs bounds what the unary interceptor allocates for one
// successful call on top of the invoker: only the attempt's outgoing
// metadata (metadata.AppendToOutgoingContext: four, the fewest grpc-go's
// metadata API allows for adding keys to a caller's context; grpc-go's
// invoker adds the trailer's copy for pushback). The call's state
// comes from a pool, its request ID from a block (retrydriver.NewID) and its
// header values are made once.
func TestUnaryAllocs(t *testing.T) {
	cc, err := grpc.NewClient("passthrough:///svc", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	invoker := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
		return nil
	}
	for _, c := range []struct {
		name string
		c    *Client
	}{
		{"zero policy", &Client{}},
		{"a policy with a budget header", &Client{Policy: &retry.Policy{MaxAttempts: 4}}},
	} {
		unary := c.c.Unary()
		ctx := context.Background()
		n := testing.AllocsPerRun(1000, func() {
			if err := unary(ctx, "/svc/M", nil, nil, cc, invoker); err != nil {
				t.Fatal(err)
			}
		})
		if n > 4 {
			t.Errorf("%s: %v allocations per call, want at most 4", c.name, n)
		}
	}
}

// TestServerUnaryAllocs bounds what the unary server interceptor allocates
// for one call of a Client's first attempt, with the metadata grpc-go's
// transport hands it (its own keys and the three ledger keys): the three
// ledger values read key by key (metadata.ValueFromIncomingContext copies
// the one key asked for, not every key as FromIncomingContext does) and
// the handler's two context values (the upstream attempt and the
// Delivery).
func TestServerUnaryAllocs(t *testing.T) {
	s := &Server{}
	unary := s.Unary()
	md := metadata.MD{
		":authority": {"svc"}, "content-type": {"application/grpc"},
		"user-agent": {"grpc-go/1.84.0"},
		AttemptKey:   {"1"}, RequestIDKey: {"0123456789abcdef"}, MaxAttemptsKey: {"3"},
	}
	ctx := metadata.NewIncomingContext(context.Background(), md)
	handler := func(ctx context.Context, _ any) (any, error) {
		if d, ok := retry.DeliveryFrom(ctx); !ok || d.Attempt != 1 || d.MaxAttempts != 3 || d.ID != "0123456789abcdef" {
			t.Fatalf("handler's delivery %+v, %v", d, ok)
		}
		return nil, nil
	}
	n := testing.AllocsPerRun(1000, func() {
		if _, err := unary(ctx, nil, nil, handler); err != nil {
			t.Fatal(err)
		}
	})
	if n > 5 {
		t.Errorf("%v allocations per call, want at most 5", n)
	}
}
