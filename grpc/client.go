// Package staggergrpc retries gRPC calls with stagger's one attempt step
// (retry.Step), the rules of gRPC's own retry design (proposal A6: retry
// policy, retry throttling, server pushback) and a single retry owner
// across services.
//
// A [Client] gives unary and streaming client interceptors; a [Server]
// gives the server interceptors that count attempts as the receiving side
// sees them, mark the context so calls made inside a handler make one
// attempt, and shed load with UNAVAILABLE plus pushback.
// [ParseServiceConfig] reads a service config's retryPolicy and
// retryThrottling into a Client, so a team keeps its existing JSON.
//
// Turn grpc-go's own retries off on channels that use the Client
// (grpc.WithDisableRetry()), or both layers retry: that is the stampede
// this package exists to prevent.
package staggergrpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/staggerhq/stagger/budget"
	"github.com/staggerhq/stagger/internal/wait"
	"github.com/staggerhq/stagger/retry"
)

// Metadata keys on the wire.
const (
	// PreviousAttemptsKey is grpc-go's count of the attempts made before
	// this one (A6), sent on every retry.
	PreviousAttemptsKey = "grpc-previous-rpc-attempts"
	// PushbackKey is the trailer a server sets to ask for a wait (ms) or,
	// negative or malformed, for no retry (A6).
	PushbackKey = "grpc-retry-pushback-ms"
	// AttemptKey carries stagger's attempt number (from 1).
	AttemptKey = "stagger-attempt"
	// RequestIDKey carries the logical request's ID, the same on every
	// attempt and across services.
	RequestIDKey = "stagger-request-id"
)

// Defaults of a Client's zero fields.
const (
	// DefaultMaxBuffer bounds the bytes of request messages a streaming
	// call keeps to replay on a retry (A6's per-RPC buffer limit); past it
	// the stream is committed and not retried.
	DefaultMaxBuffer = 256 << 10
	// DefaultMaxTargets bounds the per-target budget registry; targets
	// beyond it share one extra budget.
	DefaultMaxTargets = 1024
)

// ErrInvalid is wrapped by configuration errors; the message names the
// field and the rule.
var ErrInvalid = errors.New("staggergrpc: invalid configuration")

// Client retries RPCs under a retry.Policy. Each attempt runs through
// retry.Step, so the attempt count, schedule, per-attempt timeout inside
// the call's deadline, budget, limiter, hooks and pushback cap behave as in
// retry.Do and every other stagger driver.
//
// Status codes are classed in stagger's vocabulary: UNAVAILABLE is
// retryable; RESOURCE_EXHAUSTED and ABORTED are retryable when listed in
// RetryCodes; INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS,
// PERMISSION_DENIED, UNAUTHENTICATED, FAILED_PRECONDITION, OUT_OF_RANGE
// and UNIMPLEMENTED are permanent; DEADLINE_EXCEEDED is retried only when
// the attempt's own timeout fired and the call's deadline leaves time; the
// rest go to Classify (nil: returned to the caller unretried). A server's
// grpc-retry-pushback-ms trailer sets the next wait (capped by
// Policy.MaxAfter and the deadline, like Retry-After); a negative or
// malformed value stops the retries.
//
// A call made inside a handler of a [Server] interceptor (an upstream
// owner already retries) makes one attempt, carrying the incoming attempt
// number and budget (stagger-max-attempts), unless NestedRetries is set. A
// call inside other work that has a budget (retry.DeliveryFrom: a queue
// job, a broker message) counts on from that work's attempts, within its
// budget and deadline.
// Configure a Client before its first use; it is safe for concurrent use.
type Client struct {
	// Policy holds the retry rules; nil means the zero Policy. Its Budget
	// is shared by every target unless NewBudget is set.
	Policy *retry.Policy
	// RetryCodes lists further codes to retry (RESOURCE_EXHAUSTED,
	// ABORTED, or any other).
	RetryCodes []codes.Code
	// Classify, if set, classes the statuses the rules above leave
	// unknown.
	Classify func(*status.Status) retry.Class
	// NewBudget, if set, makes the budget of each target
	// (ClientConn.Target()) on its first call, shared by every channel to
	// it; it replaces Policy.Budget. budget.GRPC is A6's throttle.
	NewBudget func(target string) budget.Budget
	// MaxTargets bounds the per-target registry; 0 means DefaultMaxTargets.
	MaxTargets int
	// NestedRetries lets calls under an upstream owner retry.
	NestedRetries bool
	// MaxBuffer bounds a stream's replay buffer in bytes; 0 means
	// DefaultMaxBuffer.
	MaxBuffer int
	// Methods, if set, gives methods rules of their own, keyed by full
	// method ("/pkg.Service/Method"), by service ("/pkg.Service/") or ""
	// for every other method, as a service config's methodConfig names
	// them. A method with no entry uses Policy and RetryCodes.
	Methods map[string]Method

	once    sync.Once
	initErr error
	mu      sync.Mutex
	targets map[targetKey]*retry.Policy
	budgets map[string]budget.Budget
}

