package jetstream

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/broker/brokertest"
)

// TestTraceTravels: a message's traceparent and tracestate reach the
// handler of every delivery (NakWithDelay redelivers the message itself)
// and are copied onto the dead letter.
func TestTraceTravels(t *testing.T) {
	rec := brokertest.NewTraceRecorder()
	p := start(t, rec.Setup(uniqueName(t)), func(o *Options) { o.Trace = brokertest.Trace{} })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m := nats.NewMsg(p.subject)
	m.Data = []byte("x")
	m.Header.Set(broker.HeaderTraceParent, brokertest.TraceParent)
	m.Header.Set(broker.HeaderTraceState, brokertest.TraceState)
	if _, err := p.js.PublishMsg(ctx, m, jetstream.WithMsgID("t")); err != nil {
		t.Fatal(err)
	}
	var dl jetstream.Msg
	select {
	case dl = <-p.dlq:
	case <-ctx.Done():
		t.Fatal("no dead letter")
	}
	rec.CheckDeadLetter(t, func(k string) (string, bool) { v := dl.Headers().Get(k); return v, v != "" })
}
