package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/retry"
)

// Headers of our own next to broker's: the original record's coordinates,
// kept across retry topics.
const (
	HeaderTopic     = "x-stagger-topic"
	HeaderPartition = "x-stagger-partition"
	HeaderOffset    = "x-stagger-offset"
)

// DefaultMaxPollRecords bounds the records one poll hands a stage.
const DefaultMaxPollRecords = 500

// Options configure a Consumer.
type Options struct {
	// Brokers are the seed brokers, host:port.
	Brokers []string
	// Topics names the main, retry and DLQ topics; they must exist
	// (CreateTopics makes them).
	Topics Topics
	// Group is the main topic's consumer group; retry stage i uses
	// Group-retry-<tier>.
	Group string
	// Handler runs once per delivery with a retry.Delivery (Source "kafka",
	// ID = the x-stagger-id header, else the original record's
	// topic/partition/offset).
	Handler retry.Handler
	// Policy decides retries; nil means broker.CascadePolicy(Topics.Tiers).
	Policy *retry.Policy
	// Inbox, if set, wraps Handler keyed by the message ID.
	Inbox queue.Inbox
	// Transactional makes each poll's forwards and its offset commit one
	// transaction (GroupTransactSession), with TransactionalID plus the
	// stage's suffix as transactional IDs. TransactionalID must be unique
	// per consumer process and stable across its restarts.
	Transactional   bool
	TransactionalID string
	// MaxPollRecords bounds one poll (0: DefaultMaxPollRecords).
	MaxPollRecords int
	// ClientOpts are extra franz-go options for every stage's client (TLS,
	// SASL, …).
	ClientOpts []kgo.Opt
	// Logger receives stage errors (nil: discarded).
	Logger *slog.Logger
	// Now is the clock for decisions and due times (nil: time.Now).
	Now func() time.Time

	// afterForward and afterSuccess, in tests, run after a poll's forwards
	// were produced (or its handlers succeeded) and before its offsets are
	// committed; true abandons the stage's client there, as a crashing
	// process would.
	afterForward, afterSuccess func() (crash bool)
}

// Consumer runs one stage per topic: the main topic and each retry topic.
type Consumer struct {
	opts Options
	proc *broker.Processor
	log  *slog.Logger
}

// NewConsumer validates opts.
func NewConsumer(opts Options) (*Consumer, error) {
	if len(opts.Brokers) == 0 {
		return nil, fmt.Errorf("%w: Brokers must list at least one host:port", broker.ErrInvalid)
	}
	if err := opts.Topics.Validate(); err != nil {
		return nil, err
	}
	if opts.Group == "" || len(opts.Group) > 200 {
		return nil, fmt.Errorf("%w: Group must be 1..200 bytes, got %d", broker.ErrInvalid, len(opts.Group))
	}
	if opts.Handler == nil {
		return nil, fmt.Errorf("%w: Handler must not be nil", broker.ErrInvalid)
	}
	if opts.Transactional && opts.TransactionalID == "" {
		return nil, fmt.Errorf("%w: TransactionalID must be set when Transactional is", broker.ErrInvalid)
	}
	if opts.MaxPollRecords == 0 {
		opts.MaxPollRecords = DefaultMaxPollRecords
	}
	if opts.MaxPollRecords < 1 || opts.MaxPollRecords > 100000 {
		return nil, fmt.Errorf("%w: MaxPollRecords must be in [1, 100000], got %d", broker.ErrInvalid, opts.MaxPollRecords)
	}
	if opts.Policy == nil {
		opts.Policy = broker.CascadePolicy(opts.Topics.Tiers)
	}
	if err := opts.Policy.Validate(); err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Consumer{opts: opts, log: log,
		proc: &broker.Processor{Handler: opts.Handler, Policy: opts.Policy, Inbox: opts.Inbox, Source: "kafka", Now: opts.Now}}, nil
}

func (c *Consumer) now() time.Time {
	if c.opts.Now != nil {
		return c.opts.Now()
	}
	return time.Now()
}

// stage is one topic and its group.
type stage struct {
	topic, group, suffix string
	// maxWait is the fetch long-poll: a resumed partition joins the next
	// fetch only after the one in flight returns, so it bounds how late a
	// due record can be.
	maxWait time.Duration
}

func (c *Consumer) stages() []stage {
	t := c.opts.Topics
	s := []stage{{topic: t.Main, group: c.opts.Group, suffix: "main", maxWait: 500 * time.Millisecond}}
	for i, rt := range t.Retry {
		n := "retry-" + t.Tiers.Name(i)
		s = append(s, stage{topic: rt, group: c.opts.Group + "-" + n, suffix: n,
			maxWait: min(max(t.Tiers[i]/10, 10*time.Millisecond), 500*time.Millisecond)})
	}
	return s
}

// errCrash ends a session without committing (test seam).
var errCrash = errors.New("kafka: simulated crash")

