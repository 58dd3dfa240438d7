package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/staggerhq/stagger/broker"
)

// ReasonMaxDeliveries is the dead-letter reason of a message the server gave
// up on (MaxDeliver reached without the consumer deciding: ack timeouts or
// crashes).
const ReasonMaxDeliveries = "max_deliveries"

// maxAdvisory bounds an advisory's size; a larger one is not ours.
const maxAdvisory = 64 << 10

// moveAdvisory copies the message a MAX_DELIVERIES advisory names to the
// DLQ stream, then acknowledges the advisory. On failure the advisory is
// left unacknowledged and redelivered.
func (c *Consumer) moveAdvisory(ctx context.Context, m jetstream.Msg) {
	var a advisory
	if len(m.Data()) > maxAdvisory || json.Unmarshal(m.Data(), &a) != nil || a.StreamSeq == 0 {
		c.log.Error("jetstream: malformed MAX_DELIVERIES advisory, dropping it", slog.Int("bytes", len(m.Data())))
		_ = m.Term()
		return
	}
	if a.Stream != c.opts.Stream || a.Consumer != c.opts.Consumer {
		_ = m.Ack() // another consumer's: not ours to move
		return
	}
	stream, err := c.js.Stream(ctx, a.Stream)
	if err != nil {
		c.log.Warn("jetstream: advisory: stream", slog.Any("error", err))
		_ = m.NakWithDelay(time.Second)
		return
	}
	st := broker.State{Attempts: a.Deliveries, Reason: ReasonMaxDeliveries,
		Error: "delivered " + strconv.Itoa(a.Deliveries) + " times without an acknowledgement"}
	raw, err := stream.GetMsg(ctx, a.StreamSeq)
	if err == nil && !a.Timestamp.IsZero() && raw.Time.After(a.Timestamp) {
		// Stored after the advisory was sent: the stream was deleted and
		// recreated, and the sequence now names another message.
		err = jetstream.ErrMsgNotFound
	}
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		// Gone (retention, or already acknowledged): record what we know.
		st.Error += "; message no longer in the stream"
		err = c.deadLetter(ctx, a.Stream+":"+strconv.FormatUint(a.StreamSeq, 10), a.Stream, a.StreamSeq, 0, "", nil, nil, st)
	case err == nil:
		id := raw.Header.Get(jetstream.MsgIDHeader)
		if id == "" {
			id = a.Stream + ":" + strconv.FormatUint(a.StreamSeq, 10)
		}
		st.FirstAttempt, st.FirstFailure, st.Origin = raw.Time, raw.Time, raw.Subject
		err = c.deadLetter(ctx, id, a.Stream, a.StreamSeq, raw.Time.UnixNano(), raw.Subject, raw.Header, raw.Data, st)
	}
	if err != nil {
		c.log.Warn("jetstream: advisory: dead-letter copy", slog.Any("error", err))
		_ = m.NakWithDelay(time.Second)
		return
	}
	_ = m.Ack()
}
