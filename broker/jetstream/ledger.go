package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/retry"
)

// Publish publishes body on subject with the Nats-Msg-Id id (the server's
// duplicate window and a consumer's inbox key on it; none when id is "")
// and the ledger of the work ctx carries in its state headers
// (broker.EncodeLedger): the consumer counts on from the attempts made,
// within the attempts and the deadline that are left. It returns the
// server's acknowledgement. [Publisher] also writes the trace context.
func Publish(ctx context.Context, js jetstream.JetStream, subject, id string, body []byte) (*jetstream.PubAck, error) {
	return Publisher{JS: js}.Publish(ctx, subject, id, body)
}

// Publisher publishes original messages with the ledger and the trace
// context of the publishing code: [Publish] with a trace. The zero Trace
// is [Publish] itself.
type Publisher struct {
	// JS publishes the messages.
	JS jetstream.JetStream
	// Trace, if set, writes the publishing code's trace context on each
	// message (traceparent, tracestate), as broker.StartPublish does: a
	// broker.PublishTracer (contrib/otel's Tracer.Broker) records a
	// producer span from the publish to the server's acknowledgement and
	// the message carries that span's context, so the consumer's spans
	// (Options.Trace set to the same value) are its children.
	Trace retry.Propagator
}

// Publish publishes body on subject as [Publish] does, with p's trace,
// and returns the server's acknowledgement. It returns an error wrapping
// broker.ErrInvalid when p.JS is nil.
func (p Publisher) Publish(ctx context.Context, subject, id string, body []byte) (*jetstream.PubAck, error) {
	if p.JS == nil {
		return nil, fmt.Errorf("%w: jetstream.Publisher.JS must be set", broker.ErrInvalid)
	}
	m := nats.NewMsg(subject)
	m.Data = body
	if id != "" {
		m.Header.Set(jetstream.MsgIDHeader, id)
	}
	end := broker.StartPublish(ctx, p.Trace, broker.PublishInfo{System: "jetstream", Destination: subject, ID: id, Size: len(body)},
		func(k, v string) { m.Header.Set(k, v) })
	ack, err := p.JS.PublishMsg(ctx, m)
	end(err)
	return ack, err
}

// ledger reads the ledger a producer wrote on a message (Publish,
// broker.EncodeLedger) into st, whose attempts are the server's
// deliveries before this one: the attempts count on from the producer's,
// and the producer's budget, deadline and first attempt carry over (the
// Processor bounds them by its Policy). A ledger that does not parse is
// ignored, with a warning: the consumer's own limits apply.
func (c *Consumer) ledger(h nats.Header, id string, st *broker.State) {
	if len(h) == 0 {
		return
	}
	p, err := broker.DecodeState(func(k string) (string, bool) {
		v := h.Values(k)
		if len(v) == 0 {
			return "", false
		}
		return v[0], true
	})
	if err != nil {
		c.log.Warn("jetstream: ignoring a malformed ledger", slog.String("id", id), slog.Any("error", err))
		return
	}
	st.Attempts = int(min(int64(st.Attempts)+int64(p.Attempts), math.MaxInt32))
	st.MaxAttempts, st.Deadline = p.MaxAttempts, p.Deadline
	if !p.FirstAttempt.IsZero() && p.FirstAttempt.Before(st.FirstAttempt) {
		st.FirstAttempt = p.FirstAttempt
	}
}

// errAckWait ends the last delivery's attempt before its ack wait.
var errAckWait = errors.New("jetstream: the last delivery's ack wait is ending")

// lastDelivery reports whether the delivery is the message's last: the
// server's MaxDeliver, or the last attempt of its budget.
func (c *Consumer) lastDelivery(delivered uint64, st broker.State) bool {
	return delivered >= uint64(c.proc.MaxAttempts()) || st.Attempts+1 >= c.proc.Budget(st)
}

type ackKey struct{}

// bound ends ctx at now + d, the last delivery's ack wait, without giving
// the Processor a deadline to fold into the work's ledger: the ack wait is
// the server's bound on the delivery, not the work's deadline, so the
// attempt's Delivery keeps the work's (a handler that hands the work on
// passes that). The handler's own context gets the ack wait as its
// deadline (ackBounded).
func bound(ctx context.Context, d time.Duration) (context.Context, func()) {
	dl := time.Now().Add(d)
	ctx, cancel := context.WithCancelCause(context.WithValue(ctx, ackKey{}, dl))
	t := time.AfterFunc(d, func() { cancel(errAckWait) })
	return ctx, func() { t.Stop(); cancel(nil) }
}

// ackBounded wraps h so that its context has the last delivery's ack wait
// as its deadline (bound), under the Delivery the Processor put there.
func ackBounded(h func(context.Context, []byte) error) func(context.Context, []byte) error {
	if h == nil {
		return nil
	}
	return func(ctx context.Context, payload []byte) error {
		dl, ok := ctx.Value(ackKey{}).(time.Time)
		if !ok {
			return h(ctx, payload)
		}
		hctx, cancel := context.WithDeadline(ctx, dl)
		defer cancel()
		err := h(hctx, payload)
		if herr := hctx.Err(); herr != nil && errors.Is(err, herr) {
			// The ack wait ended the attempt: bound's timer ends ctx at
			// the same moment (it may already have, between the two
			// timers), so the Processor sees an interrupted attempt, not
			// a failure of the work's own.
			<-ctx.Done()
			return fmt.Errorf("%w (%w)", err, context.Cause(ctx))
		}
		return err
	}
}