// Run runs every stage until ctx is done and returns ctx.Err(). A stage
// whose client fails (a forward not acknowledged, a commit refused) is
// restarted from its last committed offset, after a pause that grows to 5 s.
func (c *Consumer) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, s := range c.stages() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wait := 50 * time.Millisecond
			for ctx.Err() == nil {
				err := c.session(ctx, s)
				if ctx.Err() != nil {
					return
				}
				if errors.Is(err, errCrash) {
					continue // a fresh consumer takes over at once
				}
				c.log.Warn("kafka: stage restarting", slog.String("topic", s.topic), slog.Any("error", err), slog.Duration("in", wait))
				t := time.NewTimer(wait)
				select {
				case <-ctx.Done():
				case <-t.C:
				}
				t.Stop()
				wait = min(2*wait, 5*time.Second)
			}
		}()
	}
	wg.Wait()
	return ctx.Err()
}

// poller is what a session needs of a client or a transact session.
type poller interface {
	PollRecords(ctx context.Context, n int) kgo.Fetches
}

// session consumes one stage with one client until an error or ctx's end.
func (c *Consumer) session(ctx context.Context, s stage) error {
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(c.opts.Brokers...),
		kgo.ConsumerGroup(s.group),
		kgo.ConsumeTopics(s.topic),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(s.maxWait),
	}, c.opts.ClientOpts...)
	var (
		cl   *kgo.Client
		sess *kgo.GroupTransactSession
		poll poller
		err  error
	)
	if c.opts.Transactional {
		opts = append(opts,
			kgo.TransactionalID(c.opts.TransactionalID+"-"+s.suffix),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()))
		sess, err = kgo.NewGroupTransactSession(opts...)
		if err != nil {
			return fmt.Errorf("kafka: client: %w", err)
		}
		cl, poll = sess.Client(), sess
	} else {
		cl, err = kgo.NewClient(append(opts, kgo.BlockRebalanceOnPoll())...)
		if err != nil {
			return fmt.Errorf("kafka: client: %w", err)
		}
		poll = cl
	}
	crashed := false
	defer func() {
		switch {
		case crashed:
			// No commit, no transaction end: as if the process died.
			cl.CloseAllowingRebalance()
		case sess != nil:
			sess.CloseAllowingRebalance()
		default:
			cl.CloseAllowingRebalance()
		}
	}()

	paused := map[int32]time.Time{} // partition → when its head record is due
	for {
		pctx, cancel := ctx, context.CancelFunc(func() {})
		if len(paused) > 0 {
			earliest := time.Time{}
			for _, due := range paused {
				if earliest.IsZero() || due.Before(earliest) {
					earliest = due
				}
			}
			// Wall-clock deadline for the poll: the earliest due time.
			pctx, cancel = context.WithTimeout(ctx, max(earliest.Sub(c.now()), 0))
		}
		fetches := poll.PollRecords(pctx, c.opts.MaxPollRecords)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if fetches.IsClientClosed() {
			return errors.New("kafka: client closed")
		}
		fetches.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				c.log.Warn("kafka: fetch", slog.String("topic", t), slog.Int("partition", int(p)), slog.Any("error", err))
			}
		})
		now := c.now()
		var resume []int32
		for p, due := range paused {
			if !now.Before(due) {
				resume = append(resume, p)
				delete(paused, p)
			}
		}
		if len(resume) > 0 {
			cl.ResumeFetchPartitions(map[string][]int32{s.topic: resume})
		}

		if sess != nil {
			if err := sess.Begin(); err != nil {
				return fmt.Errorf("kafka: begin transaction: %w", err)
			}
		}
		var (
			fwd     []*kgo.Record
			rewinds map[int32]kgo.EpochOffset
			handled int
		)
		fetches.EachPartition(func(p kgo.FetchTopicPartition) {
			for _, r := range p.Records {
				out, due := c.handle(ctx, r)
				if !due.IsZero() {
					// Not due: pause the partition and fetch again from
					// this record when it is.
					cl.PauseFetchPartitions(map[string][]int32{s.topic: {p.Partition}})
					paused[p.Partition] = due
					if rewinds == nil {
						rewinds = map[int32]kgo.EpochOffset{}
					}
					rewinds[p.Partition] = kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset}
					return
				}
				handled++
				if out != nil {
					fwd = append(fwd, out)
				}
			}
		})
		if len(rewinds) > 0 {
			cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{s.topic: rewinds})
		}
		if len(fwd) > 0 {
			if err := cl.ProduceSync(ctx, fwd...).FirstErr(); err != nil {
				if sess != nil {
					_, _ = sess.End(ctx, kgo.TryAbort)
				}
				return fmt.Errorf("kafka: forward: %w", err)
			}
			if c.opts.afterForward != nil && c.opts.afterForward() {
				crashed = true
				return errCrash
			}
		}
		if handled > len(fwd) && c.opts.afterSuccess != nil && c.opts.afterSuccess() {
			crashed = true
			return errCrash
		}
		if sess != nil {
			committed, err := sess.End(ctx, kgo.TryCommit)
			if err != nil {
				return fmt.Errorf("kafka: end transaction: %w", err)
			}
			if !committed {
				c.log.Warn("kafka: transaction aborted; its records are polled again", slog.String("topic", s.topic))
			}
			continue
		}
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			return fmt.Errorf("kafka: commit: %w", err)
		}
		cl.AllowRebalance()
	}
}

