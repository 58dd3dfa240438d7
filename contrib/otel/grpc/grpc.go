// Package staggerotelgrpc records OpenTelemetry spans of gRPC calls made
// and served with stagger's interceptors (module
// github.com/staggerhq/stagger/grpc): a client span per call and per
// attempt, a server span per call, with the rpc.* attributes of the
// OpenTelemetry semantic conventions and the attempt ledger.
//
// It lives beside contrib/otel rather than in the grpc module, so a user
// of stagger's gRPC interceptors does not import OpenTelemetry, and a
// user of contrib/otel who does not import this package does not build
// gRPC.
//
//	tr, _ := staggerotelgrpc.New(otel.GetTracerProvider())
//	conn, _ := grpc.NewClient(target,
//		grpc.WithChainUnaryInterceptor(
//			tr.UnaryClient(),        // the call's span
//			retrying.Unary(),        // a staggergrpc.Client
//			tr.UnaryClientAttempt(), // a span per attempt
//		),
//		grpc.WithChainStreamInterceptor(tr.StreamClient(), retrying.Stream(), tr.StreamClientAttempt()))
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(tr.UnaryServer(), guard.Unary()),
//		grpc.ChainStreamInterceptor(tr.StreamServer(), guard.Stream()))
//
// Statuses follow contrib/otel's rule: a failed attempt that is retried
// keeps status Unset and gets stagger.retry.will_retry=true; the last
// attempt, failed, gets status Error, and so does the call's span. A
// client call fails with any code but OK; a server call with UNKNOWN,
// DEADLINE_EXCEEDED, UNIMPLEMENTED, INTERNAL, UNAVAILABLE or DATA_LOSS,
// as the gRPC semantic conventions say.
package staggerotelgrpc

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/staggerhq/stagger/contrib/otel/internal/attempts"
	staggergrpc "github.com/staggerhq/stagger/grpc"
	"github.com/staggerhq/stagger/internal/wire"
)

// ScopeName is the instrumentation scope of the tracer.
const ScopeName = "github.com/staggerhq/stagger/contrib/otel/grpc"

// Attribute keys of stagger's own (with contrib/otel's
// stagger.retry.will_retry and stagger.attempt.count).
const (
	// KeyAttemptNumber is the ledger's attempt number (stagger-attempt,
	// else grpc-previous-rpc-attempts + 1).
	KeyAttemptNumber = attribute.Key("stagger.attempt.number")
	// KeyRequestID is the call's stagger-request-id on a server span.
	KeyRequestID = attribute.Key("stagger.request.id")
)

// Tracer makes the interceptors. Make one per process with New and share
// it.
type Tracer struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

// New returns a Tracer on tp's tracer for ScopeName. Trace context
// crosses the wire in gRPC metadata, in the W3C Trace Context format.
func New(tp trace.TracerProvider) (*Tracer, error) {
	if tp == nil {
		return nil, fmt.Errorf("staggerotelgrpc: New needs a TracerProvider, got nil")
	}
	return &Tracer{tracer: tp.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL)), prop: propagation.TraceContext{}}, nil
}

// WithPropagator returns a copy of t that carries trace context in gRPC
// metadata in p's format; nil means W3C Trace Context, the default.
func (t *Tracer) WithPropagator(p propagation.TextMapPropagator) *Tracer {
	c := *t
	if p == nil {
		p = propagation.TraceContext{}
	}
	c.prop = p
	return &c
}

// callAttrs are the attributes of a client span: rpc.system.name,
// rpc.method ("pkg.Service/Method"), server.address, server.port.
func callAttrs(method, target string, more int) []attribute.KeyValue {
	kv := make([]attribute.KeyValue, 0, 4+more)
	kv = append(kv, semconv.RPCSystemNameGRPC, semconv.RPCMethodKey.String(strings.TrimPrefix(method, "/")))
	if i := strings.LastIndex(target, "/"); i >= 0 { // dns:///host:port, passthrough:///host:port
		target = target[i+1:]
	}
	if host, port, err := net.SplitHostPort(target); err == nil {
		kv = append(kv, semconv.ServerAddress(host))
		if p, err := strconv.Atoi(port); err == nil {
			kv = append(kv, semconv.ServerPort(p))
		}
	} else if target != "" {
		kv = append(kv, semconv.ServerAddress(target))
	}
	return kv
}

// outcome is what err, a call's or an attempt's, comes to: the status
// code as rpc.response.status_code, and for a failure error.type.
func outcome(err error, failed func(grpccodes.Code) bool) attempts.Outcome {
	c := status.Code(err)
	name := codeName(c)
	kv := []attribute.KeyValue{semconv.RPCResponseStatusCode(name)}
	if c == grpccodes.OK || !failed(c) {
		return attempts.Outcome{Attrs: kv}
	}
	return attempts.Outcome{Failed: true, Err: err, Desc: name, Attrs: append(kv, semconv.ErrorTypeKey.String(name))}
}

// codeNames are the status codes as gRPC's documentation spells them.
var codeNames = [...]string{"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
	"NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
	"ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"}

// codeName is c as rpc.response.status_code takes it ("UNAVAILABLE"),
// its number for a code gRPC does not define.
func codeName(c grpccodes.Code) string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return strconv.Itoa(int(c))
}

func clientFailed(c grpccodes.Code) bool { return c != grpccodes.OK }

