// Package kafka runs a stagger retry.Handler on Kafka with Uber-style retry
// topics, on franz-go: no consumer ever sleeps.
//
//	producer ──► orders ──► stage 0 (group G) ── nil ─────────────────► commit
//	                           │ retryable: produce, then commit
//	                           ▼
//	             orders-retry-10s ──► stage 1 (group G-retry-10s) ─┐ pause the partition until
//	             orders-retry-1m  ──► stage 2 (group G-retry-1m)  ─┤ the head record is due,
//	             orders-retry-10m ──► stage 3 (group G-retry-10m) ─┘ then handle it
//	                           │ permanent, unknown, exhausted: produce, then commit
//	                           ▼
//	                      orders-dlq
//
// On failure the stage produces the record to the retry topic of its delay
// tier — the first tier at least as long as the delay the shared decision
// (retry.Policy.Decide) chose — with headers: attempt, error, due time and
// the original topic/partition/offset. Then it commits the offset. A retry
// stage that meets a record not yet due pauses that partition
// (PauseFetchPartitions), rewinds its fetch position to the record, and
// resumes it when the record is due; the poll loop keeps serving its other
// partitions meanwhile. Nothing sleeps. A resumed partition is fetched once
// the fetch in flight returns, so a retry stage long-polls for a tenth of
// its tier (10 ms to 500 ms): a record is never early and at most that late.
// The main stage never pauses: a record there that carries a due time still
// ahead (a forwarded record copied back by hand) is parked in its tier again.
//
// Delivery guarantee. By default forward and commit are two steps: the
// forward is produced and acknowledged, then the offset is committed. A
// consumer that dies between the two re-reads the record and forwards it
// again: a duplicate in the retry topic, never a loss (at-least-once; use an
// inbox for effects). The steps are pipelined, not relaxed: the stage
// produces forwards without waiting and keeps polling, and a separate
// committer commits a poll's offsets only once that poll's forwards, and
// every earlier poll's, are acknowledged (at most 32 polls in flight). A
// refused forward stops all further commits and restarts the stage from
// its last commit. Before partitions move to another member the stage
// waits for its forwards and commits, so a rebalance normally duplicates
// nothing. With Options.Transactional the forward and the commit
// are one Kafka transaction (GroupTransactSession): a consumer that dies
// between them leaves its transaction open, which the broker aborts when a
// consumer with the same TransactionalID starts (or after the transaction
// timeout; until then read_committed reads of the partitions it wrote
// wait), and read_committed stages never see its forward.
//
// Ordering caveat. A retried record leaves its partition: records behind
// it are handled before it, so per-key order holds only for records that
// never fail. Within a retry topic records are handled in order, so a
// record waits behind any earlier record of the same partition that is due
// later: at most one tier's width, since a tier only holds delays between
// the previous tier and its own — except the last tier, which also holds
// any longer delay (a policy whose schedule or MaxAfter exceeds it; not
// broker.CascadePolicy) for its whole length.
package kafka

import (
	"context"
	"fmt"
	"regexp"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/staggerhq/stagger/broker"
)

// Topics names the main topic, one retry topic per tier, and the DLQ.
type Topics struct {
	// Main is the topic producers write to.
	Main string
	// Tiers are the retry topics' delays, shortest first.
	Tiers broker.Tiers
	// Retry[i] is tier i's topic.
	Retry []string
	// DLQ is the dead-letter topic.
	DLQ string
}

// NewTopics names topics after main: main-retry-<tier> (main-retry-10s …)
// and main-dlq. tiers nil means broker.DefaultTiers.
func NewTopics(main string, tiers broker.Tiers) Topics {
	if tiers == nil {
		tiers = broker.DefaultTiers
	}
	t := Topics{Main: main, Tiers: tiers, DLQ: main + "-dlq"}
	for i := range tiers {
		t.Retry = append(t.Retry, main+"-retry-"+tiers.Name(i))
	}
	return t
}

var topicRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,249}$`)

// Validate checks the topic names (Kafka's rule: 1..249 of [A-Za-z0-9._-])
// and the tiers.
func (t Topics) Validate() error {
	if err := t.Tiers.Validate(); err != nil {
		return fmt.Errorf("Topics: %w", err)
	}
	if len(t.Retry) != len(t.Tiers) {
		return fmt.Errorf("%w: Topics.Retry must name one topic per tier (%d), got %d", broker.ErrInvalid, len(t.Tiers), len(t.Retry))
	}
	fields := []string{"Main", "DLQ"}
	names := []string{t.Main, t.DLQ}
	for i, n := range t.Retry {
		fields = append(fields, fmt.Sprintf("Retry[%d]", i))
		names = append(names, n)
	}
	seen := map[string]string{} // topic → the field naming it
	for i, n := range names {
		if !topicRE.MatchString(n) || n == "." || n == ".." {
			return fmt.Errorf("%w: Topics.%s must be 1..249 of [A-Za-z0-9._-] (a Kafka topic name), got %q", broker.ErrInvalid, fields[i], n)
		}
		if f, ok := seen[n]; ok {
			return fmt.Errorf("%w: Topics.%s must differ from Topics.%s, both %q", broker.ErrInvalid, fields[i], f, n)
		}
		seen[n] = fields[i]
	}
	return nil
}

// All lists every topic: main, retry topics, DLQ.
func (t Topics) All() []string {
	return append(append([]string{t.Main}, t.Retry...), t.DLQ)
}

// CreateTopics creates every topic of t that does not exist yet.
func CreateTopics(ctx context.Context, cl *kgo.Client, t Topics, partitions int32, replicationFactor int16) error {
	if err := t.Validate(); err != nil {
		return err
	}
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 10000
	for _, name := range t.All() {
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, partitions, replicationFactor
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("kafka: create topics: %w", err)
	}
	for _, rt := range resp.Topics {
		if rt.ErrorCode != 0 && rt.ErrorCode != 36 { // 36: TOPIC_ALREADY_EXISTS
			return fmt.Errorf("kafka: create topic %q: error code %d", rt.Topic, rt.ErrorCode)
		}
	}
	return nil
}
