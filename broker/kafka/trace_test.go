package kafka

import (
	"context"
	"testing"

	"github.com/staggerhq/stagger/broker/brokertest"
)

// PublishTraced implements brokertest.TracePublisher: Publisher.Publish
// with the suite's trace, from a context carrying the trace context.
func (p *pipeline) PublishTraced(ctx context.Context, id string, payload []byte, traceparent, tracestate string) error {
	pub := Publisher{Client: p.cl, Trace: brokertest.Trace{}}
	return pub.Publish(brokertest.TraceContext(ctx, traceparent, tracestate), p.topics.Main, id, []byte(id), payload)
}

// TestTraceTravels: a record's traceparent and tracestate reach the
// handler of every attempt (the original and each retry topic's forward)
// and stay on the dead letter. (TestRedrive checks a redrive keeps them.)
func TestTraceTravels(t *testing.T) {
	rec := brokertest.NewTraceRecorder()
	p := start(t, rec.Setup("trace"), nil)
	rec.CheckTraceTravels(t, p, func(ctx context.Context) (func(string) (string, bool), error) {
		select {
		case dl := <-p.dlq:
			return headerGetter(dl), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
}
