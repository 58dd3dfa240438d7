package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/internal/redact"
	"github.com/staggerhq/stagger/internal/wait"
	"github.com/staggerhq/stagger/retry"
)

// Headers of our own next to broker's: the original record's coordinates,
// kept across retry topics.
const (
	HeaderTopic     = "x-stagger-topic"     // the original record's topic
	HeaderPartition = "x-stagger-partition" // its partition, in decimal
	HeaderOffset    = "x-stagger-offset"    // its offset, in decimal
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
	Inbox broker.Inbox
	// Trace, if set, runs each handler in the trace context the record
	// carries (broker.Processor.Trace); contrib/otel's Propagator is one.
	Trace retry.Propagator
	// Transactional makes the forwards of a poll and its offset commit one
	// transaction (GroupTransactSession), with TransactionalID plus the
	// stage's suffix as transactional IDs. A transaction also takes the
	// polls already fetched after its first, up to four polls and 100 ms,
	// so a backlog commits once per up to 4×MaxPollRecords records.
	Transactional bool
	// TransactionalID is required with Transactional: unique per consumer
	// process and stable across its restarts.
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
	// were acknowledged (or its handlers succeeded) and before its offsets
	// are committed; true abandons the stage's client there, as a crashing
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
	if err := checkBrokers(opts.Brokers); err != nil {
		return nil, err
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
	// franz-go checks its options when a client is made; a client with no
	// group and no topics connects to nothing, so this costs no round trip.
	probe, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(opts.Brokers...)}, opts.ClientOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("%w: ClientOpts: %v", broker.ErrInvalid, err)
	}
	probe.Close()
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Consumer{opts: opts, log: log,
		proc: &broker.Processor{Handler: opts.Handler, Policy: opts.Policy, Inbox: opts.Inbox, Source: "kafka", Now: opts.Now, Trace: opts.Trace}}, nil
}

// checkBrokers checks seed brokers. A seed with user information
// (user:password@host:port) is refused without being repeated: SASL goes in
// ClientOpts, and the client would print such a seed in its errors.
func checkBrokers(brokers []string) error {
	if len(brokers) == 0 {
		return fmt.Errorf("%w: Brokers must list at least one host:port", broker.ErrInvalid)
	}
	for i, b := range brokers {
		if strings.Contains(b, "@") {
			return fmt.Errorf("%w: Brokers[%d] must be a host:port without user:password@ (give SASL in ClientOpts)", broker.ErrInvalid, i)
		}
		if b == "" || strings.ContainsAny(b, " \t\r\n/") {
			return fmt.Errorf("%w: Brokers[%d] must be a host:port, got %q", broker.ErrInvalid, i, redact.String(b))
		}
	}
	return nil
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
	retry                bool
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
		s = append(s, stage{topic: rt, group: c.opts.Group + "-" + n, suffix: n, retry: true,
			maxWait: min(max(t.Tiers[i]/10, 10*time.Millisecond), 500*time.Millisecond)})
	}
	return s
}

// errCrash ends a session without committing (test seam).
var errCrash = errors.New("kafka: simulated crash")

// errSessionEnded is the session context's cause once its poll loop
// returned for any other reason.
var errSessionEnded = errors.New("kafka: session ended")

// Run runs every stage until ctx is done and returns ctx.Err(). A stage
// whose client fails (a forward not acknowledged, a commit refused) is
// restarted from its last committed offset, after a pause that grows to 5 s.
// On ctx's end Run stops polling, waits for the forwards in flight and
// commits what they allow. A handler that fails with ctx's error (or one
// wrapping it) once ctx is done made no attempt (broker.Interrupted): its
// record is neither forwarded nor committed, and the group's next consumer
// handles it again.
func (c *Consumer) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, s := range c.stages() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var w wait.Waiter
			wait := 50 * time.Millisecond
			defer w.Stop()
			for ctx.Err() == nil {
				err := c.session(ctx, s)
				if ctx.Err() != nil {
					return
				}
				if errors.Is(err, errCrash) {
					continue // a fresh consumer takes over at once
				}
				c.log.Warn("kafka: stage restarting", slog.String("topic", s.topic), slog.Any("error", err), slog.Duration("in", wait))
				_ = w.Wait(ctx, nil, wait) // ctx's end ends the loop
				wait = min(2*wait, 5*time.Second)
			}
		}()
	}
	wg.Wait()
	return ctx.Err()
}

