package rabbitmq

import (
	"context"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/broker/brokertest"
)

// PublishTraced implements brokertest.TracePublisher.
func (p *pipeline) PublishTraced(ctx context.Context, id string, payload []byte, traceparent, tracestate string) error {
	wait, err := p.pub.c.publish(ctx, p.topo.Exchange, p.topo.RoutingKey, amqp.Publishing{
		MessageId: id, DeliveryMode: amqp.Persistent, Body: payload,
		Headers: amqp.Table{broker.HeaderTraceParent: traceparent, broker.HeaderTraceState: tracestate},
	})
	if err != nil {
		return err
	}
	return wait(ctx)
}

// TestTraceTravels: a message's traceparent and tracestate reach the
// handler of every attempt (the original and each delay tier's
// redelivery) and stay on the dead letter. (TestRedrive checks a redrive
// keeps them.)
func TestTraceTravels(t *testing.T) {
	rec := brokertest.NewTraceRecorder()
	p := start(t, rec.Setup(uniqueName(t)), nil)
	rec.CheckTraceTravels(t, p, func(ctx context.Context) (func(string) (string, bool), error) {
		select {
		case dl := <-p.dlq:
			return tableGet(dl.Headers), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
}
