package rabbitmq

import (
	"fmt"
	"strconv"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/staggerhq/stagger/broker"
)

// Headers of our own next to broker's: the message's original exchange and
// routing key, kept across wait queues (the delivery's own fields then name
// the main exchange again).
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

// stateOf reads the stagger state of a delivery: HeaderState (a forward to
// a wait queue), else the separate headers (dead letters, and the forwards
// of earlier versions still in a wait queue).
func stateOf(d *amqp.Delivery) (broker.State, error) {
	get := tableGet(d.Headers)
	if v, ok := get(broker.HeaderState); ok {
		st, _, err := broker.ParseCompact([]byte(v))
		return st, err
	}
	return broker.DecodeState(get)
}

// forwardHeaders copies h without x-death bookkeeping (we keep our own
// count) and without the state headers, and writes st instead (a stale or
// malformed state header of h must not reach the copy): in one HeaderState
// header when compact (a forward to a wait queue), else in the readable
// headers (a dead letter).
func forwardHeaders(h amqp.Table, st broker.State, compact bool) amqp.Table {
	out := make(amqp.Table, len(h)+8)
	for k, v := range h {
		switch k {
		case "x-death", "x-first-death-exchange", "x-first-death-queue", "x-first-death-reason",
			"x-last-death-exchange", "x-last-death-queue", "x-last-death-reason", headerPublishTag:
			continue
		}
		if broker.IsStateHeader(k) {
			continue
		}
		out[k] = v
	}
	if compact {
		var buf [96]byte
		out[broker.HeaderState] = string(st.AppendCompact(buf[:0], nil))
		return out
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