// Method is the retry rules of some methods.
type Method struct {
	// Policy replaces Client.Policy for these methods (its Budget is
	// replaced by the target's when Client.NewBudget is set).
	Policy *retry.Policy
	// RetryCodes, if set, are the only codes retried, as in a service
	// config's retryableStatusCodes: every other code is permanent (A6).
	RetryCodes []codes.Code
}

type targetKey struct{ target, method string }

// rules returns the Method that applies to method: its own entry, its
// service's, the "" entry, or the Client's fields.
func (c *Client) rules(method string) (string, Method) {
	if c.Methods != nil {
		if m, ok := c.Methods[method]; ok {
			return method, m
		}
		if i := strings.LastIndexByte(method, '/'); i > 0 {
			if m, ok := c.Methods[method[:i+1]]; ok {
				return method[:i+1], m
			}
		}
		if m, ok := c.Methods[""]; ok {
			return "", m
		}
	}
	return "\x00", Method{Policy: c.Policy}
}

func (c *Client) init() error {
	c.once.Do(func() {
		policies := []*retry.Policy{c.Policy}
		for name, m := range c.Methods {
			if m.Policy == nil {
				c.initErr = fmt.Errorf("%w: Client.Methods[%q].Policy must be set", ErrInvalid, name)
				return
			}
			policies = append(policies, m.Policy)
		}
		for _, p := range policies {
			if p == nil {
				continue
			}
			if err := p.Validate(); err != nil {
				c.initErr = err
				return
			}
		}
		switch {
		case c.MaxTargets < 0:
			c.initErr = fmt.Errorf("%w: Client.MaxTargets must be >= 0 (0 means %d), got %d", ErrInvalid, DefaultMaxTargets, c.MaxTargets)
		case c.MaxBuffer < 0:
			c.initErr = fmt.Errorf("%w: Client.MaxBuffer must be >= 0 (0 means %d), got %d", ErrInvalid, DefaultMaxBuffer, c.MaxBuffer)
		}
		c.targets = map[targetKey]*retry.Policy{}
		c.budgets = map[string]budget.Budget{}
	})
	return c.initErr
}

var zeroPolicy retry.Policy

// policy returns the Policy of a call to method on target: the method's
// rules with the target's budget.
func (c *Client) policy(target, method string) (*retry.Policy, Method) {
	key, m := c.rules(method)
	if c.NewBudget == nil {
		if m.Policy == nil {
			return &zeroPolicy, m
		}
		return m.Policy, m
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.budgets) >= c.maxTargets() {
		if _, ok := c.budgets[target]; !ok {
			target = "" // beyond the bound: one shared entry
		}
	}
	k := targetKey{target, key}
	if p := c.targets[k]; p != nil {
		return p, m
	}
	b, ok := c.budgets[target]
	if !ok {
		b = c.NewBudget(target)
		c.budgets[target] = b
	}
	p := &retry.Policy{}
	if m.Policy != nil {
		*p = *m.Policy
	}
	p.Budget = b
	c.targets[k] = p
	return p, m
}

