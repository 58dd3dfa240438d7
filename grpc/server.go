package staggergrpc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/staggerhq/stagger/limit"
)

// TrackedAttempts is how many attempt numbers a Server counts one by one;
// higher numbers share the last counter.
const TrackedAttempts = 16

// Server is the receiving side's interceptor pair, the gRPC counterpart of
// retryhttp.Guard. It counts the attempts that reach the server by attempt
// number (stagger-attempt, or grpc-previous-rpc-attempts + 1 as grpc-go's
// own retries send it; unmarked calls count as first attempts), puts the
// attempt in the handler's context so a [Client] call made inside the
// handler makes one attempt (a single retry owner across services), and,
// with a Limiter, sheds the calls it cannot take with UNAVAILABLE and a
// grpc-retry-pushback-ms trailer.
//
// The zero value counts and marks; it is safe for concurrent use.
type Server struct {
	// Limiter, if set, must grant a slot for each call; a refused call
	// gets UNAVAILABLE without running its handler.
	Limiter limit.Limiter
	// Pushback is the wait a shed call asks for (grpc-retry-pushback-ms);
	// 0 sends no pushback, negative asks the client not to retry.
	Pushback time.Duration

	byAttempt [TrackedAttempts + 1]atomic.Int64 // [0]: unmarked
	shed      atomic.Int64
}

// Stats is what a Server counted.
type Stats struct {
	// ByAttempt[n] counts calls that arrived as attempt n+1; the last entry
	// holds attempt TrackedAttempts and above.
	ByAttempt [TrackedAttempts]int64
	// Unmarked counts calls with no attempt metadata (counted as first
	// attempts in ByAttempt too).
	Unmarked int64
	// Shed counts calls refused by the Limiter.
	Shed int64
}

// Calls is the number of calls counted.
func (s Stats) Calls() int64 {
	var n int64
	for _, v := range s.ByAttempt {
		n += v
	}
	return n
}

// Stats returns the counts so far.
func (s *Server) Stats() Stats {
	var st Stats
	st.Unmarked = s.byAttempt[0].Load()
	st.ByAttempt[0] = st.Unmarked
	for i := 1; i <= TrackedAttempts; i++ {
		st.ByAttempt[i-1] += s.byAttempt[i].Load()
	}
	st.Shed = s.shed.Load()
	return st
}

type upstreamKey struct{}

// UpstreamAttempt reports the attempt number of the call whose handler ctx
// belongs to, as a Server put it there: an upstream owner retries, so a
// Client call made with ctx makes one attempt.
func UpstreamAttempt(ctx context.Context) (int, bool) {
	n, ok := ctx.Value(upstreamKey{}).(int)
	return n, ok
}

// attempt reads the attempt number of an incoming call; 0 when unmarked.
func attempt(ctx context.Context) int {
	if v, ok := incoming(ctx, AttemptKey); ok {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			return n
		}
	}
	if v, ok := incoming(ctx, PreviousAttemptsKey); ok {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 {
			return n + 1
		}
	}
	return 0
}

// admit counts a call and takes its slot; it returns the handler's context,
// or an error when the call is shed.
func (s *Server) admit(ctx context.Context) (context.Context, error) {
	n := attempt(ctx)
	s.byAttempt[min(n, TrackedAttempts)].Add(1)
	if s.Limiter != nil && !s.Limiter.TryAcquire() {
		s.shed.Add(1)
		if s.Pushback != 0 {
			ms := s.Pushback.Milliseconds()
			if s.Pushback < 0 {
				ms = -1
			}
			_ = grpc.SetTrailer(ctx, metadata.Pairs(PushbackKey, strconv.FormatInt(ms, 10)))
		}
		return nil, status.Error(codes.Unavailable, "staggergrpc: overloaded, call shed")
	}
	return context.WithValue(ctx, upstreamKey{}, max(n, 1)), nil
}

func (s *Server) release(err error) {
	if s.Limiter != nil {
		s.Limiter.Release(err == nil || status.Code(err) != codes.Unavailable && status.Code(err) != codes.ResourceExhausted)
	}
}

// Unary returns the unary server interceptor (grpc.ChainUnaryInterceptor).
func (s *Server) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		hctx, err := s.admit(ctx)
		if err != nil {
			return nil, err
		}
		resp, err := handler(hctx, req)
		s.release(err)
		return resp, err
	}
}

// Stream returns the stream server interceptor (grpc.ChainStreamInterceptor).
func (s *Server) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		hctx, err := s.admit(ss.Context())
		if err != nil {
			return err
		}
		err = handler(srv, &markedStream{ServerStream: ss, ctx: hctx})
		s.release(err)
		return err
	}
}

type markedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (m *markedStream) Context() context.Context { return m.ctx }

// newRequestID returns a random logical request ID.
func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
