package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/internal/brokerwire"
	"github.com/staggerhq/stagger/internal/redact"
)

// DefaultRedriveIdle is RedriveSourceOptions.Idle when zero.
const DefaultRedriveIdle = 2 * time.Second

// DefaultRedriveJoinWait is RedriveSourceOptions.JoinWait when zero.
const DefaultRedriveJoinWait = time.Minute

// RedriveSourceOptions configure a Kafka RedriveSource.
type RedriveSourceOptions struct {
	// Brokers are the seed brokers, host:port.
	Brokers []string
	// DLQ is the dead-letter topic to read.
	DLQ string
	// Group is the consumer group that records how far the DLQ has been
	// redriven: a moved record's offset is committed after its republish
	// was acknowledged. A DLQ topic is a log: records that did not match
	// stay in it, and the group passes them once a later record is moved;
	// read them again with another group.
	Group string
	// Idle ends the read when a poll brings nothing for this long (0:
	// DefaultRedriveIdle), once the source has read from its partitions:
	// for a partition whose end at open can no longer be reached (its
	// records were removed by retention or compaction) or that the group
	// gave to another member. A partition read to its end at open,
	// transaction markers included, ends the read without it. Until the
	// first record arrives, joining the group and the first fetch may take
	// longer (Kafka holds a new group's first rebalance for
	// group.initial.rebalance.delay.ms, 3 s by default; a loaded broker
	// answers slowly): that is bounded by JoinWait instead.
	Idle time.Duration
	// JoinWait bounds the wait for the group to give the source its
	// partitions (0: DefaultRedriveJoinWait); past it, Next fails, naming
	// the group (another member may hold the partitions). It also bounds
	// the wait for a first record once they are the source's; past it,
	// the read ends (io.EOF).
	JoinWait time.Duration
	// ClientOpts are extra franz-go options (TLS, SASL, …).
	ClientOpts []kgo.Opt
}

// RedriveSource reads a DLQ topic for broker.Redrive with a consumer group
// of its own, up to the end each partition had when it was opened (read
// committed). A moved record is produced to its original topic
// (x-stagger-topic) with its key, value and headers, and its offset
// committed once the produce was acknowledged: a crash in between moves it
// again (a duplicate, never a loss). Use it from one goroutine; Close it.
type RedriveSource struct {
	cl   *kgo.Client
	opts RedriveSourceOptions
	end  map[int32]int64 // partition → end offset at open, for those not read to it
	buf  []*kgo.Record

	opened   time.Time
	assigned atomic.Bool // the group gave the source its partitions
	read     bool        // a record (or a transaction marker) arrived
}

// NewRedriveSource connects and snapshots the DLQ topic's end offsets.
func NewRedriveSource(ctx context.Context, opts RedriveSourceOptions) (*RedriveSource, error) {
	if err := checkBrokers(opts.Brokers); err != nil {
		return nil, err
	}
	switch {
	case opts.DLQ == "":
		return nil, fmt.Errorf("%w: DLQ must name a topic", broker.ErrInvalid)
	case opts.Group == "":
		return nil, fmt.Errorf("%w: Group must name a consumer group", broker.ErrInvalid)
	case opts.Idle < 0:
		return nil, fmt.Errorf("%w: Idle must be >= 0, got %v", broker.ErrInvalid, opts.Idle)
	case opts.JoinWait < 0:
		return nil, fmt.Errorf("%w: JoinWait must be >= 0, got %v", broker.ErrInvalid, opts.JoinWait)
	}
	if opts.Idle == 0 {
		opts.Idle = DefaultRedriveIdle
	}
	if opts.JoinWait == 0 {
		opts.JoinWait = DefaultRedriveJoinWait
	}
	s := &RedriveSource{opts: opts, end: map[int32]int64{}, opened: time.Now()}
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(opts.Brokers...), kgo.ConsumerGroup(opts.Group), kgo.ConsumeTopics(opts.DLQ),
		kgo.DisableAutoCommit(), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Transaction markers come as records, so a partition whose tail
		// is one is read to its end rather than waited out (Idle).
		kgo.KeepControlRecords(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			if len(m[opts.DLQ]) > 0 {
				s.assigned.Store(true)
			}
		}),
	}, opts.ClientOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka: redrive client: %w", err)
	}
	s.cl = cl
	adm := kadm.NewClient(cl)
	ends, err := adm.ListCommittedOffsets(ctx, opts.DLQ)
	if err == nil {
		err = ends.Error()
	}
	var committed kadm.OffsetResponses
	if err == nil {
		committed, err = adm.FetchOffsets(ctx, opts.Group)
		if err == nil {
			err = committed.Error()
		}
		if errors.Is(err, kerr.GroupIDNotFound) {
			committed, err = nil, nil // a new group: nothing committed
		}
	}
	if err != nil {
		cl.Close()
		return nil, fmt.Errorf("kafka: DLQ %q offsets: %w", opts.DLQ, redact.Error(err, opts.Brokers...))
	}
	if _, ok := ends[opts.DLQ]; !ok {
		cl.Close()
		return nil, fmt.Errorf("kafka: DLQ topic %q not found", opts.DLQ)
	}
	ends.Each(func(o kadm.ListedOffset) {
		from := int64(0)
		if c, ok := committed.Lookup(o.Topic, o.Partition); ok {
			from = c.At
		}
		if from < o.Offset {
			s.end[o.Partition] = o.Offset
		}
	})
	return s, nil
}