func (c *Client) maxTargets() int {
	if c.MaxTargets == 0 {
		return DefaultMaxTargets
	}
	return c.MaxTargets
}

// Budget returns the budget the Client uses for target (nil if none).
func (c *Client) Budget(target string) budget.Budget {
	if c.init() != nil {
		return nil
	}
	p, _ := c.policy(target, "")
	return p.Budget
}

// call is the state of one RPC: its Step and its classing rules.
type call struct {
	c      *Client
	s      retry.Step
	m      Method
	budget string // MaxAttemptsKey's value (ledger.go)
}

// newCall starts the ledger of one call.
func (c *Client) newCall(ctx context.Context, target, method string) *call {
	p, m := c.policy(target, method)
	k := &call{c: c, m: m, s: retry.Step{Policy: p, Delivery: retry.Delivery{Source: "grpc"}}}
	if id, ok := incoming(ctx, RequestIDKey); ok {
		k.s.Delivery.ID = id
	} else {
		k.s.Delivery.ID = newRequestID()
	}
	if _, ok := UpstreamAttempt(ctx); ok && !c.NestedRetries {
		k.s.Delivery.MaxAttempts = 1
	}
	k.ledger(ctx)
	return k
}

// outgoing adds the attempt's metadata to ctx.
func outgoing(ctx context.Context, d *retry.Delivery, budget string) context.Context {
	n := d.Attempt
	if budget != "" { // the ledger's budget (ledger.go), in the same call
		if n > 1 {
			return metadata.AppendToOutgoingContext(ctx, AttemptKey, strconv.Itoa(n),
				RequestIDKey, d.ID, PreviousAttemptsKey, strconv.Itoa(n-1), MaxAttemptsKey, budget)
		}
		return metadata.AppendToOutgoingContext(ctx, AttemptKey, "1", RequestIDKey, d.ID, MaxAttemptsKey, budget)
	}
	if n > 1 {
		return metadata.AppendToOutgoingContext(ctx, AttemptKey, strconv.Itoa(n),
			RequestIDKey, d.ID, PreviousAttemptsKey, strconv.Itoa(n-1))
	}
	return metadata.AppendToOutgoingContext(ctx, AttemptKey, "1", RequestIDKey, d.ID)
}

// Unary returns the unary client interceptor, for grpc.WithUnaryInterceptor
// or grpc.WithChainUnaryInterceptor.
func (c *Client) Unary() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if err := c.init(); err != nil {
			return err
		}
		k := c.newCall(ctx, cc.Target(), method)
		if err := k.exhausted(); err != nil {
			return statusErr(ctx, err)
		}
		err := k.s.Do(ctx, func(actx context.Context) error {
			var trailer metadata.MD
			err := invoker(outgoing(actx, &k.s.Delivery, k.budget), method, req, reply, cc, append(opts, grpc.Trailer(&trailer))...)
			return attemptDeadline(ctx, actx, k.classify(err, trailer))
		})
		return statusErr(ctx, err)
	}
}