// maxPollsInFlight bounds the polls whose forwards are not all acknowledged
// yet: the records handled but not committable, which a crash duplicates.
const maxPollsInFlight = 32

// session consumes one stage with one client until an error or ctx's end.
func (c *Consumer) session(ctx context.Context, s stage) error {
	opts := []kgo.Opt{
		kgo.SeedBrokers(c.opts.Brokers...),
		kgo.ConsumerGroup(s.group),
		kgo.ConsumeTopics(s.topic),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(s.maxWait),
	}
	if c.opts.Transactional {
		return c.transactSession(ctx, s, append(append(opts,
			kgo.TransactionalID(c.opts.TransactionalID+"-"+s.suffix),
			kgo.FetchIsolationLevel(kgo.ReadCommitted())), c.opts.ClientOpts...))
	}
	t := newTracker(s.topic)
	opts = append(opts,
		kgo.BlockRebalanceOnPoll(),
		// Forwards are produced as records are handled and acknowledged
		// while the stage goes on: no linger, the next batch fills while a
		// produce request is in flight.
		kgo.ProducerLinger(0),
		// Before partitions move to another member, wait for this member's
		// forwards and commit what they allow, so a rebalance does not
		// duplicate the polls in flight.
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
			if err := t.drain(ctx, cl, c.opts.afterForward, c.opts.afterSuccess); err != nil {
				c.log.Warn("kafka: commit before rebalance", slog.String("topic", s.topic), slog.Any("error", err))
				// Their next owner starts at the last commit: a later commit
				// of these offsets could move its progress back.
				t.forget(revoked[s.topic])
			}
		}))
	cl, err := kgo.NewClient(append(opts, c.opts.ClientOpts...)...)
	if err != nil {
		return fmt.Errorf("kafka: client: %w", err)
	}
	sctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	go t.commitLoop(sctx, cl, stop, c.opts.afterForward, c.opts.afterSuccess)
	err = c.consume(ctx, sctx, stop, s, cl, t)
	if ctx.Err() != nil && !t.halted() {
		// Shutting down: the forwards in flight are acknowledged (or fail)
		// within the client's timeouts; commit what they allow.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
		if derr := t.drain(fctx, cl, c.opts.afterForward, c.opts.afterSuccess); derr != nil {
			c.log.Warn("kafka: final commit", slog.String("topic", s.topic), slog.Any("error", derr))
		}
		cancel()
	}
	// A crash (test seam) or a failure ends the session without committing
	// anything more: the next session re-reads from the last commit.
	t.halt()
	stop(nil)
	cl.CloseAllowingRebalance()
	return err
}

// consume is the poll loop of a non-transactional session. Each record is
// handled once; its forward (a retry or a dead letter) is produced without
// waiting, and the tracker lets the committer commit a poll's offsets only
// after that poll's forwards, and every earlier poll's, are acknowledged:
// at-least-once, with the produce and commit round trips off the loop.
//
// The main stage hands each poll to a handler goroutine, so that the
// client fetches the next records while the handler works through these
// (the client fetches again only once a fetch's records are all polled).
// Records come in order and are handled in order, one at a time. A retry
// stage handles its polls itself: a record that is not due yet pauses its
// partition, which must take effect before the next poll.
func (c *Consumer) consume(ctx, sctx context.Context, stop context.CancelCauseFunc, s stage, cl *kgo.Client, t *tracker) error {
	var (
		work   chan polled
		paused *pauser
		ids    = new(idCutter) // handlePoll's: one goroutine calls it
	)
	if s.retry {
		paused = &pauser{topic: s.topic, due: map[int32]time.Time{}, maxWait: s.maxWait}
		defer paused.w.Stop()
	} else {
		work = make(chan polled, maxPollsInFlight)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for b := range work {
				c.handlePoll(ctx, sctx, cl, t, b, nil, ids)
			}
		}()
		defer func() {
			stop(errSessionEnded) // the handler leaves the polls still queued
			close(work)
			<-done
		}()
	}
	for {
		if err := t.wait(sctx, maxPollsInFlight); err != nil {
			return c.sessionErr(ctx, sctx, err)
		}
		wctx, cancel := c.pollContext(sctx, paused)
		fetches := cl.PollRecords(wctx, c.opts.MaxPollRecords)
		cancel()
		if sctx.Err() != nil {
			return c.sessionErr(ctx, sctx, sctx.Err())
		}
		if fetches.IsClientClosed() {
			return errors.New("kafka: client closed")
		}
		c.logFetchErrors(fetches)
		// The attempts' start: no record of this poll is handled earlier.
		b := polled{fetches: fetches, poll: t.open(), at: c.now()}
		if paused != nil {
			paused.resume(cl, b.at)
			c.handlePoll(ctx, sctx, cl, t, b, paused, ids)
		} else {
			work <- b
		}
		cl.AllowRebalance()
	}
}

