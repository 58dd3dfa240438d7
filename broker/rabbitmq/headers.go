package rabbitmq

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/internal/brokerwire"
)

// Headers of our own next to broker's: the message's original exchange and
// routing key (the delivery's own fields name the main exchange again after
// a wait queue), on dead letters. A wait-queue forward carries them in its
// compact state instead (see appendFields), unless one has a newline.
const (
	HeaderExchange   = "x-stagger-exchange"    // the exchange the message was first delivered from
	HeaderRoutingKey = "x-stagger-routing-key" // the routing key it was first delivered with
)

// tableGet reads a header as a string, whatever AMQP type a producer used.
func tableGet(h amqp.Table) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := h[k]
		if !ok || v == nil {
			return "", false
		}
		switch x := v.(type) {
		case string:
			return x, true
		case []byte:
			return string(x), true
		case int8, int16, int32, int64, int, uint8, uint16, uint32, uint64:
			return fmt.Sprint(x), true
		case float32:
			return strconv.FormatFloat(float64(x), 'f', -1, 64), true
		case float64:
			return strconv.FormatFloat(x, 'f', -1, 64), true
		}
		return fmt.Sprint(v), true
	}
}

// route is where a message was first delivered from: the exchange and
// routing key its forwards carry on, and a dead letter's origin.
type route struct{ exchange, key string }

// The compact state of a forward to a wait queue (broker.HeaderState)
// carries this adapter's fields after the five numbers:
//
//	<publish tag> <exchange length> <exchange> <routing key>
//
// the publish tag matches a basic.return to its publish, and the exchange
// and routing key are where the message was first delivered from. An
// exchange or a routing key with a newline in it (the line's end) is kept
// in HeaderExchange and HeaderRoutingKey instead, and the fields are the
// publish tag alone. A forward thus has one header of ours, not four: a
// header costs the broker work on every hop (the wait queue's
// dead-lettering decodes and re-encodes the table).

// appendFields appends the adapter's fields of a wait-queue forward.
func appendFields(buf []byte, tag string, r route, inline bool) []byte {
	buf = append(buf, tag...)
	if !inline {
		return buf
	}
	buf = append(buf, ' ')
	buf = strconv.AppendInt(buf, int64(len(r.exchange)), 10)
	buf = append(buf, ' ')
	buf = append(buf, r.exchange...)
	buf = append(buf, ' ')
	return append(buf, r.key...)
}

// inlineRoute reports whether r can be written in the compact state.
func inlineRoute(r route) bool {
	return !strings.ContainsRune(r.exchange, '\n') && !strings.ContainsRune(r.key, '\n')
}

// parseFields reads the adapter's fields of a compact state: the publish
// tag, and the route when it is there. Fields that do not parse give no
// route (the headers are read instead): they carry no decision.
func parseFields(extra []byte) (tag string, r route, ok bool) {
	t, rest, found := bytes.Cut(extra, []byte{' '})
	tag = string(t)
	if !found {
		return tag, r, false
	}
	l, rest, found := bytes.Cut(rest, []byte{' '})
	n, valid := brokerwire.ParseDecimal(l)
	if !found || !valid || n >= int64(len(rest)) || rest[n] != ' ' {
		return tag, r, false
	}
	return tag, route{exchange: string(rest[:n]), key: string(rest[n+1:])}, true
}

// stateOf reads the stagger state of a delivery: HeaderState (a forward to
// a wait queue), else the separate headers (dead letters, and the forwards
// of earlier versions still in a wait queue).
func stateOf(d *amqp.Delivery) (broker.State, error) {
	st, _, err := readState(d)
	return st, err
}

// readState is stateOf with the route the message was first delivered
// from: from the compact state, else from HeaderExchange and
// HeaderRoutingKey, else the delivery's own exchange and routing key (a
// first delivery).
func readState(d *amqp.Delivery) (broker.State, route, error) {
	own := route{exchange: d.Exchange, key: d.RoutingKey}
	if len(d.Headers) == 0 {
		return broker.State{}, own, nil // a first delivery: nothing to read
	}
	get := tableGet(d.Headers)
	var (
		st  broker.State
		err error
	)
	if v, ok := get(broker.HeaderState); ok {
		var extra []byte
		if st, extra, err = brokerwire.ParseCompact([]byte(v)); err == nil {
			if _, r, ok := parseFields(extra); ok {
				return st, r, nil
			}
		}
	} else {
		st, err = broker.DecodeState(get)
	}
	if ex, ok := get(HeaderExchange); ok {
		own.exchange = ex
		own.key, _ = get(HeaderRoutingKey)
	}
	return st, own, err
}

// returnTag is the publish tag of a returned publish: headerPublishTag,
// else the compact state's first adapter field.
func returnTag(h amqp.Table) (string, bool) {
	if t, ok := h[headerPublishTag].(string); ok {
		return t, true
	}
	v, ok := tableGet(h)(broker.HeaderState)
	if !ok {
		return "", false
	}
	_, extra, err := brokerwire.ParseCompact([]byte(v))
	if err != nil || len(extra) == 0 {
		return "", false
	}
	tag, _, _ := parseFields(extra)
	return tag, true
}

// isOwnHeader reports the headers a forward rewrites: broker's state
// headers, the route, the publish tag and RabbitMQ's dead-letter
// bookkeeping (we keep our own count).
func isOwnHeader(k string) bool {
	switch k {
	case "x-death", "x-first-death-exchange", "x-first-death-queue", "x-first-death-reason",
		"x-last-death-exchange", "x-last-death-queue", "x-last-death-reason", headerPublishTag,
		HeaderExchange, HeaderRoutingKey:
		return true
	}
	return brokerwire.IsStateHeader(k)
}

// waitHeaders are the headers of a forward to a wait queue: h's own (not
// ours), and st, the route and the publish tag in one HeaderState header
// (the route in HeaderExchange and HeaderRoutingKey when it has a
// newline).
func waitHeaders(h amqp.Table, st broker.State, r route, tag string) amqp.Table {
	out := make(amqp.Table, len(h)+1)
	for k, v := range h {
		if !isOwnHeader(k) {
			out[k] = v
		}
	}
	inline := inlineRoute(r)
	if !inline {
		out[HeaderExchange], out[HeaderRoutingKey] = r.exchange, r.key
	}
	var buf [160]byte
	out[broker.HeaderState] = string(brokerwire.AppendCompact(buf[:0], st, func(b []byte) []byte { return appendFields(b, tag, r, inline) }))
	return out
}

// forwardHeaders copies h without x-death bookkeeping (we keep our own
// count) and without the state headers, and writes st instead in the
// readable headers (a dead letter; a stale or malformed state header of h
// must not reach the copy). HeaderExchange and HeaderRoutingKey are kept.
func forwardHeaders(h amqp.Table, st broker.State) amqp.Table {
	out := make(amqp.Table, len(h)+10)
	for k, v := range h {
		if isOwnHeader(k) && k != HeaderExchange && k != HeaderRoutingKey {
			continue
		}
		out[k] = v
	}
	st.Encode(func(k, v string) { out[k] = v })
	return out
}

// ParseDeadLetter decodes a message read from the DLQ.
func ParseDeadLetter(d amqp.Delivery) (broker.DeadLetter, error) {
	st, err := stateOf(&d)
	if err != nil {
		return broker.DeadLetter{}, err
	}
	return broker.DeadLetter{ID: d.MessageId, Payload: d.Body, State: st}, nil
}