// attemptDeadline ties a CANCELLED or DEADLINE_EXCEEDED that came with
// the end of the call's context to that end (the attempt is interrupted,
// not judged), and makes a DEADLINE_EXCEEDED retryable when it ended an
// attempt bounded by its own timeout while the call's context is live:
// the server's answer can arrive a moment before the attempt's own timer
// fires, which the Step's own-timeout rule would miss.
func attemptDeadline(ctx, actx context.Context, err error) error {
	code := status.Code(err)
	if cerr := ctx.Err(); cerr != nil {
		if code == codes.Canceled || code == codes.DeadlineExceeded {
			// The call's own end: say so, so the Step sees an interrupted
			// attempt (a status error does not wrap the context's error).
			return fmt.Errorf("%w (%w)", err, cerr)
		}
		return err
	}
	if code != codes.DeadlineExceeded {
		return err
	}
	if c, _ := retry.Classify(err); c != retry.ClassUnknown {
		return err
	}
	adl, ok := actx.Deadline()
	if !ok {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !adl.Before(dl) {
		return err // the call's own deadline: no time left to retry
	}
	return retry.Retryable(err)
}

// statusErr keeps a give-up a gRPC status error: a retry.Error wraps the
// last attempt's status (status.Code sees it); a give-up with no attempt's
// error (the context ended, a refusal) becomes a status of its own.
func statusErr(ctx context.Context, err error) error {
	var e *retry.Error
	if err == nil || !errors.As(err, &e) || e.Err != nil {
		return err
	}
	switch e.Reason {
	case retry.Canceled, retry.Deadline:
		if cerr := ctx.Err(); cerr != nil {
			return status.FromContextError(cerr).Err()
		}
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Unavailable, err.Error()) // budget, limiter: the client sheds
}

// classify classes an attempt's error for the Step.
func (k *call) classify(err error, trailer metadata.MD) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	c := k.c
	var class retry.Class
	switch code := st.Code(); {
	case k.m.RetryCodes != nil:
		class = retry.ClassPermanent
		for _, r := range k.m.RetryCodes {
			if r == code {
				class = retry.ClassRetryable
			}
		}
	default:
		class = c.classOf(st)
	}
	switch class {
	case retry.ClassPermanent:
		return retry.Permanent(err)
	case retry.ClassRetryable:
		if v := trailer.Get(PushbackKey); len(v) > 0 {
			ms, perr := strconv.ParseInt(v[0], 10, 64)
			if perr != nil || ms < 0 {
				return retry.Permanent(err) // the server said: do not retry
			}
			return retry.After(err, time.Duration(min(ms, int64(time.Duration(1<<62)/time.Millisecond)))*time.Millisecond)
		}
		return retry.Retryable(err)
	}
	return err // unknown: DEADLINE_EXCEEDED of an attempt is the Step's own-timeout rule
}

// classOf classes a status by the Client's own rules.
func (c *Client) classOf(st *status.Status) retry.Class {
	switch code := st.Code(); code {
	case codes.Unavailable:
		return retry.ClassRetryable
	case codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.PermissionDenied,
		codes.Unauthenticated, codes.FailedPrecondition, codes.OutOfRange, codes.Unimplemented:
		return retry.ClassPermanent
	default:
		for _, r := range c.RetryCodes {
			if r == code {
				return retry.ClassRetryable
			}
		}
		if c.Classify != nil {
			return c.Classify(st)
		}
	}
	return retry.ClassUnknown
}

// Stream returns the streaming client interceptor. A stream is retried
// only until it commits (A6): until the first response message or the
// response headers arrive, or its request messages outgrow MaxBuffer.
// Until then the request messages sent are kept and replayed on a new
// stream for each retry.
func (c *Client) Stream() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if err := c.init(); err != nil {
			return nil, err
		}
		rs := &retryStream{call: c.newCall(ctx, cc.Target(), method), ctx: ctx, desc: desc, cc: cc, method: method, streamer: streamer, opts: opts}
		if err := rs.exhausted(); err != nil {
			return nil, statusErr(ctx, err)
		}
		rs.max = c.MaxBuffer
		if rs.max == 0 {
			rs.max = DefaultMaxBuffer
		}
		if err := rs.start(); err != nil {
			return nil, statusErr(ctx, err)
		}
		return rs, nil
	}
}

// retryStream is one streaming call: the current attempt's stream and
// what a retry needs to replay.
type retryStream struct {
	*call
	ctx      context.Context
	desc     *grpc.StreamDesc
	cc       *grpc.ClientConn
	method   string
	streamer grpc.Streamer
	opts     []grpc.CallOption

	cur       grpc.ClientStream
	actx      context.Context // the current attempt's context
	sent      []any           // request messages, kept until commit
	size      int
	max       int
	closed    bool // CloseSend was called
	committed bool
	ended     bool // the Step's attempt was judged
	wait      wait.Waiter
}