// logFetchErrors logs a poll's fetch errors, except the poll's own deadline.
func (c *Consumer) logFetchErrors(fetches kgo.Fetches) {
	fetches.EachError(func(t string, p int32, err error) {
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			c.log.Warn("kafka: fetch", slog.String("topic", t), slog.Int("partition", int(p)), slog.Any("error", err))
		}
	})
}

// polled is one poll's records on their way to handlePoll.
type polled struct {
	fetches kgo.Fetches
	poll    *poll
	at      time.Time // when the poll returned
}

// handlePoll handles b's records in order, produces their forwards, and
// seals the poll. It stops early when the session ends (the records not
// handled are not committed: the next session reads them). With paused
// (retry stages), a record that is not due pauses its partition; without
// (the main stage) it is parked again in its tier.
func (c *Consumer) handlePoll(ctx, sctx context.Context, cl *kgo.Client, t *tracker, b polled, paused *pauser, ids *idCutter) {
	pctx := context.WithoutCancel(ctx) // forwards are not failed by shutdown
	promise := func(_ *kgo.Record, err error) { t.forwarded(b.poll, err) }
	b.fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		var last *kgo.Record
		ids.cut(p.Records)
		for i, r := range p.Records {
			if sctx.Err() != nil {
				break
			}
			sc := ids.scan(i)
			out, due, kept := c.handle(ctx, r, &sc, b.at, paused != nil)
			if !due.IsZero() && c.waitDue(sctx, paused, due) {
				out, due, kept = c.handle(ctx, r, &sc, b.at, true)
			}
			if kept {
				break // shutting down: neither committed nor forwarded
			}
			if !due.IsZero() {
				paused.pause(cl, r, due)
				break
			}
			last = r
			if out != nil {
				b.poll.forwards = true
				t.forward(b.poll)
				cl.Produce(pctx, out, promise)
			} else {
				b.poll.successes = true
			}
		}
		if last != nil {
			b.poll.offsets[p.Partition] = kgo.EpochOffset{Epoch: last.LeaderEpoch, Offset: last.Offset + 1}
		}
	})
	paused.rewind(cl)
	t.seal(b.poll)
}

// waitInPlace bounds how long a retry stage waits for a record in place
// (waitDue) instead of pausing its partition: the stage's other partitions
// wait that long at most.
const waitInPlace = 10 * time.Millisecond

// waitDue waits for due when it is at most min(p.maxWait, waitInPlace)
// away and reports whether it waited to the end (false: too far away, or
// ctx ended). A record due that soon is waited for, not paused: a pause
// sets the partition's fetch offset back, so its records are fetched and
// decoded again, and a resumed partition joins the next fetch only after
// the one in flight returns (up to the stage's fetch wait, maxWait). A
// short tier's records come a fraction of a millisecond before they are
// due, batch after batch.
func (c *Consumer) waitDue(ctx context.Context, p *pauser, due time.Time) bool {
	d := due.Sub(c.now())
	switch {
	case d > min(p.maxWait, waitInPlace):
		return false
	case d <= 0:
		return true
	}
	return p.w.Wait(ctx, nil, d) == nil
}

