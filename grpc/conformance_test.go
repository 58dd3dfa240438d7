package staggergrpc_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/staggerhq/stagger/backoff"
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
	cc := conformanceConn(t)
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
	trailer, st := answerTrailer(err)
	for _, o := range opts {
		if tr, ok := o.(grpc.TrailerCallOption); ok && trailer != nil {
			*tr.TrailerAddr = trailer
		}
	}
	return st
}

// answerTrailer is the status a server would send for the suite's error,
// with its trailer (the pushback of an After error).
func answerTrailer(err error) (metadata.MD, error) {
	if err == nil {
		return nil, nil
	}
	class, after := retry.Classify(err)
	switch {
	case errors.Is(err, context.Canceled):
		return nil, status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return nil, status.Error(codes.DeadlineExceeded, err.Error())
	case class == retry.ClassPermanent:
		return nil, status.Error(codes.InvalidArgument, err.Error())
	case class == retry.ClassRetryable:
		var trailer metadata.MD
		if after > 0 {
			trailer = metadata.Pairs(staggergrpc.PushbackKey, strconv.FormatInt(after.Milliseconds(), 10))
		}
		return trailer, status.Error(codes.Unavailable, err.Error())
	}
	return nil, status.Error(codes.Unknown, err.Error())
}

// TestStreamConformance: the stream interceptor, on a server-streaming
// call whose first RecvMsg runs the suite's attempt (the server's answer,
// as answerTrailer maps it), makes the same calls as retry.Do and gives up
// as it does. A stream commits with its first message: the slot is held
// until the stream ends (io.EOF), after OnSuccess.
func TestStreamConformance(t *testing.T) {
	cc := conformanceConn(t)
	drivertest.Run(t, drivertest.Driver{
		Name:           "staggergrpc.Client.Stream",
		ErrorText:      true, // the attempt's error comes back as a status
		HoldsDelivered: true, // a committed stream holds its slot until it ends
		Run: func(ctx context.Context, p *retry.Policy, attempt func(context.Context) error) error {
			c := &staggergrpc.Client{Policy: p}
			streamer := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				return &suiteStream{ctx: ctx, attempt: attempt}, nil
			}
			cs, err := c.Stream()(ctx, &grpc.StreamDesc{ServerStreams: true}, cc, "/test.Svc/S", streamer)
			if err != nil {
				return err
			}
			if err := cs.RecvMsg(new(struct{})); err != nil {
				return err
			}
			if err := cs.RecvMsg(new(struct{})); err != io.EOF {
				return fmt.Errorf("second message: %v, want io.EOF", err)
			}
			return nil
		},
	})
}

// suiteStream is one attempt's stream: its first RecvMsg runs the attempt,
// the second ends the stream.
type suiteStream struct {
	ctx     context.Context
	attempt func(context.Context) error
	trailer metadata.MD
	recv    int
}

func (s *suiteStream) Header() (metadata.MD, error) { return nil, nil }
func (s *suiteStream) Trailer() metadata.MD         { return s.trailer }
func (s *suiteStream) CloseSend() error             { return nil }
func (s *suiteStream) Context() context.Context     { return s.ctx }
func (s *suiteStream) SendMsg(any) error            { return nil }

func (s *suiteStream) RecvMsg(any) error {
	s.recv++
	if s.recv > 1 {
		return io.EOF
	}
	var err error
	s.trailer, err = answerTrailer(s.attempt(s.ctx))
	return err
}

// conformanceConn is a client connection that never dials: the suite's
// invoker and streamer answer in its place.
func conformanceConn(t *testing.T) *grpc.ClientConn {
	cc, err := grpc.NewClient("passthrough:///conformance", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// TestGiveUpKeepsClass: a give-up's error carries the class its last
// attempt was judged by, so a retry owner further up (a handler's caller)
// reads the class the call decided with; the status stays readable.
func TestGiveUpKeepsClass(t *testing.T) {
	cc := conformanceConn(t)
	for _, tt := range []struct {
		code    codes.Code
		trailer metadata.MD
		want    retry.Class
		after   time.Duration
	}{
		{codes.InvalidArgument, nil, retry.ClassPermanent, 0},
		{codes.Unavailable, nil, retry.ClassRetryable, 0},
		{codes.Unavailable, metadata.Pairs(staggergrpc.PushbackKey, "7"), retry.ClassRetryable, 7 * time.Millisecond},
		{codes.Unknown, nil, retry.ClassUnknown, 0},
	} {
		c := &staggergrpc.Client{Policy: &retry.Policy{MaxAttempts: 2, Schedule: backoff.Constant(0), MaxAfter: time.Second}}
		invoker := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
			for _, o := range opts {
				if tr, ok := o.(grpc.TrailerCallOption); ok && tt.trailer != nil {
					*tr.TrailerAddr = tt.trailer
				}
			}
			return status.Error(tt.code, "no")
		}
		err := c.Unary()(context.Background(), "/test.Svc/M", nil, nil, cc, invoker)
		if got := status.Code(err); got != tt.code {
			t.Errorf("%v: status code %v", tt.code, got)
		}
		if class, after := retry.Classify(err); class != tt.want || after != tt.after {
			t.Errorf("%v: give-up %v classes %v after %v, want %v after %v", tt.code, err, class, after, tt.want, tt.after)
		}
	}
}