// start begins an attempt: a new stream with the attempt's metadata, and
// the kept request messages replayed on it.
func (r *retryStream) start() error {
	for {
		var now time.Time
		if r.s.NeedsNow(r.ctx) {
			now = time.Now()
		}
		if r.s.Begin(r.ctx, now) != retry.NoReason {
			return r.s.Err()
		}
		r.ended = false
		r.actx = r.s.Context()
		cs, err := r.streamer(outgoing(r.actx, &r.s.Delivery, r.budget), r.desc, r.cc, r.method, r.opts...)
		if err == nil {
			for _, m := range r.sent {
				if err = cs.SendMsg(m); err != nil {
					break
				}
			}
			if err == nil && r.closed {
				err = cs.CloseSend()
			}
			if err == nil {
				r.cur = cs
				return nil
			}
			if err == io.EOF { // the server ended the stream: its status is in RecvMsg
				err = cs.RecvMsg(new(struct{}))
			}
		}
		if again, gerr := r.failed(err, nil); !again {
			return gerr
		}
	}
}

// failed judges a failed, uncommitted attempt and waits for the retry.
// It reports whether to retry; otherwise the error to return.
func (r *retryStream) failed(err error, trailer metadata.MD) (bool, error) {
	var now time.Time
	if r.s.NeedsNow(r.ctx) {
		now = time.Now()
	}
	r.ended = true
	dec := r.s.End(attemptDeadline(r.ctx, r.actx, r.classify(err, trailer)), now)
	if !dec.Retry {
		if e := r.s.Err(); e != nil {
			return false, statusErr(r.ctx, e)
		}
		return false, err
	}
	if dec.Delay > 0 {
		if werr := r.wait.Wait(r.ctx, r.s.Policy.Clock, dec.Delay); werr != nil {
			return false, status.FromContextError(werr).Err()
		}
	}
	return true, nil
}

// commit ends retrying: the attempt is judged a success (the server
// answered), its slot and context kept until the stream ends.
func (r *retryStream) commit() {
	if r.committed {
		return
	}
	r.committed, r.sent = true, nil
	if !r.ended {
		r.ended = true
		var now time.Time
		if r.s.NeedsNow(r.ctx) {
			now = time.Now()
		}
		r.s.Hold()
		r.s.End(nil, now)
	}
}

func (r *retryStream) Header() (metadata.MD, error) {
	md, err := r.cur.Header()
	if err == nil && len(md) > 0 {
		r.commit() // headers came: the server is answering (A6)
	}
	return md, err
}

func (r *retryStream) Trailer() metadata.MD     { return r.cur.Trailer() }
func (r *retryStream) Context() context.Context { return r.cur.Context() }

func (r *retryStream) CloseSend() error {
	r.closed = true
	return r.cur.CloseSend()
}

func (r *retryStream) SendMsg(m any) error {
	if !r.committed && r.sent != nil || !r.committed && r.s.Delivery.MaxAttempts != r.s.Delivery.Attempt {
		pm, ok := m.(proto.Message)
		if ok {
			r.size += proto.Size(pm)
		}
		if !ok || r.size > r.max {
			// Cannot be replayed: this attempt is the last.
			r.sent = nil
			r.s.Delivery.MaxAttempts = r.s.Delivery.Attempt
		} else {
			r.sent = append(r.sent, m)
		}
	}
	return r.cur.SendMsg(m)
}

func (r *retryStream) RecvMsg(m any) error {
	for {
		err := r.cur.RecvMsg(m)
		if r.committed {
			if err != nil {
				r.s.Release() // the stream ended
			}
			return err
		}
		if err == nil {
			r.commit()
			return nil
		}
		if err == io.EOF { // ended OK before any message: a success
			r.commit()
			r.s.Release()
			return err
		}
		again, gerr := r.failed(err, r.cur.Trailer())
		if !again {
			return gerr
		}
		if serr := r.start(); serr != nil {
			return statusErr(r.ctx, serr)
		}
	}
}

// incoming returns the first value of key in ctx's incoming metadata.
func incoming(ctx context.Context, key string) (string, bool) {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return "", false
	}
	v := md.Get(key)
	if len(v) == 0 || v[0] == "" || len(v[0]) > 128 {
		return "", false
	}
	return v[0], true
}
