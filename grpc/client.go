// Package staggergrpc retries gRPC calls with stagger's one attempt step
// (retrydriver.Step), the rules of gRPC's own retry design (proposal A6: retry
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
	"github.com/staggerhq/stagger/grpc/retryconfig"
	"github.com/staggerhq/stagger/internal/wait"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retry/retrydriver"
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
// field and the rule. It is retryconfig.ErrInvalid.
var ErrInvalid = retryconfig.ErrInvalid

// Client retries RPCs under a retry.Policy. Each attempt runs through
// retrydriver.Step, so the attempt count, schedule, per-attempt timeout inside
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
// owner already retries), or with a context of [WithUpstreamAttempt],
// makes one attempt, carrying the incoming attempt number and budget
// (stagger-max-attempts), unless NestedRetries is set. A
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

// Method is the retry rules of some methods: Policy replaces
// Client.Policy for these methods (its Budget is replaced by the target's
// when Client.NewBudget is set); RetryCodes, if set, are the only codes
// retried, as in a service config's retryableStatusCodes: every other code
// is permanent (A6).
type Method = retryconfig.Method

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
	c       *Client
	s       retrydriver.Step
	m       Method
	trailer metadata.MD // the attempt's trailer, for its pushback
	budget  string      // MaxAttemptsKey's value (ledger.go)

	// A unary call's options, the caller's and grpc.Trailer(&trailer),
	// while they fit (unaryOpts).
	optBuf [6]grpc.CallOption
}

// calls are the states of unary calls, which nothing reaches once the
// interceptor returns (the invoker below it returns when its call is
// over, as grpc-go's does, having written the trailer): the Step's
// Classifier (a method value) and the option buffer are made once per
// pooled call, not per call.
var calls = sync.Pool{New: func() any { return newCallState() }}

func newCallState() *call {
	k := new(call)
	k.s.Classifier = k.verdict
	return k
}

// newCall starts the ledger of one call.
func (c *Client) newCall(ctx context.Context, target, method string) *call {
	k := newCallState()
	c.startCall(k, ctx, target, method)
	return k
}

// startCall makes k, fresh or from the pool, the state of a call to method
// on target and starts its ledger.
func (c *Client) startCall(k *call, ctx context.Context, target, method string) {
	p, m := c.policy(target, method)
	*k = call{c: c, m: m, s: retrydriver.Step{Policy: p, Classifier: k.s.Classifier, Delivery: retry.Delivery{Source: "grpc"}}}
	if v := metadata.ValueFromIncomingContext(ctx, RequestIDKey); len(v) > 0 && v[0] != "" && len(v[0]) <= 128 {
		k.s.Delivery.ID = v[0]
	}
	k.ledger(ctx) // else the ID of the work ctx carries, if readable
	if k.s.Delivery.ID == "" {
		k.s.Delivery.ID = retrydriver.NewID()
	}
}

// unaryOpts is opts with grpc.Trailer(&k.trailer) after them, in the
// call's buffer while they fit.
func (k *call) unaryOpts(opts []grpc.CallOption) []grpc.CallOption {
	buf := k.optBuf[:0]
	if len(opts) >= len(k.optBuf) {
		buf = make([]grpc.CallOption, 0, len(opts)+1)
	}
	return append(append(buf, opts...), grpc.Trailer(&k.trailer))
}

// release gives a unary call's state back to the pool, holding nothing.
func (k *call) release() {
	clear(k.optBuf[:])
	*k = call{s: retrydriver.Step{Classifier: k.s.Classifier}}
	calls.Put(k)
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
		k := calls.Get().(*call)
		defer k.release()
		c.startCall(k, ctx, cc.Target(), method)
		if err := k.s.Delivery.Exhausted(); err != nil {
			return statusErr(ctx, err)
		}
		opts = k.unaryOpts(opts)
		err := k.s.Do(ctx, func(actx context.Context) error {
			k.trailer = nil
			return invoker(outgoing(actx, &k.s.Delivery, k.budget), method, req, reply, cc, opts...)
		})
		if err == nil {
			return nil
		}
		return statusErr(ctx, k.marked(err))
	}
}

// marked gives the last attempt's error in the give-up err the class the
// Step judged it by (Step.Judged), so a caller that retries in turn (the
// single retry owner further up) reads the class this call decided with.
func (k *call) marked(err error) error {
	if err == nil {
		return nil
	}
	class, after := k.s.Judged()
	mark := func(e error) error {
		if c, _ := retry.Classify(e); c != retry.ClassUnknown {
			return e
		}
		switch {
		case class == retry.ClassPermanent:
			return retry.Permanent(e)
		case class == retry.ClassRetryable && after > 0:
			return retry.After(e, after)
		case class == retry.ClassRetryable:
			return retry.Retryable(e)
		}
		return e
	}
	var e *retry.Error
	if errors.As(err, &e) {
		if e.Err != nil {
			e.Err = mark(e.Err)
		}
		return err
	}
	return mark(err)
}

