package kafka

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/broker/brokertest"
)

// PublishTraced implements brokertest.TracePublisher.
func (p *pipeline) PublishTraced(ctx context.Context, id string, payload []byte, traceparent, tracestate string) error {
	return p.cl.ProduceSync(ctx, &kgo.Record{Topic: p.topics.Main, Key: []byte(id), Value: payload, Headers: []kgo.RecordHeader{
		{Key: broker.HeaderID, Value: []byte(id)},
		{Key: broker.HeaderTraceParent, Value: []byte(traceparent)},
		{Key: broker.HeaderTraceState, Value: []byte(tracestate)},
	}}).FirstErr()
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
