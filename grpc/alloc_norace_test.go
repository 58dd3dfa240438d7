//go:build !race

package staggergrpc

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/staggerhq/stagger/retry"
)

// TestUnaryAllocs bounds what the unary interceptor allocates for one
// successful call on top of the invoker: only the attempt's outgoing
// metadata (metadata.AppendToOutgoingContext: four). The call's state
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