// Close leaves the group; records read and not moved stay unread for it.
func (s *RedriveSource) Close() { s.cl.Close() }

// Next returns the next record, or io.EOF once every partition was read
// to its end at open, or a poll brought nothing for Idle after records
// came (or for JoinWait before any did, the partitions the source's).
func (s *RedriveSource) Next(ctx context.Context) (broker.RedriveMessage, error) {
	for len(s.buf) == 0 {
		if len(s.end) == 0 {
			return nil, io.EOF
		}
		// An empty poll ends the read only if the partitions were the
		// source's for all of it and records came before it: the first
		// fetch may be slow.
		joined := s.assigned.Load()
		pctx, cancel := context.WithTimeout(ctx, s.opts.Idle)
		f := s.cl.PollFetches(pctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if f.IsClientClosed() {
			return nil, errors.New("kafka: redrive client closed")
		}
		var ferr error
		f.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && ferr == nil {
				ferr = err
			}
		})
		if ferr != nil {
			return nil, fmt.Errorf("kafka: read the DLQ: %w", ferr)
		}
		if f.NumRecords() == 0 {
			switch waited := time.Since(s.opened) > s.opts.JoinWait; {
			case joined && (s.read || waited):
				return nil, io.EOF // idle: nothing more to read
			case waited:
				return nil, fmt.Errorf("kafka: the consumer group %q was given no partition of %q within %v (does another member hold them?)", s.opts.Group, s.opts.DLQ, s.opts.JoinWait)
			}
			continue // still joining the group, or waiting for a first fetch
		}
		s.read = true
		f.EachRecord(func(r *kgo.Record) {
			end, ok := s.end[r.Partition]
			if !ok || r.Offset >= end {
				return // after the snapshot: the next run's
			}
			if r.Offset+1 >= end {
				delete(s.end, r.Partition)
			}
			if !r.Attrs.IsControl() {
				s.buf = append(s.buf, r)
			}
		})
	}
	r := s.buf[0]
	s.buf = s.buf[1:]
	m := &redriveMsg{s: s, r: r}
	var err error
	if m.dl, err = ParseDeadLetter(r); err != nil {
		id, _ := headerGetter(r)(broker.HeaderID)
		m.dl = broker.DeadLetter{ID: id, Payload: r.Value, State: broker.State{Reason: broker.ReasonMalformed, Error: err.Error()}}
	}
	m.topic, _ = headerGetter(r)(HeaderTopic)
	return m, nil
}

type redriveMsg struct {
	s     *RedriveSource
	r     *kgo.Record
	dl    broker.DeadLetter
	topic string // the original topic
}

func (m *redriveMsg) DeadLetter() broker.DeadLetter { return m.dl }

// Destination is the original topic.
func (m *redriveMsg) Destination() string { return m.topic }

// Republish produces the record to its original topic with st in its
// headers and waits for the acknowledgement. A reset state (no attempts)
// also drops the original's topic, partition and offset headers, so the
// message is as new.
func (m *redriveMsg) Republish(ctx context.Context, st broker.State) error {
	out := &kgo.Record{Topic: m.topic, Key: m.r.Key, Value: m.r.Value}
	for _, h := range m.r.Headers {
		switch {
		case brokerwire.IsStateHeader(h.Key), h.Key == HeaderState:
			continue
		case st.Attempts == 0 && (h.Key == HeaderTopic || h.Key == HeaderPartition || h.Key == HeaderOffset):
			continue
		}
		out.Headers = append(out.Headers, h)
	}
	st.Encode(func(k, v string) { out.Headers = append(out.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)}) })
	if err := m.s.cl.ProduceSync(ctx, out).FirstErr(); err != nil {
		return fmt.Errorf("kafka: produce to %q: %w", m.topic, err)
	}
	return nil
}

// Remove commits the record's offset for the redrive group.
func (m *redriveMsg) Remove(ctx context.Context) error {
	r := m.r
	cerr := commitSync(ctx, m.s.cl, map[string]map[int32]kgo.EpochOffset{r.Topic: {r.Partition: {Epoch: r.LeaderEpoch, Offset: r.Offset + 1}}})
	if cerr != nil {
		return fmt.Errorf("kafka: commit DLQ offset %d/%d: %w", r.Partition, r.Offset+1, cerr)
	}
	return nil
}
