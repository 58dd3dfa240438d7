// Package jetstream runs a stagger retry.Handler on a NATS JetStream
// consumer with broker-side delayed retries: no consumer ever sleeps.
//
//	publisher ──► [stream Stream] ──► durable pull consumer (MaxDeliver = MaxAttempts,
//	                    ▲  │                BackOff from the schedule for ack timeouts)
//	                    │  ▼
//	                    │  Consumer ── nil ─────────────────────► Ack
//	                    └───────────── retryable ───────────────► NakWithDelay(decided delay)
//	                       permanent, unknown, exhausted ───────► copy to [DLQStream], then Term
//
//	server: delivery count reached MaxDeliver without a decision (ack timeouts, crashes)
//	   └─► $JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.<stream>.<consumer>
//	         └─► [AdvisoryStream] ──► mover ── GetMsg(stream_seq) ──► copy to [DLQStream], Ack
//
// Each failure is decided by the shared retry.Policy.Decide; a retry is a
// NakWithDelay of exactly the decided delay, so the server redelivers it no
// sooner. The attempt number is the server's delivery count (NumDelivered),
// counted on from the attempts the producer's ledger says were made before
// the message was published (Publish, broker.EncodeLedger): a delivery that
// crashed or timed out counts, as the durable queue counts claims.
//
// A dead letter is published on a subject of its own under DLQSubject,
// naming the original's stream, the consumer, the stream sequence and the
// time the original was stored, with an expected last subject sequence of
// 0: the DLQ stream stores at most one copy of each message for each
// consumer, however late a second copy comes (the consumer's own and the
// advisory mover's, or a redelivery after a crash), as long as the first
// is still in the DLQ. Two consumers of one stream sharing a DLQ stream each
// keep their dead letter of a message; a stream deleted and recreated
// reuses sequences but not store times.
//
// A message is terminated with a plain Term, which every server honours;
// TermWithReason is understood only from NATS 2.10.4 on (2.9 leaves the
// message pending and redelivers it). The reason travels in the dead
// letter's headers instead.
//
// A nak cannot carry headers, so state that RabbitMQ and Kafka keep in
// headers is not carried between JetStream attempts: the first-attempt and
// first-failure times are the message's stream timestamp (when it was
// stored — a lower bound), and the schedule's prev is 0 (Decorrelated
// schedules restart from their base).
package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/internal/brokerwire"
	"github.com/staggerhq/stagger/internal/wait"
	"github.com/staggerhq/stagger/retry"
)

// Headers of our own next to broker's.
const (
	HeaderStream    = "x-stagger-stream"     // the original's stream
	HeaderStreamSeq = "x-stagger-stream-seq" // the original's stream sequence
)

// Defaults for zero Options fields.
const (
	DefaultAckWait       = 30 * time.Second // Options.AckWait
	DefaultMaxAckPending = 1000             // Options.MaxAckPending, the server's own default
	DefaultConcurrency   = 1                // Options.Concurrency
)

