package rabbitmq

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/broker/brokertest"
)

// TestTraceTravels: a message's traceparent and tracestate reach the
// handler of every attempt (the original and each delay tier's
// redelivery) and stay on the dead letter.
func TestTraceTravels(t *testing.T) {
	rec := brokertest.NewTraceRecorder()
	p := start(t, rec.Setup(uniqueName(t)), func(o *Options) { o.Trace = brokertest.Trace{} })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wait, err := p.pub.c.publish(ctx, p.topo.Exchange, p.topo.RoutingKey, amqp.Publishing{
		MessageId: "t", Body: []byte("x"),
		Headers: amqp.Table{broker.HeaderTraceParent: brokertest.TraceParent, broker.HeaderTraceState: brokertest.TraceState},
	})
	if err == nil {
		err = wait(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	var dl amqp.Delivery
	select {
	case dl = <-p.dlq:
	case <-ctx.Done():
		t.Fatal("no dead letter")
	}
	rec.CheckDeadLetter(t, tableGet(dl.Headers))
}