// pollContext is the context of a poll: ctx, with a wall-clock deadline at
// the earliest due time of p's paused partitions, if any, so that the
// stage resumes them on time when no record comes.
func (c *Consumer) pollContext(ctx context.Context, p *pauser) (context.Context, context.CancelFunc) {
	if earliest, ok := p.earliest(); ok {
		return context.WithTimeout(ctx, max(earliest.Sub(c.now()), 0))
	}
	return ctx, func() {}
}

// pauser is a retry stage's record of partitions paused until their head
// record is due.
type pauser struct {
	topic   string
	due     map[int32]time.Time // partition → when its head record is due
	rewinds map[int32]kgo.EpochOffset
	maxWait time.Duration // a head record due within it is waited for (waitDue)
	w       wait.Waiter
}

func (p *pauser) earliest() (time.Time, bool) {
	if p == nil || len(p.due) == 0 {
		return time.Time{}, false
	}
	var e time.Time
	for _, d := range p.due {
		if e.IsZero() || d.Before(e) {
			e = d
		}
	}
	return e, true
}

// resume resumes the partitions due at now.
func (p *pauser) resume(cl *kgo.Client, now time.Time) {
	var parts []int32
	for part, due := range p.due {
		if !now.Before(due) {
			parts = append(parts, part)
			delete(p.due, part)
		}
	}
	if len(parts) > 0 {
		cl.ResumeFetchPartitions(map[string][]int32{p.topic: parts})
	}
}

// pause pauses r's partition until due and remembers to fetch it again
// from r.
func (p *pauser) pause(cl *kgo.Client, r *kgo.Record, due time.Time) {
	cl.PauseFetchPartitions(map[string][]int32{p.topic: {r.Partition}})
	p.due[r.Partition] = due
	if p.rewinds == nil {
		p.rewinds = map[int32]kgo.EpochOffset{}
	}
	// Epoch -1: the offset was just read, there is nothing to validate
	// (an epoch would cost an OffsetForLeaderEpoch request).
	p.rewinds[r.Partition] = kgo.EpochOffset{Epoch: -1, Offset: r.Offset}
}

// rewind sets the paused partitions' fetch offsets back to their head
// records.
func (p *pauser) rewind(cl *kgo.Client) {
	if p == nil || len(p.rewinds) == 0 {
		return
	}
	cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{p.topic: p.rewinds})
	p.rewinds = nil
}

// sessionErr is what consume returns when it stops: ctx's error on
// shutdown, else the tracker's (a forward or a commit failed, or a test
// crash).
func (c *Consumer) sessionErr(ctx, sctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if cause := context.Cause(sctx); cause != nil {
		return cause
	}
	return err
}

// Bounds of a transaction that goes on past its first poll: while the
// client holds more records already fetched and no partition is paused, a
// transaction takes further polls, up to maxTxnPolls polls in all and as
// long as it is younger than maxTxnAge. A backlog then costs one produce
// and one commit (AddOffsetsToTxn, TxnOffsetCommit, a heartbeat, EndTxn)
// per some thousand records instead of per poll; records that come one
// poll at a time are committed poll by poll as before.
const (
	maxTxnPolls = 4
	maxTxnAge   = 100 * time.Millisecond
	// txnPollWait bounds a further poll's wait: its records are fetched
	// already, unless a rebalance took them away meanwhile.
	txnPollWait = time.Millisecond
)

