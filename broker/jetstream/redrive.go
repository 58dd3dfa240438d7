package jetstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/internal/brokerwire"
)

// RedriveSource reads a DLQ stream for broker.Redrive, in stream order, up
// to the last message it held when it was opened (a redriven message that is
// dead-lettered again is not read twice). A moved dead letter is published
// to its origin subject, into the stream it came from (x-stagger-stream),
// and deleted from the DLQ stream once the server acknowledged the publish.
//
// The republish carries the original message ID in x-stagger-id (the
// consumer's Delivery.ID and inbox key) and a Nats-Msg-Id of its own
// ("redrive:<DLQ stream>:<sequence>"), so the work stream's duplicate
// window does not drop it as the original, and a redrive redone after a
// crash between republish and removal is deduplicated inside that window
// (a duplicate outside it, never a loss). Use it from one goroutine.
type RedriveSource struct {
	js     jetstream.JetStream
	stream jetstream.Stream
	filter string
	next   uint64 // the next sequence to read from
	last   uint64 // the last sequence there at open
}

// NewRedriveSource opens the DLQ stream dlq for reading the dead letters on
// subjects matching filter ("": every subject; a consumer's own are
// DLQSubject+".>").
func NewRedriveSource(ctx context.Context, js jetstream.JetStream, dlq, filter string) (*RedriveSource, error) {
	if !nameRE.MatchString(dlq) {
		return nil, fmt.Errorf("%w: DLQ stream must be 1..200 of [A-Za-z0-9_-], got %q", broker.ErrInvalid, dlq)
	}
	if filter == "" {
		filter = ">"
	}
	if err := checkSubject("filter", filter, true); err != nil {
		return nil, err
	}
	st, err := js.Stream(ctx, dlq)
	if err != nil {
		return nil, fmt.Errorf("jetstream: DLQ stream %q: %w", dlq, err)
	}
	state := st.CachedInfo().State
	return &RedriveSource{js: js, stream: st, filter: filter, next: max(state.FirstSeq, 1), last: state.LastSeq}, nil
}

// Next reads the next dead letter, or returns io.EOF.
func (s *RedriveSource) Next(ctx context.Context) (broker.RedriveMessage, error) {
	if s.next > s.last || s.last == 0 {
		return nil, io.EOF
	}
	raw, err := s.stream.GetMsg(ctx, s.next, jetstream.WithGetMsgSubject(s.filter))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, io.EOF
	}
	if err != nil {
		return nil, fmt.Errorf("jetstream: read the DLQ at %d: %w", s.next, err)
	}
	if raw.Sequence > s.last {
		return nil, io.EOF
	}
	s.next = raw.Sequence + 1
	m := &redriveMsg{s: s, raw: raw}
	if m.dl, err = parseDeadLetter(raw.Header, raw.Data); err != nil {
		m.dl = broker.DeadLetter{ID: raw.Header.Get(broker.HeaderID), Payload: raw.Data,
			State: broker.State{Reason: broker.ReasonMalformed, Error: err.Error()}}
	}
	return m, nil
}

type redriveMsg struct {
	s   *RedriveSource
	raw *jetstream.RawStreamMsg
	dl  broker.DeadLetter
}

func (m *redriveMsg) DeadLetter() broker.DeadLetter { return m.dl }

// Destination is the origin subject, "" when the dead letter names none
// (the mover's record of a message the stream no longer held).
func (m *redriveMsg) Destination() string { return m.dl.Origin }

// Republish publishes the dead letter to its origin subject, expecting the
// stream it came from, with st in its headers (JetStream counts attempts by
// delivery: the consumer ignores st.Attempts).
func (m *redriveMsg) Republish(ctx context.Context, st broker.State) error {
	out := nats.NewMsg(m.dl.Origin)
	for k, v := range m.raw.Header {
		switch {
		case brokerwire.IsStateHeader(k), k == HeaderStream, k == HeaderStreamSeq, strings.HasPrefix(k, "Nats-"):
			continue
		}
		out.Header[k] = append([]string(nil), v...)
	}
	st.Encode(func(k, v string) { out.Header.Set(k, v) })
	out.Data = m.raw.Data
	opts := []jetstream.PublishOpt{jetstream.WithMsgID("redrive:" + m.s.stream.CachedInfo().Config.Name + ":" + strconv.FormatUint(m.raw.Sequence, 10))}
	if from := m.raw.Header.Get(HeaderStream); from != "" {
		opts = append(opts, jetstream.WithExpectStream(from))
	}
	_, err := m.s.js.PublishMsg(ctx, out, opts...)
	return err
}

// Remove deletes the dead letter from the DLQ stream.
func (m *redriveMsg) Remove(ctx context.Context) error {
	return m.s.stream.DeleteMsg(ctx, m.raw.Sequence)
}