// statusErr keeps a give-up a gRPC status error: a retry.Error wraps the
// last attempt's status (status.Code sees it); a give-up with no attempt's
// error (the context ended, a refusal) becomes a status of its own that
// still wraps the retry.Error (errors.Is sees its reason's sentinel).
func statusErr(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	var e *retry.Error
	if !errors.As(err, &e) || e.Err != nil {
		return err
	}
	code := codes.Unavailable // budget, limiter: the client sheds
	switch e.Reason {
	case retry.Canceled, retry.Deadline:
		code = codes.DeadlineExceeded
		if cerr := ctx.Err(); cerr != nil {
			code = status.FromContextError(cerr).Code()
		}
	}
	return &giveUp{err: e, st: status.New(code, err.Error())}
}

// giveUp is a give-up without an attempt's error: a gRPC status for
// status.FromError, a *retry.Error for errors.Is and errors.As.
type giveUp struct {
	err *retry.Error
	st  *status.Status
}

func (g *giveUp) Error() string              { return g.st.Err().Error() }
func (g *giveUp) Unwrap() error              { return g.err }
func (g *giveUp) GRPCStatus() *status.Status { return g.st }

// verdict is the call's Classifier (retrydriver.Step.Classifier): a status's
// class by the method's RetryCodes or the Client's rules, the pushback its
// trailer asks for (a malformed or negative one says: do not retry), and
// which statuses report the end of a context — CANCELLED and
// DEADLINE_EXCEEDED, interrupted when the call's context ended — or of a
// deadline — DEADLINE_EXCEEDED, the attempt's own timeout when the call's
// context is live and the attempt was bounded (the server's answer can
// come a moment before the attempt's own timer fires). The Step applies
// those two rules, as for every driver.
func (k *call) verdict(err error) retrydriver.Verdict {
	st, ok := status.FromError(err)
	if !ok {
		return retrydriver.Verdict{}
	}
	var v retrydriver.Verdict
	switch code := st.Code(); {
	case k.m.RetryCodes != nil:
		v.Class = retry.ClassPermanent
		for _, r := range k.m.RetryCodes {
			if r == code {
				v.Class = retry.ClassRetryable
			}
		}
	default:
		v.Class = k.c.classOf(st)
	}
	switch st.Code() {
	case codes.Canceled:
		v.Ended = true
	case codes.DeadlineExceeded:
		v.Ended, v.Expired = true, true
	}
	if v.Class == retry.ClassRetryable {
		if p := k.trailer.Get(PushbackKey); len(p) > 0 {
			ms, perr := strconv.ParseInt(p[0], 10, 64)
			if perr != nil || ms < 0 {
				v.Class = retry.ClassPermanent // the server said: do not retry
			} else {
				v.After = time.Duration(min(ms, int64(time.Duration(1<<62)/time.Millisecond))) * time.Millisecond
			}
		}
	}
	return v
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
		if err := rs.s.Delivery.Exhausted(); err != nil {
			return nil, statusErr(ctx, err)
		}
		rs.max = c.MaxBuffer
		if rs.max == 0 {
			rs.max = DefaultMaxBuffer
		}
		returned := false
		defer rs.abortUnless(&returned)
		err := rs.start()
		returned = true
		if err != nil {
			return nil, statusErr(ctx, rs.marked(err))
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

// now is the time the Step's decisions read: Policy.Clock's, or the zero
// time when the Step needs none.
func (r *retryStream) now() time.Time {
	if !r.s.NeedsNow(r.ctx) {
		return time.Time{}
	}
	if clk := r.s.Policy.Clock; clk != nil {
		return clk.Now()
	}
	return time.Now()
}

// start begins an attempt: a new stream with the attempt's metadata, and
// the kept request messages replayed on it.
func (r *retryStream) start() error {
	for {
		now := r.now()
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
	r.ended = true
	r.trailer = trailer
	dec := r.s.End(err, r.now())
	if !dec.Retry {
		if e := r.s.Err(); e != nil {
			return false, statusErr(r.ctx, r.marked(e))
		}
		return false, err
	}
	if dec.Delay > 0 {
		// A wait the context ends is a give-up: the next Begin refuses
		// the done context, and reports it.
		_ = r.wait.Wait(r.ctx, r.s.Policy.Clock, dec.Delay)
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
		r.s.Hold()
		r.s.End(nil, r.now())
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

// RecvMsg receives a message; until the stream commits, a failure is
// judged and retried on a new stream. If the stream under it panics, the
// attempt's Limiter slot is released (as an overload sign) before the
// panic goes on, as retry.Do does for a panicking function.
func (r *retryStream) RecvMsg(m any) error {
	returned := false
	defer r.abortUnless(&returned)
	err := r.recvMsg(m)
	returned = true
	return err
}

// abortUnless frees the attempt's slot and context when the call it is
// deferred in did not return (a panic).
func (r *retryStream) abortUnless(returned *bool) {
	if !*returned {
		r.s.Abort()
	}
}

func (r *retryStream) recvMsg(m any) error {
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
			return statusErr(r.ctx, r.marked(serr))
		}
	}
}