// transactSession consumes one stage in transactions: each transaction's
// forwards and its offsets are one transaction. A transaction takes one
// poll, and the polls already fetched after it within maxTxnPolls and
// maxTxnAge.
func (c *Consumer) transactSession(ctx context.Context, s stage, opts []kgo.Opt) error {
	sess, err := kgo.NewGroupTransactSession(opts...)
	if err != nil {
		return fmt.Errorf("kafka: client: %w", err)
	}
	cl := sess.Client()
	crashed := false
	defer func() {
		if crashed {
			// No transaction end: as if the process died.
			cl.CloseAllowingRebalance()
			return
		}
		sess.CloseAllowingRebalance()
	}()

	t := txn{c: c, cl: cl, paused: &pauser{topic: s.topic, due: map[int32]time.Time{}, maxWait: s.maxWait}}
	defer t.paused.w.Stop()
	for {
		pctx, cancel := c.pollContext(ctx, t.paused)
		fetches := sess.PollRecords(pctx, c.opts.MaxPollRecords)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if fetches.IsClientClosed() {
			return errors.New("kafka: client closed")
		}
		c.logFetchErrors(fetches)
		now := c.now()
		t.paused.resume(cl, now)
		if err := sess.Begin(); err != nil {
			return fmt.Errorf("kafka: begin transaction: %w", err)
		}
		t.reset()
		kept := t.handlePoll(ctx, fetches, now)
		for polls := 1; !kept && polls < maxTxnPolls && t.more(now); polls++ {
			mctx, mcancel := context.WithTimeout(ctx, txnPollWait)
			fetches = sess.PollRecords(mctx, c.opts.MaxPollRecords)
			mcancel()
			if ctx.Err() != nil {
				break
			}
			c.logFetchErrors(fetches) // not the poll's own deadline
			if fetches.NumRecords() == 0 {
				break
			}
			kept = t.handlePoll(ctx, fetches, c.now())
		}
		if kept || ctx.Err() != nil {
			// Shutting down (a handler failed with the cancellation, or
			// ctx ended between polls): the transaction's records are
			// read again by the stage's next client.
			_, _ = sess.End(context.WithoutCancel(ctx), kgo.TryAbort)
			return ctx.Err()
		}
		if len(t.fwd) > 0 {
			if err := cl.ProduceSync(ctx, t.fwd...).FirstErr(); err != nil {
				_, _ = sess.End(ctx, kgo.TryAbort)
				return fmt.Errorf("kafka: forward: %w", err)
			}
			if c.opts.afterForward != nil && c.opts.afterForward() {
				crashed = true
				return errCrash
			}
		}
		if t.handled > len(t.fwd) && c.opts.afterSuccess != nil && c.opts.afterSuccess() {
			crashed = true
			return errCrash
		}
		committed, err := sess.End(ctx, kgo.TryCommit)
		if err != nil {
			return fmt.Errorf("kafka: end transaction: %w", err)
		}
		if !committed {
			c.log.Warn("kafka: transaction aborted; its records are polled again", slog.String("topic", s.topic))
		}
	}
}

// txn is a transactional stage's state across its transactions.
type txn struct {
	c      *Consumer
	cl     *kgo.Client
	paused *pauser
	ids    idCutter
	fwd    []*kgo.Record // the transaction's forwards; reused
	// handled counts the transaction's records handled.
	handled int
}

// reset starts a transaction: the last one's forwards are acknowledged,
// let them go.
func (t *txn) reset() {
	clear(t.fwd)
	t.fwd, t.handled = t.fwd[:0], 0
}

// more reports whether a transaction begun at start may take another poll:
// the client holds records already fetched, no partition is paused (a
// paused partition's fetched records are not polled, and its rewind must
// take effect first), and the transaction is younger than maxTxnAge.
func (t *txn) more(start time.Time) bool {
	return len(t.paused.due) == 0 && t.cl.BufferedFetchRecords() > 0 && t.c.now().Sub(start) < maxTxnAge
}

// handlePoll handles a poll's records that returned at now, in order,
// collecting their forwards; a record that is not due pauses its
// partition. It reports a handler failed by ctx's end (kept): the
// transaction must be aborted.
func (t *txn) handlePoll(ctx context.Context, fetches kgo.Fetches, now time.Time) (kept bool) {
	c := t.c
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		t.ids.cut(p.Records)
		for i, r := range p.Records {
			if kept {
				return
			}
			var (
				out *kgo.Record
				due time.Time
			)
			sc := t.ids.scan(i)
			out, due, kept = c.handle(ctx, r, &sc, now, true)
			if !due.IsZero() && c.waitDue(ctx, t.paused, due) {
				out, due, kept = c.handle(ctx, r, &sc, now, true)
			}
			if kept {
				return
			}
			if !due.IsZero() {
				t.paused.pause(t.cl, r, due)
				return
			}
			t.handled++
			if out != nil {
				t.fwd = append(t.fwd, out)
			}
		}
	})
	t.paused.rewind(t.cl)
	return kept
}

