package attempts

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestCallRule: of three attempts, the two followed by another are
// retried (Unset, will_retry, ended when their attempt did, before the
// next started); the last failed one is Error and so is the call; an
// attempt reported after Finish is settled as the last on its own.
func TestCallRule(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tr := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("test")
	ctx, span := tr.Start(context.Background(), "call")
	c := &Call{Span: span}
	ctx = With(ctx, c)
	if From(ctx) != c || From(context.Background()) != nil {
		t.Fatal("From does not find the Call")
	}
	boom := errors.New("boom")
	for i := 1; i <= 3; i++ {
		if n := c.Begin(); n != i {
			t.Fatalf("Begin %d, want %d", n, i)
		}
		_, s := tr.Start(ctx, "attempt")
		c.Done(s, Outcome{Failed: true, Err: boom, Desc: "boom"})
	}
	c.Finish(Outcome{Failed: true, Err: boom, Desc: "boom"})
	c.Finish(Outcome{}) // only the first counts
	_, late := tr.Start(ctx, "late")
	c.Done(late, Outcome{Failed: true, Err: boom, Desc: "late"})

	spans := rec.Ended()
	if len(spans) != 5 {
		t.Fatalf("%d spans ended, want 5", len(spans))
	}
	for i, s := range spans[:2] {
		if s.Status().Code != codes.Unset || len(s.Events()) != 1 || s.EndTime().After(spans[i+1].StartTime()) {
			t.Errorf("retried attempt %d: %v, events %d, ended %v after the next started", i+1, s.Status(), len(s.Events()), s.EndTime().Sub(spans[i+1].StartTime()))
		}
		if v := s.Attributes(); len(v) != 1 || v[0] != KeyWillRetry.Bool(true) {
			t.Errorf("retried attempt %d: %v", i+1, v)
		}
	}
	for _, s := range spans[2:] {
		if s.Status().Code != codes.Error {
			t.Errorf("%s: %v, want Error", s.Name(), s.Status())
		}
	}
	if spans[3].Name() != "call" {
		t.Fatalf("span 4 is %q", spans[3].Name())
	}
	if v := spans[3].Attributes(); len(v) != 1 || v[0] != KeyAttemptCount.Int(3) {
		t.Errorf("call: %v", v)
	}
}
