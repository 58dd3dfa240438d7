package staggerotelgrpc

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/staggerhq/stagger/contrib/otel/internal/attempts"
)

// StreamClient is UnaryClient for streaming calls: put it before
// (outside) the staggergrpc.Client's Stream interceptor. The call's span
// ends when the stream does: RecvMsg returns an error (io.EOF: OK), its
// one answer on a stream of one response, or the call's context ends.
func (t *Tracer) StreamClient() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		ctx, span := t.tracer.Start(ctx, strings.TrimPrefix(method, "/"),
			trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(callAttrs(method, cc.Target(), 0)...))
		call := &attempts.Call{Span: span}
		cs, err := streamer(attempts.With(ctx, call), desc, cc, method, opts...)
		if err != nil {
			call.Finish(outcome(err, clientFailed))
			return nil, err
		}
		return newEndStream(ctx, cs, desc, func(err error) { call.Finish(outcome(err, clientFailed)) }), nil
	}
}

// StreamClientAttempt is UnaryClientAttempt for streaming calls: put it
// after (inside) the staggergrpc.Client's Stream interceptor. Each
// attempt's span ends when its stream does.
func (t *Tracer) StreamClientAttempt() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		call := attempts.From(ctx)
		if call != nil {
			call.Begin()
		}
		ctx, span := t.attemptSpan(ctx, method, cc.Target())
		done := func(err error) {
			out := outcome(err, clientFailed)
			if call == nil {
				span.SetAttributes(out.Attrs...)
				attempts.Final(span, out.Failed, out.Err, out.Desc)
				span.End()
				return
			}
			call.Done(span, out)
		}
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			done(err)
			return nil, err
		}
		return newEndStream(ctx, cs, desc, done), nil
	}
}

// attemptSpan starts an attempt's span, with the ledger's attempt number,
// and puts its trace context in the outgoing metadata.
func (t *Tracer) attemptSpan(ctx context.Context, method, target string) (context.Context, trace.Span) {
	kv := callAttrs(method, target, 1)
	if md, ok := metadata.FromOutgoingContext(ctx); ok {
		if n := ledgerAttempt(md); n > 0 {
			kv = append(kv, KeyAttemptNumber.Int(n))
		}
	}
	ctx, span := t.tracer.Start(ctx, strings.TrimPrefix(method, "/"),
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(kv...))
	var c mdCarrier
	t.prop.Inject(ctx, &c)
	if len(c) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, c...)
	}
	return ctx, span
}

// endStream calls end once, with the stream's outcome, when the stream
// ends.
type endStream struct {
	grpc.ClientStream
	one  bool // a stream of one response: its answer ends it
	end  func(error)
	once sync.Once
	stop func() bool
}

func newEndStream(ctx context.Context, cs grpc.ClientStream, desc *grpc.StreamDesc, end func(error)) *endStream {
	s := &endStream{ClientStream: cs, one: !desc.ServerStreams, end: end}
	s.stop = context.AfterFunc(ctx, func() { s.finish(ctx.Err()) })
	return s
}

func (s *endStream) finish(err error) {
	s.once.Do(func() {
		s.stop()
		if errors.Is(err, io.EOF) {
			err = nil
		}
		s.end(err)
	})
}

func (s *endStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil || s.one {
		s.finish(err)
	}
	return err
}

// SendMsg ends the stream on an error other than io.EOF (which says the
// status is for RecvMsg to read).
func (s *endStream) SendMsg(m any) error {
	err := s.ClientStream.SendMsg(m)
	if err != nil && err != io.EOF {
		s.finish(err)
	}
	return err
}

func (s *endStream) CloseSend() error {
	err := s.ClientStream.CloseSend()
	if err != nil && err != io.EOF {
		s.finish(err)
	}
	return err
}
