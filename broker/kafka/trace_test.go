package kafka

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/broker/brokertest"
)

// TestTraceTravels: a record's traceparent and tracestate reach the
// handler of every attempt (the original and each retry topic's forward)
// and stay on the dead letter.
func TestTraceTravels(t *testing.T) {
	rec := brokertest.NewTraceRecorder()
	p := start(t, rec.Setup("trace"), func(o *Options) { o.Trace = brokertest.Trace{} })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := &kgo.Record{Topic: p.topics.Main, Key: []byte("t"), Value: []byte("x"), Headers: []kgo.RecordHeader{
		{Key: broker.HeaderID, Value: []byte("t")},
		{Key: broker.HeaderTraceParent, Value: []byte(brokertest.TraceParent)},
		{Key: broker.HeaderTraceState, Value: []byte(brokertest.TraceState)},
	}}
	if err := p.cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var dl *kgo.Record
	select {
	case dl = <-p.dlq:
	case <-ctx.Done():
		t.Fatal("no dead letter")
	}
	rec.CheckDeadLetter(t, headerGetter(dl))
}
