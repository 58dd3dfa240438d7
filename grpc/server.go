package staggergrpc

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/staggerhq/stagger/internal/wire"
	"github.com/staggerhq/stagger/limit"
)

// DefaultMaxTimeout is the longest deadline a client's grpc-timeout gives a
// handler when Server.MaxTimeout is not set.
const DefaultMaxTimeout = wire.DefaultMaxTimeout

// TrackedAttempts is how many attempt numbers a Server counts one by one;
// higher numbers share the last counter.
const TrackedAttempts = 16

// Server is the receiving side's interceptor pair, the gRPC counterpart of
// retryhttp.Guard. It counts the attempts that reach the server by attempt
// number (stagger-attempt, or grpc-previous-rpc-attempts + 1 as grpc-go's
// own retries send it; unmarked calls, and calls whose number is not a
// decimal integer in [1, 2^20], count as first attempts), puts the
// attempt in the handler's context so a [Client] call made inside the
// handler makes one attempt (a single retry owner across services), and,
// with a Limiter, sheds the calls it cannot take with UNAVAILABLE and a
// grpc-retry-pushback-ms trailer.
//
// Every value a client sends is read by one rule (docs/architecture.md,
// "Values from the wire"): the attempt number as above; the call's
// deadline (grpc-timeout) clamped to MaxTimeout, so a client cannot hand a
// handler a deadline further away than the server allows; and a
// stagger-request-id that is not 1 to 255 bytes of printable ASCII is
// removed from the handler's incoming metadata, so a Client call made
// inside the handler sends a fresh one.
//
// The handler's context carries the call's ledger as a retry.Delivery
// (Source "grpc"): the request ID, the attempt number, the attempt budget
// (stagger-max-attempts, clamped to MaxAttempts) and the deadline, so work
// it hands on (queue.Handoff, a broker's publisher) or a Client call it
// makes continues from them. A call whose request ID was seen before
// without a higher attempt number is counted as a repeat (Stats.Repeats):
// grpc-go's own retries or hedges below a Client re-send the attempt's
// metadata, and show up there.
//
// The zero value counts and marks; it is safe for concurrent use.
type Server struct {
	// Limiter, if set, must grant a slot for each call; a refused call
	// gets UNAVAILABLE without running its handler.
	Limiter limit.Limiter
	// Pushback is the wait a shed call asks for (grpc-retry-pushback-ms);
	// 0 sends no pushback, negative asks the client not to retry.
	Pushback time.Duration
	// MaxTimeout bounds the deadline a client's grpc-timeout gives a
	// handler: a call whose deadline is further away runs with now +
	// MaxTimeout instead. 0 or negative means DefaultMaxTimeout.
	MaxTimeout time.Duration
	// MaxAttempts bounds the attempt budget a client's stagger-max-attempts
	// gives the work (the handler's Delivery.MaxAttempts): a larger budget
	// counts as MaxAttempts. 0 or negative means DefaultMaxBudget.
	MaxAttempts int
	// MaxIDs bounds the table of request IDs that repeats are counted
	// against; the oldest is evicted first. 0 means 16384; negative turns
	// repeat counting off.
	MaxIDs int

	ids       wire.Repeats
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
	// Repeats counts calls whose stagger-request-id had been seen before,
	// without an attempt number or with one no higher than the highest
	// seen for it: re-sends no attempt number marks, such as grpc-go's own
	// retries (or a hedge) below a Client, which repeat the metadata of
	// the attempt they re-send. They are counted in ByAttempt too.
	Repeats int64
	// Evicted counts IDs dropped from the full table; a repeat of one of
	// them counts as new.
	Evicted int64
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
	st.Repeats, st.Evicted = s.ids.Repeats(), s.ids.Evicted()
	return st
}

type upstreamKey struct{}