func serverFailed(c grpccodes.Code) bool {
	switch c {
	case grpccodes.Unknown, grpccodes.DeadlineExceeded, grpccodes.Unimplemented,
		grpccodes.Internal, grpccodes.Unavailable, grpccodes.DataLoss:
		return true
	}
	return false
}

// UnaryClient returns the interceptor that gives each call a span of
// kind client named by its method; put it before (outside) the
// staggergrpc.Client's interceptor. The span has rpc.system.name,
// rpc.method, server.address, server.port, rpc.response.status_code
// (the call's), error.type and stagger.attempt.count.
func (t *Tracer) UnaryClient() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		ctx, span := t.tracer.Start(ctx, strings.TrimPrefix(method, "/"),
			trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(callAttrs(method, cc.Target(), 0)...))
		call := &attempts.Call{Span: span}
		err := invoker(attempts.With(ctx, call), method, req, reply, cc, opts...)
		call.Finish(outcome(err, clientFailed))
		return err
	}
}

// UnaryClientAttempt returns the interceptor that gives each attempt a
// span of kind client, the child of the call's (UnaryClient's); put it
// after (inside) the staggergrpc.Client's interceptor. The span has the
// call's attributes, stagger.attempt.number (the ledger's) and the
// attempt's rpc.response.status_code and error.type; its trace context
// goes out in the attempt's metadata.
func (t *Tracer) UnaryClientAttempt() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		call := attempts.From(ctx)
		if call != nil {
			call.Begin()
		}
		ctx, span := t.attemptSpan(ctx, method, cc.Target())
		err := invoker(ctx, method, req, reply, cc, opts...)
		out := outcome(err, clientFailed)
		if call == nil {
			span.SetAttributes(out.Attrs...)
			attempts.Final(span, out.Failed, out.Err, out.Desc)
			span.End()
		} else {
			call.Done(span, out)
		}
		return err
	}
}

// UnaryServer returns the interceptor that runs each call in a span of
// kind server, the child of the trace context the call's metadata
// carries; put it before (outside) the staggergrpc.Server's, so the span
// covers a call the Server sheds. The span has rpc.system.name,
// rpc.method, client.address, rpc.response.status_code, error.type and
// the ledger: stagger.attempt.number and stagger.request.id.
func (t *Tracer) UnaryServer() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, span := t.serverSpan(ctx, info.FullMethod)
		resp, err := handler(ctx, req)
		endServer(span, err)
		return resp, err
	}
}

// StreamServer is UnaryServer for streaming calls: the span lasts as
// long as the handler.
func (t *Tracer) StreamServer() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, span := t.serverSpan(ss.Context(), info.FullMethod)
		err := handler(srv, &spanStream{ServerStream: ss, ctx: ctx})
		endServer(span, err)
		return err
	}
}

type spanStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *spanStream) Context() context.Context { return s.ctx }

// endServer ends a server span with the call's outcome.
func endServer(span trace.Span, err error) {
	out := outcome(err, serverFailed)
	span.SetAttributes(out.Attrs...)
	if out.Failed {
		span.RecordError(err)
		span.SetStatus(codes.Error, out.Desc)
	}
	span.End()
}

// serverSpan starts the server span of a call of method.
func (t *Tracer) serverSpan(ctx context.Context, method string) (context.Context, trace.Span) {
	kv := make([]attribute.KeyValue, 0, 6)
	kv = append(kv, semconv.RPCSystemNameGRPC, semconv.RPCMethodKey.String(strings.TrimPrefix(method, "/")))
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		if host, _, err := net.SplitHostPort(p.Addr.String()); err == nil {
			kv = append(kv, semconv.ClientAddress(host))
		}
	}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		ctx = t.prop.Extract(ctx, incoming(md))
		if n := ledgerAttempt(md); n > 0 {
			kv = append(kv, KeyAttemptNumber.Int(n))
		}
		if v := md.Get(staggergrpc.RequestIDKey); len(v) == 1 && wire.ValidID(v[0]) {
			kv = append(kv, KeyRequestID.String(v[0]))
		}
	}
	return t.tracer.Start(ctx, strings.TrimPrefix(method, "/"),
		trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(kv...))
}

// ledgerAttempt is the attempt number md carries, by the rule for values
// from the wire; 0 when none.
func ledgerAttempt(md metadata.MD) int {
	if v := md.Get(staggergrpc.AttemptKey); len(v) > 0 {
		if n, ok := wire.ParseAttempt(v[0]); ok {
			return n
		}
	}
	if v := md.Get(staggergrpc.PreviousAttemptsKey); len(v) > 0 {
		if n, ok := wire.ParsePreviousAttempts(v[0]); ok {
			return n
		}
	}
	return 0
}

// mdCarrier collects injected fields as key, value pairs for
// metadata.AppendToOutgoingContext.
type mdCarrier []string

func (c *mdCarrier) Get(string) string { return "" }
func (c *mdCarrier) Set(k, v string)   { *c = append(*c, k, v) }
func (c *mdCarrier) Keys() []string    { return nil }

// incoming reads an incoming call's metadata.
type incoming metadata.MD

func (m incoming) Get(k string) string {
	if v := metadata.MD(m).Get(k); len(v) > 0 {
		return v[0]
	}
	return ""
}
func (m incoming) Set(string, string) {}
func (m incoming) Keys() []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}