// handle runs one record of a poll that returned at start, whose headers
// read sc. It returns the record to produce (a retry or a dead letter; nil
// after success), or, when mayPause, a non-zero due time when the record
// must wait (without, a record that is not due is parked again in its
// tier). kept reports a
// handler failed by ctx's end (broker.Interrupted): not an attempt, so the
// record must be neither forwarded nor committed (the next session handles
// it again).
func (c *Consumer) handle(ctx context.Context, r *kgo.Record, sc *headerScan, start time.Time, mayPause bool) (out *kgo.Record, due time.Time, kept bool) {
	var (
		st  broker.State
		co  coords // the original record's coordinates
		err error
		o   broker.Outcome
	)
	switch {
	case sc.state != nil:
		st, co, err = parseState(sc.state, c.opts.Topics.Main)
	case sc.legacy:
		// The nine-header form of earlier versions: a record in flight
		// across an upgrade.
		get := headerGetter(r)
		if st, err = broker.DecodeState(get); err == nil {
			var ok bool
			if co, ok = legacyCoords(get); !ok {
				co = recordCoords(r)
			}
		}
	default:
		co = recordCoords(r)
	}
	switch {
	case err != nil:
		co = recordCoords(r)
		o = broker.Outcome{Action: broker.Dead, State: broker.State{Reason: broker.ReasonMalformed, Error: err.Error()}}
	default:
		if !st.Due.IsZero() {
			// A retry: its due time is checked against a fresh reading.
			// A due time no stagger consumer wrote is not waited for:
			// ProcessAt dead-letters it.
			if start = c.now(); mayPause && start.Before(st.Due) && st.CheckDue(start) == nil {
				return nil, st.Due, false
			}
		}
		id := sc.id
		if id == "" {
			id = co.String()
		}
		pctx := ctx
		if c.proc.Trace != nil {
			pctx = c.proc.WithTrace(ctx, headerGetter(r))
		}
		o = c.proc.ProcessAt(pctx, id, r.Value, st, start)
		// Only a failure can be an interruption: a success skips the
		// call, which copies the Outcome.
		if (o.Err != nil || o.Interrupted) && broker.Interrupted(ctx, o) {
			return nil, time.Time{}, true
		}
	}
	switch o.Action {
	case broker.Ack:
		return nil, time.Time{}, false
	case broker.Retry, broker.Park:
		return forward(r, c.opts.Topics.Retry[c.opts.Topics.Tiers.For(o.Delay)], o.State, co, sc.id != "", false), time.Time{}, false
	}
	o.State.Due = time.Time{}
	return forward(r, c.opts.Topics.DLQ, o.State, co, sc.id != "", true), time.Time{}, false
}

// headerScan is what one pass over a record's headers finds.
type headerScan struct {
	id     string // x-stagger-id, "" when absent
	state  []byte // HeaderState's value, nil when absent
	legacy bool   // another header of ours: the nine-header state form
}

// scanHeaders reads r's headers once.
func scanHeaders(r *kgo.Record) headerScan {
	sc, id := scanRecord(r)
	sc.id = string(id)
	return sc
}

// idCutter reads the headers of a partition's records of a poll in one
// pass, and makes their IDs with one allocation instead of one each: cut
// copies them into one string, and scan slices each record's from it. A
// handler that keeps its Delivery's ID keeps that string alive (those
// records' IDs), not the fetched batch the headers are in. Its buffers are
// reused from poll to poll by the one goroutine that handles a stage's
// polls.
type idCutter struct {
	buf   []byte
	ends  []int        // ends[i]: where record i's ID ends in all
	scans []headerScan // scans[i]: record i's, id unset
	all   string
}

// cut reads the headers of rs.
func (c *idCutter) cut(rs []*kgo.Record) {
	c.buf, c.ends = c.buf[:0], c.ends[:0]
	clear(c.scans) // the last poll's state values: let them go
	c.scans = c.scans[:0]
	for _, r := range rs {
		sc, id := scanRecord(r)
		c.buf = append(c.buf, id...)
		c.ends = append(c.ends, len(c.buf))
		c.scans = append(c.scans, sc)
	}
	c.all = string(c.buf)
}

// scan is scanHeaders of record i of the records given to cut, its ID
// sliced from the string cut made.
func (c *idCutter) scan(i int) headerScan {
	sc := c.scans[i]
	start := 0
	if i > 0 {
		start = c.ends[i-1]
	}
	sc.id = c.all[start:c.ends[i]]
	return sc
}