// Options configure a Consumer.
type Options struct {
	// Stream holds the work messages; it must exist (the consumer does not
	// own its retention or subjects).
	Stream string
	// Consumer is the durable consumer's name; created or updated by Setup.
	Consumer string
	// FilterSubject narrows the consumer to a subject ("": the whole stream).
	FilterSubject string
	// DLQStream receives dead letters on subjects under DLQSubject
	// (DLQSubject+".>", one subject per message); created by Setup when
	// missing (default Stream+"_DLQ", DLQSubject "dlq."+Stream+"."+Consumer).
	// An existing one keeps its configuration; Setup adds DLQSubject+".>"
	// to its subjects when none covers it, so the consumers of one stream
	// can share it.
	DLQStream, DLQSubject string
	// AdvisoryStream captures the consumer's MAX_DELIVERIES advisories;
	// created by Setup when missing (default Stream+"_ADV"), shared the same
	// way. Setup creates it with MaxAge AdvisoryMaxAge, so the advisories
	// the mover has handled do not pile up for ever; an existing one keeps
	// its own limits.
	AdvisoryStream string
	// Handler runs once per delivery with a retry.Delivery (Source
	// "jetstream", ID = the x-stagger-id header of a redriven message, else
	// the Nats-Msg-Id header, else "<stream>:<seq>").
	Handler retry.Handler
	// Policy decides retries; nil means broker.CascadePolicy of
	// broker.DefaultTiers (10 s, 1 min, 10 min, then the DLQ). MaxDeliver is
	// its MaxAttempts.
	Policy *retry.Policy
	// Inbox, if set, wraps Handler keyed by the message ID.
	Inbox broker.Inbox
	// Trace, if set, runs each handler in the trace context the message
	// carries (broker.Processor.Trace); contrib/otel's Propagator is one.
	Trace retry.Propagator
	// AckWait is how long a handler may run before the server redelivers
	// the message (0: DefaultAckWait); Policy.AttemptTimeout, which ends
	// the handler's context, must be below it. The consumer's BackOff for ack
	// timeouts is max(AckWait, the schedule's delay) per delivery. Without
	// an AttemptTimeout, the last delivery's handler context ends shortly
	// before its ack wait (a 20th of it, at most 500 ms, earlier): an
	// attempt that outlives it is left to the server, which gives up on it
	// (the advisory mover dead-letters it), rather than acknowledged after
	// it was dead-lettered.
	AckWait time.Duration
	// MaxAckPending bounds unacknowledged messages (0: DefaultMaxAckPending,
	// the server's own default). A message waiting out its NakWithDelay
	// counts as pending: leave room for the retries in flight.
	MaxAckPending int
	// Concurrency is the number of handlers running at once (0:
	// DefaultConcurrency).
	Concurrency int
	// Logger receives consume errors and dead-lettering failures (nil:
	// discarded).
	Logger *slog.Logger
	// Now is the clock for decisions (nil: time.Now).
	Now func() time.Time

	// afterHandle, in tests, runs after the handler's outcome was applied
	// (effect done, or DLQ copy published) and before the ack; returning
	// true skips the ack, as a process crashing at that point would.
	afterHandle func(success bool) (crash bool)
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,200}$`)

func (o *Options) setDefaults() error {
	for _, f := range []struct{ name, v string }{{"Stream", o.Stream}, {"Consumer", o.Consumer}} {
		if !nameRE.MatchString(f.v) {
			return fmt.Errorf("%w: %s must be 1..200 of [A-Za-z0-9_-], got %q", broker.ErrInvalid, f.name, f.v)
		}
	}
	if o.Handler == nil {
		return fmt.Errorf("%w: Handler must not be nil", broker.ErrInvalid)
	}
	if o.DLQStream == "" {
		o.DLQStream = o.Stream + "_DLQ"
	}
	if o.DLQSubject == "" {
		o.DLQSubject = "dlq." + o.Stream + "." + o.Consumer
	}
	if o.AdvisoryStream == "" {
		o.AdvisoryStream = o.Stream + "_ADV"
	}
	for _, f := range []struct{ name, v string }{{"DLQStream", o.DLQStream}, {"AdvisoryStream", o.AdvisoryStream}} {
		if !nameRE.MatchString(f.v) {
			return fmt.Errorf("%w: %s must be 1..200 of [A-Za-z0-9_-], got %q", broker.ErrInvalid, f.name, f.v)
		}
		if f.v == o.Stream {
			// Setup would add its subject to the work stream.
			return fmt.Errorf("%w: %s must differ from Stream, both %q", broker.ErrInvalid, f.name, f.v)
		}
	}
	if o.DLQStream == o.AdvisoryStream {
		return fmt.Errorf("%w: DLQStream must differ from AdvisoryStream, both %q", broker.ErrInvalid, o.DLQStream)
	}
	if err := checkSubject("DLQSubject", o.DLQSubject, false); err != nil {
		return err
	}
	if o.FilterSubject != "" {
		if err := checkSubject("FilterSubject", o.FilterSubject, true); err != nil {
			return err
		}
	}
	if o.Policy == nil {
		o.Policy = broker.CascadePolicy(broker.DefaultTiers)
	}
	if err := o.Policy.Validate(); err != nil {
		return err
	}
	if o.AckWait == 0 {
		o.AckWait = DefaultAckWait
	}
	if o.MaxAckPending == 0 {
		o.MaxAckPending = DefaultMaxAckPending
	}
	if o.Concurrency == 0 {
		o.Concurrency = DefaultConcurrency
	}
	switch {
	case o.AckWait < time.Millisecond || o.AckWait > 24*time.Hour:
		return fmt.Errorf("%w: AckWait must be in [1ms, 24h], got %v", broker.ErrInvalid, o.AckWait)
	case o.MaxAckPending < 1 || o.MaxAckPending > 1<<20:
		return fmt.Errorf("%w: MaxAckPending must be in [1, %d], got %d", broker.ErrInvalid, 1<<20, o.MaxAckPending)
	case o.Concurrency < 1 || o.Concurrency > o.MaxAckPending:
		return fmt.Errorf("%w: Concurrency must be in [1, MaxAckPending=%d], got %d", broker.ErrInvalid, o.MaxAckPending, o.Concurrency)
	case o.Policy.AttemptTimeout >= o.AckWait:
		// The server redelivers after AckWait: an attempt still running
		// then would run beside its own redelivery.
		return fmt.Errorf("%w: Policy.AttemptTimeout must be below AckWait (%v), got %v", broker.ErrInvalid, o.AckWait, o.Policy.AttemptTimeout)
	}
	return nil
}

// checkSubject validates a NATS subject: dot-separated tokens, none empty,
// no whitespace, at most 1024 bytes; the wildcards * (a whole token) and >
// (the last token) only where a filter is meant.
func checkSubject(field, subj string, wildcards bool) error {
	bad := func(rule string) error {
		return fmt.Errorf("%w: %s must be %s, got %q", broker.ErrInvalid, field, rule, subj)
	}
	if len(subj) == 0 || len(subj) > 1024 {
		return bad("1..1024 bytes")
	}
	if strings.ContainsAny(subj, " \t\r\n\f\v\x00") {
		return bad("free of whitespace")
	}
	toks := strings.Split(subj, ".")
	for i, t := range toks {
		switch {
		case t == "":
			return bad("dot-separated non-empty tokens")
		case strings.ContainsAny(t, "*>") && !wildcards:
			return bad("a literal subject (no * or > wildcard)")
		case strings.ContainsAny(t, "*>") && t != "*" && (t != ">" || i != len(toks)-1):
			return bad("a subject whose wildcards are whole tokens (* anywhere, > last)")
		}
	}
	return nil
}

// AdvisorySubject is the MAX_DELIVERIES advisory subject of a consumer.
func AdvisorySubject(stream, consumer string) string {
	return "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + stream + "." + consumer
}

// Consumer consumes a JetStream durable consumer with stagger retries.
type Consumer struct {
	js   jetstream.JetStream
	opts Options
	proc *broker.Processor
	log  *slog.Logger
	// ackWaits[n-1] is how long the server waits for the acknowledgement
	// of delivery n (the last entry for later ones): the consumer's
	// BackOff, or AckWait.
	ackWaits []time.Duration
}

// NewConsumer validates opts. Call Setup (or Run, which calls it) next.
func NewConsumer(js jetstream.JetStream, opts Options) (*Consumer, error) {
	if js == nil {
		return nil, fmt.Errorf("%w: JetStream must not be nil", broker.ErrInvalid)
	}
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Consumer{js: js, opts: opts, log: log,
		proc: &broker.Processor{Handler: ackBounded(opts.Handler), Policy: opts.Policy, Inbox: opts.Inbox, Source: "jetstream", Now: opts.Now, Trace: opts.Trace}}
	cfg := c.ConsumerConfig()
	c.ackWaits = cfg.BackOff
	if len(c.ackWaits) == 0 {
		c.ackWaits = []time.Duration{cfg.AckWait}
	}
	return c, nil
}

// attemptBound is how long delivery n's handler may run: its ack wait less
// a margin (a 20th, at most 500 ms), so that the attempt ends before the
// server gives up on the message and the advisory mover dead-letters it.
func (c *Consumer) attemptBound(delivered uint64) time.Duration {
	w := c.ackWaits[min(int(min(delivered, math.MaxInt32))-1, len(c.ackWaits)-1)]
	return w - min(w/20, 500*time.Millisecond)
}

// AdvisoryMaxAge is how long a stream Setup creates for the advisories
// keeps them: the mover copies a message to the DLQ within seconds of its
// advisory, so a week leaves room for a mover that was down.
const AdvisoryMaxAge = 7 * 24 * time.Hour

// ConsumerConfig is the durable consumer's configuration: explicit acks,
// MaxDeliver = the policy's MaxAttempts, and BackOff (ack-timeout
// redeliveries) = max(AckWait, schedule delay n) for n = 1..MaxAttempts-1.
func (c *Consumer) ConsumerConfig() jetstream.ConsumerConfig {
	maxDeliver := c.proc.MaxAttempts()
	cfg := jetstream.ConsumerConfig{
		Durable:       c.opts.Consumer,
		AckPolicy:     jetstream.AckExplicitPolicy,
		MaxDeliver:    maxDeliver,
		MaxAckPending: c.opts.MaxAckPending,
		FilterSubject: c.opts.FilterSubject,
		AckWait:       c.opts.AckWait,
	}
	if maxDeliver > 1 {
		sched := c.opts.Policy.Schedule
		// A fixed random source: the same policy gives the same consumer
		// configuration on every start, so a restart does not update it.
		src := rand.NewPCG(1, 2)
		var prev time.Duration
		for n := 1; n < maxDeliver && n <= 100; n++ {
			d := c.opts.AckWait
			if sched != nil {
				prev = sched.Delay(n, prev, src)
				d = max(d, prev)
			}
			cfg.BackOff = append(cfg.BackOff, d)
		}
		cfg.AckWait = 0 // the server takes BackOff[0] as the ack wait
	}
	return cfg
}

// Setup creates or updates the durable consumer, creates the DLQ and
// advisory streams when missing, and the advisory mover's consumer. An
// existing DLQ or advisory stream keeps its configuration (retention,
// limits, other consumers' subjects): Setup only adds this consumer's
// subject when no subject of the stream covers it, so consumers of one
// stream can share the default Stream_DLQ and Stream_ADV.
func (c *Consumer) Setup(ctx context.Context) (jetstream.Consumer, jetstream.Consumer, error) {
	cons, err := c.js.CreateOrUpdateConsumer(ctx, c.opts.Stream, c.ConsumerConfig())
	if err != nil {
		return nil, nil, fmt.Errorf("jetstream: consumer %q on stream %q: %w", c.opts.Consumer, c.opts.Stream, err)
	}
	if err := c.ensureStream(ctx, jetstream.StreamConfig{
		Name: c.opts.DLQStream, Subjects: []string{c.opts.DLQSubject + ".>"}, Duplicates: 10 * time.Minute,
	}); err != nil {
		return nil, nil, fmt.Errorf("jetstream: DLQ stream %q: %w", c.opts.DLQStream, err)
	}
	if err := c.ensureStream(ctx, jetstream.StreamConfig{
		Name: c.opts.AdvisoryStream, Subjects: []string{AdvisorySubject(c.opts.Stream, c.opts.Consumer)},
		MaxAge: AdvisoryMaxAge,
	}); err != nil {
		return nil, nil, fmt.Errorf("jetstream: advisory stream %q: %w", c.opts.AdvisoryStream, err)
	}
	// The mover reads only this consumer's advisories: an advisory stream
	// may be shared, and its other consumers' advisories are not ours.
	mover, err := c.js.CreateOrUpdateConsumer(ctx, c.opts.AdvisoryStream, jetstream.ConsumerConfig{
		Durable: c.opts.Consumer + "_dlq", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second,
		FilterSubject: AdvisorySubject(c.opts.Stream, c.opts.Consumer),
	})
	if err != nil {
		return nil, nil, fmt.Errorf("jetstream: advisory consumer on %q: %w", c.opts.AdvisoryStream, err)
	}
	return cons, mover, nil
}

// ensureStream creates the stream cfg describes, or, when it exists, adds
// cfg's one subject to its subjects unless one of them covers it already,
// leaving the rest of its configuration alone.
func (c *Consumer) ensureStream(ctx context.Context, cfg jetstream.StreamConfig) error {
	subject := cfg.Subjects[0]
	for range 3 { // another consumer's Setup may change the stream meanwhile
		st, err := c.js.Stream(ctx, cfg.Name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			if _, err = c.js.CreateStream(ctx, cfg); !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
				return err
			}
			continue // created meanwhile: check its subjects
		}
		if err != nil {
			return err
		}
		have := st.CachedInfo().Config
		if slices.ContainsFunc(have.Subjects, func(s string) bool { return subjectCovers(s, subject) }) {
			return nil
		}
		have.Subjects = append(slices.Clip(have.Subjects), subject)
		if _, err := c.js.UpdateStream(ctx, have); err != nil {
			return fmt.Errorf("add subject %q: %w", subject, err)
		}
	}
	return fmt.Errorf("subject %q: the stream kept changing", subject)
}

// subjectCovers reports whether the stream subject pattern (which may hold
// the wildcards * and >) matches every message published to subject.
func subjectCovers(pattern, subject string) bool {
	for {
		p, prest, pmore := strings.Cut(pattern, ".")
		if p == ">" {
			return subject != ""
		}
		s, srest, smore := strings.Cut(subject, ".")
		if s == ">" || p != "*" && p != s { // only > covers a > filter

			return false
		}
		if !pmore || !smore {
			return pmore == smore
		}
		pattern, subject = prest, srest
	}
}

// Run sets up and consumes until ctx is done, then stops taking messages,
// lets running handlers finish and returns ctx.Err(). The nats.Conn
// reconnects by itself; unacknowledged messages are redelivered by the
// server after their ack wait. When the server ends a consume while the
// connection stays up (the durable consumer or its stream deleted), Run
// sets up again, pausing 50 ms to 5 s between tries, and logs each failure;
// it returns an error when the nats.Conn is closed, or when the first Setup
// fails.
//
// With Concurrency 1 the handler runs in the consume callback itself, as a
// hand-written consumer would; with more, the callback hands each message
// to one of Concurrency goroutines.
func (c *Consumer) Run(ctx context.Context) error {
	cons, mover, err := c.Setup(ctx)
	if err != nil {
		return err
	}
	const minWait, maxWait = 50 * time.Millisecond, 5 * time.Second
	var w wait.Waiter
	wait := minWait
	defer w.Stop()
	for {
		if cons != nil {
			started := time.Now()
			err = c.consume(ctx, cons, mover)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if time.Since(started) > maxWait {
				wait = minWait // it ran for a while: not a failing loop
			}
		}
		if nc := c.js.Conn(); nc != nil && nc.IsClosed() {
			return fmt.Errorf("jetstream: connection closed: %w", err)
		}
		c.log.Warn("jetstream: consume ended, setting up again", slog.Any("error", err), slog.Duration("in", wait))
		if err := w.Wait(ctx, nil, wait); err != nil {
			return err
		}
		wait = min(2*wait, maxWait)
		if cons, mover, err = c.Setup(ctx); err != nil {
			cons = nil
		}
	}
}

// consume consumes cons and the advisory mover until ctx is done (nil) or
// the client library stops either of them (an error saying why).
func (c *Consumer) consume(ctx context.Context, cons, mover jetstream.Consumer) error {
	var (
		work    chan jetstream.Msg
		wg      sync.WaitGroup
		running sync.Mutex // held while the callback handles a message (Concurrency 1)
		stopped bool
		errMu   sync.Mutex
		lastErr error // the last error the client library reported
	)
	handler := func(m jetstream.Msg) {
		running.Lock()
		defer running.Unlock()
		if stopped || ctx.Err() != nil {
			return // not handled: redelivered after its ack wait
		}
		c.handle(ctx, m)
	}
	if c.opts.Concurrency > 1 {
		work = make(chan jetstream.Msg)
		for range c.opts.Concurrency {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for m := range work {
					c.handle(ctx, m)
				}
			}()
		}
		handler = func(m jetstream.Msg) {
			select {
			case work <- m:
			case <-ctx.Done(): // not handled: redelivered after its ack wait
			}
		}
	}
	// stop runs once no callback can run any more (the consumes closed).
	stop := func() {
		if work != nil {
			close(work)
		}
		wg.Wait()
		running.Lock() // waits for a message being handled in the callback
		stopped = true
		running.Unlock()
	}
	errh := jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		errMu.Lock()
		lastErr = err
		errMu.Unlock()
		c.log.Warn("jetstream: consume", slog.Any("error", err))
	})
	cc, err := cons.Consume(handler, jetstream.PullMaxMessages(min(c.opts.MaxAckPending, 512)), errh)
	if err != nil {
		stop()
		return fmt.Errorf("jetstream: consume: %w", err)
	}
	mc, err := mover.Consume(func(m jetstream.Msg) { c.moveAdvisory(ctx, m) }, errh)
	if err != nil {
		cc.Stop()
		<-cc.Closed()
		stop()
		return fmt.Errorf("jetstream: consume advisories: %w", err)
	}
	var which string
	select {
	case <-ctx.Done():
	case <-cc.Closed():
		which = "consumer " + c.opts.Consumer
	case <-mc.Closed():
		which = "advisory consumer " + c.opts.Consumer + "_dlq"
	}
	cc.Stop()
	mc.Stop()
	<-cc.Closed()
	<-mc.Closed()
	stop()
	if ctx.Err() != nil {
		return nil
	}
	errMu.Lock()
	defer errMu.Unlock()
	if lastErr == nil {
		lastErr = errors.New("stopped")
	}
	return fmt.Errorf("jetstream: consume of %s ended: %w", which, lastErr)
}

// messageID is the inbox key: x-stagger-id (a redriven message's original
// ID), else the Nats-Msg-Id header, else stream:seq.
func messageID(m jetstream.Msg, md *ackMeta) string {
	h := m.Headers()
	if id := h.Get(broker.HeaderID); id != "" {
		return id
	}
	if id := h.Get(jetstream.MsgIDHeader); id != "" {
		return id
	}
	return md.stream + ":" + strconv.FormatUint(md.streamSeq, 10)
}

func (c *Consumer) handle(ctx context.Context, m jetstream.Msg) {
	md, ok := parseAckReply(m.Reply())
	if !ok {
		// Not a format the fast parser knows: ask the client library.
		full, err := m.Metadata()
		if err != nil {
			c.log.Error("jetstream: message without metadata, terminating it", slog.Any("error", err))
			_ = m.Term()
			return
		}
		md = ackMeta{stream: full.Stream, delivered: full.NumDelivered, streamSeq: full.Sequence.Stream, timestamp: full.Timestamp.UnixNano()}
	}
	id := messageID(m, &md)
	stored := time.Unix(0, md.timestamp)
	st := broker.State{
		Attempts:     int(min(md.delivered, math.MaxInt32)) - 1, // an int on every platform
		FirstAttempt: stored,
		FirstFailure: stored,
		Origin:       m.Subject(),
	}
	c.ledger(m.Headers(), id, &st)
	actx := ctx
	if c.opts.Policy.AttemptTimeout == 0 && c.lastDelivery(md.delivered, st) {
		// The last delivery: past its ack wait the server gives up on the
		// message and the advisory mover dead-letters it, so a success
		// after that must not happen. (Earlier deliveries are left
		// unbounded: a late success there is a duplicate run, the
		// redelivery's, not a wrong dead letter, and a timer per message
		// would cost the hot path.)
		var stop func()
		actx, stop = bound(ctx, c.attemptBound(md.delivered))
		defer stop()
	}
	pctx := actx
	if c.proc.Trace != nil {
		h := m.Headers()
		pctx = c.proc.WithTrace(actx, func(k string) (string, bool) { v := h.Get(k); return v, v != "" })
	}
	o := c.proc.Process(pctx, id, m.Data(), st)
	if broker.Interrupted(actx, o) {
		// Shutting down, or the attempt outlived its ack wait: the server
		// redelivers it (or, after the last delivery, dead-letters it
		// through the advisory mover).
		return
	}
	var err error
	switch o.Action {
	case broker.Retry, broker.Park:
		if err := m.NakWithDelay(o.Delay); err != nil {
			c.log.Warn("jetstream: nak", slog.Any("error", err))
		}
		return
	case broker.Dead:
		if err := c.deadLetter(ctx, id, md.stream, md.streamSeq, md.timestamp, m.Subject(), m.Headers(), m.Data(), o.State); err != nil {
			// Not copied: leave it unacknowledged; it is redelivered, and at
			// MaxDeliver the advisory mover copies it.
			c.log.Error("jetstream: dead-letter copy failed", slog.String("id", id), slog.Any("error", err))
			return
		}
	}
	if c.opts.afterHandle != nil && c.opts.afterHandle(o.Action == broker.Ack) {
		return
	}
	if o.Action == broker.Dead {
		err = m.Term() // not TermWithReason: see the package doc
	} else {
		err = m.Ack()
	}
	if err != nil {
		c.log.Warn("jetstream: ack", slog.Any("error", err))
	}
}

// ackMeta is what the consumer reads from a message's ack reply subject.
type ackMeta struct {
	stream    string
	delivered uint64 // the server's delivery count: the attempt number
	streamSeq uint64
	timestamp int64 // Unix ns when the message was stored
}

// parseAckReply reads the ack reply subject the server sends with each
// message, without allocating:
//
//	$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<tm>.<pending>
//	$JS.ACK.<domain>.<account hash>.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<tm>.<pending>[.<token>…]
//
// ok is false for anything else (the caller then asks the client library).
func parseAckReply(reply string) (md ackMeta, ok bool) {
	const prefix = "$JS.ACK."
	if len(reply) <= len(prefix) || reply[:len(prefix)] != prefix {
		return md, false
	}
	var tok [12]string
	n := 2
	for start, i := len(prefix), len(prefix); i <= len(reply); i++ {
		if i == len(reply) || reply[i] == '.' {
			if n == len(tok) {
				break // v2's extra tokens: not needed
			}
			tok[n] = reply[start:i]
			n++
			start = i + 1
		}
	}
	base := 0 // v1: stream is token 2
	switch {
	case n == 9:
	case n >= 11:
		base = 2 // v2: domain and account hash first
	default:
		return md, false
	}
	num := func(s string) (uint64, bool) {
		if s == "" || len(s) > 19 {
			return 0, false
		}
		var v uint64
		for i := 0; i < len(s); i++ {
			if s[i] < '0' || s[i] > '9' {
				return 0, false
			}
			v = v*10 + uint64(s[i]-'0')
		}
		return v, true
	}
	var ts uint64
	md.stream = tok[base+2]
	md.delivered, ok = num(tok[base+4])
	if ok {
		md.streamSeq, ok = num(tok[base+5])
	}
	if ok {
		ts, ok = num(tok[base+7])
		md.timestamp = int64(ts)
	}
	return md, ok && md.stream != "" && md.delivered > 0 && ts <= 1<<63-1
}

// deadLetter publishes a copy of the message stored in stream at seq at
// stored (Unix ns; 0 when unknown) to the DLQ stream, once: a copy already
// there is success.
func (c *Consumer) deadLetter(ctx context.Context, id, stream string, seq uint64, stored int64, subject string, h nats.Header, data []byte, st broker.State) error {
	key := stream + "." + c.opts.Consumer + "." + strconv.FormatUint(seq, 10) + "." + strconv.FormatInt(stored, 10)
	out := nats.NewMsg(c.opts.DLQSubject + "." + key)
	for k, v := range h {
		// st replaces the state headers; the original's Nats-Msg-Id and
		// Nats-Expected-* would make the server refuse or drop the copy.
		if !brokerwire.IsStateHeader(k) && !strings.HasPrefix(k, "Nats-") {
			out.Header[k] = append([]string(nil), v...)
		}
	}
	if st.Origin == "" {
		st.Origin = subject
	}
	st.Due = time.Time{}
	st.Encode(func(k, v string) { out.Header.Set(k, v) })
	out.Header.Set(broker.HeaderID, id)
	out.Header.Set(HeaderStream, stream)
	out.Header.Set(HeaderStreamSeq, strconv.FormatUint(seq, 10))
	out.Data = data
	_, err := c.js.PublishMsg(ctx, out, jetstream.WithMsgID("dlq:"+key), jetstream.WithExpectLastSequencePerSubject(0))
	if isWrongLastSeq(err) {
		return nil // dead-lettered before: its subject holds a message
	}
	return err
}

// isWrongLastSeq reports a publish refused because its subject already
// holds a message (replicated streams report 10164, others 10071).
func isWrongLastSeq(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// advisory is the part of a MAX_DELIVERIES advisory the mover reads.
type advisory struct {
	Stream     string `json:"stream"`     // the stream of the message that ran out of deliveries
	Consumer   string `json:"consumer"`   // the durable consumer that delivered it
	StreamSeq  uint64 `json:"stream_seq"` // its stream sequence; 0 marks a malformed advisory
	Deliveries int    `json:"deliveries"` // how many times it was delivered
	// Timestamp is when the server sent the advisory.
	Timestamp time.Time `json:"timestamp"`
}

// ParseDeadLetter decodes a message read from the DLQ stream.
func ParseDeadLetter(m jetstream.Msg) (broker.DeadLetter, error) {
	return parseDeadLetter(m.Headers(), m.Data())
}

func parseDeadLetter(h nats.Header, data []byte) (broker.DeadLetter, error) {
	st, err := broker.DecodeState(func(k string) (string, bool) {
		v := h.Values(k)
		if len(v) == 0 {
			return "", false
		}
		return v[0], true
	})
	if err != nil {
		return broker.DeadLetter{}, err
	}
	return broker.DeadLetter{ID: h.Get(broker.HeaderID), Payload: data, State: st}, nil
}