// WithUpstreamAttempt returns a context saying that the work it carries is
// attempt n (n >= 1) of a retry owner upstream; n < 1 leaves the work
// unmarked ([UpstreamAttempt] reports none). A [Client] call made with
// this context makes one attempt and forwards n in stagger-attempt, with
// the budget of the work the context carries in stagger-max-attempts
// ([retry.DeliveryFrom]), instead of adding retries of its own (unless
// Client.NestedRetries is set). A [Server] does this for every call it
// serves; call it yourself when the work reaches you another way — a queue
// job or a broker message whose call is one attempt of the job
// (WithUpstreamAttempt(ctx, d.Attempt)), so it is sent on the job's last
// attempt too.
func WithUpstreamAttempt(ctx context.Context, n int) context.Context {
	return context.WithValue(ctx, upstreamKey{}, n)
}

// UpstreamAttempt reports the attempt number of the upstream owner ctx
// carries: as a Server put it in its handler's context, or
// [WithUpstreamAttempt]. A Client call made with ctx makes one attempt.
func UpstreamAttempt(ctx context.Context) (int, bool) {
	n, ok := ctx.Value(upstreamKey{}).(int)
	return n, ok && n > 0
}

// ledgerMD is the ledger's metadata of an admitted call, read key by key:
// metadata.ValueFromIncomingContext copies the one key asked for, where
// FromIncomingContext would copy every key the call carries.
type ledgerMD struct {
	id, budget []string
}

func readLedger(ctx context.Context) ledgerMD {
	return ledgerMD{
		id:     metadata.ValueFromIncomingContext(ctx, RequestIDKey),
		budget: metadata.ValueFromIncomingContext(ctx, MaxAttemptsKey),
	}
}

// attempt reads the attempt number of an incoming call by the rule for
// values from the wire (internal/wire): stagger-attempt in [1, 2^20], else
// grpc-previous-rpc-attempts + 1 in the same range; 0 when unmarked or
// unreadable (a value out of range or not a decimal integer).
func attempt(ctx context.Context) int {
	if v := metadata.ValueFromIncomingContext(ctx, AttemptKey); len(v) > 0 {
		if n, ok := wire.ParseAttempt(v[0]); ok {
			return n
		}
	}
	if v := metadata.ValueFromIncomingContext(ctx, PreviousAttemptsKey); len(v) > 0 {
		if n, ok := wire.ParsePreviousAttempts(v[0]); ok {
			return n
		}
	}
	return 0
}

// checkedID returns ctx with the incoming request ID removed when it
// breaks the rule for IDs from the wire (wire.ValidID), so a Client call
// the handler makes forwards a fresh ID instead.
func checkedID(ctx context.Context, l ledgerMD) context.Context {
	if len(l.id) == 0 || len(l.id) == 1 && wire.ValidID(l.id[0]) {
		return ctx
	}
	md, _ := metadata.FromIncomingContext(ctx) // a copy
	delete(md, RequestIDKey)
	return metadata.NewIncomingContext(ctx, md)
}

// bounded returns ctx with its deadline (the client's grpc-timeout, as
// grpc-go applies it) clamped to now + MaxTimeout; cancel is nil when ctx
// needed no new deadline.
func (s *Server) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	own, ok := ctx.Deadline()
	if !ok {
		return ctx, nil
	}
	now := time.Now()
	dl, shorter := wire.Deadline(now, own.Sub(now), s.MaxTimeout, own, true)
	if !shorter {
		return ctx, nil
	}
	return context.WithDeadline(ctx, dl)
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
	l := readLedger(ctx)
	d := s.delivery(ctx, l, n)
	return d.NewContext(WithUpstreamAttempt(checkedID(ctx, l), max(n, 1))), nil
}

func (s *Server) release(err error) {
	if s.Limiter != nil {
		s.Limiter.Release(err == nil || status.Code(err) != codes.Unavailable && status.Code(err) != codes.ResourceExhausted)
	}
}

// Unary returns the unary server interceptor (grpc.ChainUnaryInterceptor).
func (s *Server) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, cancel := s.bounded(ctx)
		if cancel != nil {
			defer cancel()
		}
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
		ctx, cancel := s.bounded(ss.Context())
		if cancel != nil {
			defer cancel()
		}
		hctx, err := s.admit(ctx)
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