// scanRecord is scanHeaders with the ID's bytes, r's own, left uncopied
// (sc.id is not set).
func scanRecord(r *kgo.Record) (sc headerScan, id []byte) {
	const ours = "x-stagger-"
	found := false
	for _, h := range r.Headers {
		switch {
		case h.Key == broker.HeaderID:
			if !found {
				id, found = h.Value, true
			}
		case h.Key == HeaderState:
			if sc.state == nil {
				sc.state = h.Value[:len(h.Value):len(h.Value)]
				if sc.state == nil {
					sc.state = []byte{} // present but empty: malformed
				}
			}
		case strings.HasPrefix(h.Key, ours):
			sc.legacy = true
		}
	}
	return sc, id
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

// forward copies r to topic with state st: for a retry topic in one
// HeaderState header, for the DLQ in the readable headers of package broker
// and the original's coordinates. co are the original record's coordinates;
// hasID says r carries x-stagger-id (else it gets co as its ID). The new
// header values share one buffer.
func forward(r *kgo.Record, topic string, st broker.State, co coords, hasID, dead bool) *kgo.Record {
	n := 2
	if dead {
		n = 12
	}
	var (
		out *kgo.Record
		buf []byte
	)
	if !dead && len(r.Headers)+n <= len(retryRecord{}.headers) {
		// A retry of a record with few headers: the record, its headers
		// and their values in one allocation. Values longer than the
		// room left (a long topic name or error) spill to the heap as
		// append grows buf; the values already added keep the room.
		rr := new(retryRecord)
		out, buf = &rr.rec, rr.buf[:0]
		out.Headers = rr.headers[:0]
	} else {
		out = &kgo.Record{Headers: make([]kgo.RecordHeader, 0, len(r.Headers)+n)}
		buf = make([]byte, 0, 96+2*len(co.topic)+len(st.Error)+len(st.Reason))
	}
	out.Topic, out.Key, out.Value = topic, r.Key, r.Value
	for _, h := range r.Headers {
		if !isOwnHeader(h.Key) { // a forward rewrites them
			out.Headers = append(out.Headers, h)
		}
	}
	add := func(k string, start int) {
		out.Headers = append(out.Headers, kgo.RecordHeader{Key: k, Value: buf[start:len(buf):len(buf)]})
	}
	if !hasID {
		start := len(buf)
		buf = append(buf, co.topic...)
		buf = append(buf, '/')
		buf = strconv.AppendInt(buf, int64(co.partition), 10)
		buf = append(buf, '/')
		buf = strconv.AppendInt(buf, co.offset, 10)
		add(broker.HeaderID, start)
	}
	if !dead {
		start := len(buf)
		buf = appendState(buf, st, co)
		add(HeaderState, start)
		return out
	}
	start := len(buf)
	buf = append(buf, co.topic...)
	add(HeaderTopic, start)
	start = len(buf)
	buf = strconv.AppendInt(buf, int64(co.partition), 10)
	add(HeaderPartition, start)
	start = len(buf)
	buf = strconv.AppendInt(buf, co.offset, 10)
	add(HeaderOffset, start)
	st.Origin = co.String()
	st.EncodeBytes(buf, func(k string, v []byte) { out.Headers = append(out.Headers, kgo.RecordHeader{Key: k, Value: v}) })
	return out
}

// retryRecord is a forward to a retry topic with room for its headers and
// their values: one allocation instead of three per retry. The room fits
// the HeaderState value of a record with its own x-stagger-id, a topic
// name of up to some 100 bytes and a short error; the struct is 512 bytes,
// a size class of the Go allocator.
type retryRecord struct {
	rec     kgo.Record
	headers [4]kgo.RecordHeader
	buf     [192]byte
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
// id (the key an inbox deduplicates on) and the ledger of the work ctx
// carries ([NewRecord]), and waits for its acknowledgement.
func Publish(ctx context.Context, cl *kgo.Client, topic, id string, key, value []byte) error {
	return cl.ProduceSync(ctx, NewRecord(ctx, topic, id, key, value)).FirstErr()
}
