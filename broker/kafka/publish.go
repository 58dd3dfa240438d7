package kafka

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/retry"
)

// NewRecord returns an original message for topic with key and value, the
// x-stagger-id header set to id (the key an inbox deduplicates on; none
// when id is ""), and the ledger of the work ctx carries in its state
// headers (broker.EncodeLedger): a consumer counts on from the attempts
// made, within the attempts and the deadline that are left. Produce it
// with any kgo.Client, or use [Publish]. It writes no trace context:
// [Publisher] does, with a producer span around the produce.
func NewRecord(ctx context.Context, topic, id string, key, value []byte) *kgo.Record {
	r, _ := newRecordTraced(ctx, nil, topic, id, key, value)
	return r
}

// newRecordTraced is NewRecord whose trace context comes from trace
// (broker.StartPublish); it returns the function that ends the publish's
// span with the produce's error.
func newRecordTraced(ctx context.Context, trace retry.Propagator, topic, id string, key, value []byte) (*kgo.Record, func(error)) {
	r := &kgo.Record{Topic: topic, Key: key, Value: value}
	if id != "" {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: broker.HeaderID, Value: []byte(id)})
	}
	end := broker.StartPublish(ctx, trace, broker.PublishInfo{System: "kafka", Destination: topic, ID: id, Size: len(value)}, func(k, v string) {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
	})
	return r, end
}

// Publisher produces original messages with the ledger and the trace
// context of the publishing code: [Publish] with a trace. The zero Trace
// is [Publish] itself.
type Publisher struct {
	// Client produces the records.
	Client *kgo.Client
	// Trace, if set, writes the publishing code's trace context on each
	// record (traceparent, tracestate), as broker.StartPublish does: a
	// broker.PublishTracer (contrib/otel's Tracer.Broker) records a
	// producer span from the produce to the broker's acknowledgement and
	// the record carries that span's context, so the consumer's spans
	// (Options.Trace set to the same value) are its children.
	Trace retry.Propagator
}

// Publish produces an original message to topic as [Publish] does, with
// p's trace, and waits for its acknowledgement. It returns an error
// wrapping broker.ErrInvalid when p.Client is nil.
func (p Publisher) Publish(ctx context.Context, topic, id string, key, value []byte) error {
	if p.Client == nil {
		return fmt.Errorf("%w: kafka.Publisher.Client must be set", broker.ErrInvalid)
	}
	r, end := newRecordTraced(ctx, p.Trace, topic, id, key, value)
	err := p.Client.ProduceSync(ctx, r).FirstErr()
	end(err)
	return err
}