// handle runs one record. It returns the record to produce (a retry or a
// dead letter; nil after success), or a non-zero due time when the record
// must wait.
func (c *Consumer) handle(ctx context.Context, r *kgo.Record) (out *kgo.Record, due time.Time) {
	get := headerGetter(r)
	st, err := broker.DecodeState(get)
	var o broker.Outcome
	if err != nil {
		o = broker.Outcome{Action: broker.Dead, State: broker.State{Reason: "malformed", Error: err.Error()}}
	} else {
		if !st.Due.IsZero() && c.now().Before(st.Due) {
			return nil, st.Due
		}
		o = c.proc.Process(ctx, messageID(r, get), r.Value, st)
	}
	var topic string
	switch o.Action {
	case broker.Ack:
		return nil, time.Time{}
	case broker.Retry, broker.Park:
		topic = c.opts.Topics.Retry[c.opts.Topics.Tiers.For(o.Delay)]
	case broker.Dead:
		topic = c.opts.Topics.DLQ
		o.State.Due = time.Time{}
	}
	return forward(r, topic, o.State, get), time.Time{}
}

// headerGetter reads r's headers by key (the first of a repeated key).
func headerGetter(r *kgo.Record) func(string) (string, bool) {
	return func(k string) (string, bool) {
		for _, h := range r.Headers {
			if h.Key == k {
				return string(h.Value), true
			}
		}
		return "", false
	}
}

// messageID is the x-stagger-id header, else the original record's
// topic/partition/offset.
func messageID(r *kgo.Record, get func(string) (string, bool)) string {
	if id, ok := get(broker.HeaderID); ok && id != "" {
		return id
	}
	return origin(r, get)
}

func origin(r *kgo.Record, get func(string) (string, bool)) string {
	if t, ok := get(HeaderTopic); ok {
		p, _ := get(HeaderPartition)
		o, _ := get(HeaderOffset)
		return t + "/" + p + "/" + o
	}
	return r.Topic + "/" + strconv.Itoa(int(r.Partition)) + "/" + strconv.FormatInt(r.Offset, 10)
}

// forward copies r to topic with state st in its headers.
func forward(r *kgo.Record, topic string, st broker.State, get func(string) (string, bool)) *kgo.Record {
	out := &kgo.Record{Topic: topic, Key: r.Key, Value: r.Value}
	ours := map[string]bool{broker.HeaderAttempt: true, broker.HeaderDelay: true, broker.HeaderDue: true,
		broker.HeaderFirstAttempt: true, broker.HeaderFirstFailure: true, broker.HeaderError: true,
		broker.HeaderReason: true, broker.HeaderOrigin: true}
	for _, h := range r.Headers {
		if !ours[h.Key] {
			out.Headers = append(out.Headers, h)
		}
	}
	if _, ok := get(HeaderTopic); !ok {
		out.Headers = append(out.Headers,
			kgo.RecordHeader{Key: HeaderTopic, Value: []byte(r.Topic)},
			kgo.RecordHeader{Key: HeaderPartition, Value: []byte(strconv.Itoa(int(r.Partition)))},
			kgo.RecordHeader{Key: HeaderOffset, Value: []byte(strconv.FormatInt(r.Offset, 10))})
	}
	if _, ok := get(broker.HeaderID); !ok {
		out.Headers = append(out.Headers, kgo.RecordHeader{Key: broker.HeaderID, Value: []byte(origin(r, get))})
	}
	st.Origin = origin(r, get)
	st.Encode(func(k, v string) { out.Headers = append(out.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)}) })
	return out
}

// ParseDeadLetter decodes a record read from the DLQ topic.
func ParseDeadLetter(r *kgo.Record) (broker.DeadLetter, error) {
	get := headerGetter(r)
	st, err := broker.DecodeState(get)
	if err != nil {
		return broker.DeadLetter{}, err
	}
	id, _ := get(broker.HeaderID)
	return broker.DeadLetter{ID: id, Payload: r.Value, State: st}, nil
}

// Publish produces an original message with the x-stagger-id header set to
// id (the key an inbox deduplicates on) and waits for its acknowledgement.
func Publish(ctx context.Context, cl *kgo.Client, topic, id string, key, value []byte) error {
	r := &kgo.Record{Topic: topic, Key: key, Value: value}
	if id != "" {
		r.Headers = []kgo.RecordHeader{{Key: broker.HeaderID, Value: []byte(id)}}
	}
	return cl.ProduceSync(ctx, r).FirstErr()
}
