package jetstream

import (
	"context"
	"testing"

	"github.com/staggerhq/stagger/broker/brokertest"
)

// PublishTraced implements brokertest.TracePublisher: Publisher.Publish
// with the suite's trace, from a context carrying the trace context.
func (p *pipeline) PublishTraced(ctx context.Context, id string, payload []byte, traceparent, tracestate string) error {
	pub := Publisher{JS: p.js, Trace: brokertest.Trace{}}
	_, err := pub.Publish(brokertest.TraceContext(ctx, traceparent, tracestate), p.subject, id, payload)
	return err
}

// TestTraceTravels: a message's traceparent and tracestate reach the
// handler of every delivery (NakWithDelay redelivers the message itself)
// and are copied onto the dead letter. (TestRedrive checks a redrive
// keeps them.)
func TestTraceTravels(t *testing.T) {
	rec := brokertest.NewTraceRecorder()
	p := start(t, rec.Setup(uniqueName(t)), nil)
	rec.CheckTraceTravels(t, p, func(ctx context.Context) (func(string) (string, bool), error) {
		select {
		case dl := <-p.dlq:
			return func(k string) (string, bool) { v := dl.Headers().Get(k); return v, v != "" }, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
}
