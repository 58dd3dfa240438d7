package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/staggerhq/stagger/broker"
)

// NewRecord returns an original message for topic with key and value, the
// x-stagger-id header set to id (the key an inbox deduplicates on; none
// when id is ""), and the ledger of the work ctx carries in its state
// headers (broker.EncodeLedger): a consumer counts on from the attempts
// made, within the attempts and the deadline that are left. Produce it
// with any kgo.Client, or use [Publish].
func NewRecord(ctx context.Context, topic, id string, key, value []byte) *kgo.Record {
	r := &kgo.Record{Topic: topic, Key: key, Value: value}
	if id != "" {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: broker.HeaderID, Value: []byte(id)})
	}
	broker.EncodeLedger(ctx, func(k, v string) {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
	})
	return r
}
