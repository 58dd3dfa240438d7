package staggergrpc_test

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	staggergrpc "github.com/staggerhq/stagger/grpc"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retry/drivertest"
)

// TestDriverConformance: the unary interceptor, with an invoker that maps
// the suite's errors to what a server would answer (retryable →
// UNAVAILABLE, After(d) → UNAVAILABLE with grpc-retry-pushback-ms,
// permanent → INVALID_ARGUMENT, a context's error → CANCELLED or
// DEADLINE_EXCEEDED, as grpc-go answers,
// anything else → UNKNOWN), makes the same calls as retry.Do and gives up
// as it does, with the last status as the give-up's error. A panic of the invoker
// (an interceptor further down) goes on with the attempt's slot freed.
func TestDriverConformance(t *testing.T) {
	cc, err := grpc.NewClient("passthrough:///conformance", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	drivertest.Run(t, drivertest.Driver{
		Name:      "staggergrpc.Client.Unary",
		ErrorText: true, // the attempt's error comes back as a status
		Run: func(ctx context.Context, p *retry.Policy, attempt func(context.Context) error) error {
			c := &staggergrpc.Client{Policy: p}
			invoker := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
				return answer(attempt(ctx), opts)
			}
			return c.Unary()(ctx, "/test.Svc/M", nil, nil, cc, invoker)
		},
	})
}

// answer is the status a server would send for the suite's error.
func answer(err error, opts []grpc.CallOption) error {
	if err == nil {
		return nil
	}
	class, after := retry.Classify(err)
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case class == retry.ClassPermanent:
		return status.Error(codes.InvalidArgument, err.Error())
	case class == retry.ClassRetryable:
		if after > 0 {
			for _, o := range opts {
				if tr, ok := o.(grpc.TrailerCallOption); ok {
					*tr.TrailerAddr = metadata.Pairs(staggergrpc.PushbackKey, strconv.FormatInt(after.Milliseconds(), 10))
				}
			}
		}
		return status.Error(codes.Unavailable, err.Error())
	}
	return status.Error(codes.Unknown, err.Error())
}
