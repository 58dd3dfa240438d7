package rabbitmq

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/staggerhq/stagger/broker/brokertest"
)

// PublishTraced implements brokertest.TracePublisher: Publisher.Publish
// with the suite's trace, from a context carrying the trace context.
func (p *pipeline) PublishTraced(ctx context.Context, id string, payload []byte, traceparent, tracestate string) error {
	return p.pub.WithTrace(brokertest.Trace{}).Publish(brokertest.TraceContext(ctx, traceparent, tracestate), id, payload)
}

// TestTraceTravels: a message's traceparent and tracestate reach the
// handler of every attempt and stay on the dead letter, with the retries
// going through the wait queues (the default WaitInPlace is shorter than
// the suite's delays: each tier's redelivery) and with every retry held
// in place (WaitInPlace at its largest: the held delivery's headers).
// (TestRedrive checks a redrive keeps them.)
func TestTraceTravels(t *testing.T) {
	for _, c := range []struct {
		name  string
		wait  time.Duration
		holds int32 // retries held in place
	}{
		{"WaitQueues", 0, 0},
		{"HeldInPlace", MaxWaitInPlace, int32(brokertest.Policy().MaxAttempts - 1)},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := brokertest.NewTraceRecorder()
			var holds atomic.Int32
			p := start(t, rec.Setup(uniqueName(t)), func(o *Options) {
				o.WaitInPlace = c.wait
				o.afterHold = func() { holds.Add(1) }
			})
			rec.CheckTraceTravels(t, p, func(ctx context.Context) (func(string) (string, bool), error) {
				select {
				case dl := <-p.dlq:
					return tableGet(dl.Headers), nil
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			})
			if n := holds.Load(); n != c.holds {
				t.Errorf("%d retries held in place, want %d", n, c.holds)
			}
		})
	}
}
