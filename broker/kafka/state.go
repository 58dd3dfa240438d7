package kafka

import (
	"bytes"
	"math"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/internal/brokerwire"
)

// HeaderState is broker.HeaderState: a record forwarded to a retry topic
// carries its whole state in it, with the original record's coordinates as
// the adapter's fields:
//
//	1 <attempts> <delay ms> <due ms> <first attempt ms> <first failure ms> <partition> <offset> <topic>[\n<last error>]
//
// Dead letters keep the readable headers of package broker (and
// HeaderTopic, HeaderPartition, HeaderOffset). A consumer reads both this
// and the nine-header form that earlier versions wrote on forwards, so
// records in flight across an upgrade keep their state.
const HeaderState = broker.HeaderState

// coords are the original record's topic, partition and offset.
type coords struct {
	topic     string
	partition int32
	offset    int64
}

func (c coords) String() string {
	return c.topic + "/" + strconv.Itoa(int(c.partition)) + "/" + strconv.FormatInt(c.offset, 10)
}

// appendState appends st and c as a HeaderState value to buf.
func appendState(buf []byte, st broker.State, c coords) []byte {
	return brokerwire.AppendCompact(buf, st, func(buf []byte) []byte {
		buf = strconv.AppendInt(buf, int64(c.partition), 10)
		buf = append(buf, ' ')
		buf = strconv.AppendInt(buf, c.offset, 10)
		buf = append(buf, ' ')
		return append(buf, c.topic...)
	})
}

// parseState reads a HeaderState value; an error names the header and the
// field that does not parse. The coordinates' topic is known (no copy)
// when it is one of known, usually the main topic. The state's Origin is
// left unset: only a dead letter writes it, from the coordinates.
func parseState(v []byte, known ...string) (broker.State, coords, error) {
	st, rest, err := brokerwire.ParseCompact(v)
	if err != nil {
		return st, coords{}, err
	}
	var nums [2]int64
	for i, name := range [...]string{"partition", "offset"} {
		sp := bytes.IndexByte(rest, ' ')
		if sp <= 0 {
			return st, coords{}, brokerwire.CompactError(v, name)
		}
		n, ok := brokerwire.ParseDecimal(rest[:sp])
		if !ok || (i == 0 && n > math.MaxInt32) {
			return st, coords{}, brokerwire.CompactError(v, name)
		}
		nums[i], rest = n, rest[sp+1:]
	}
	if len(rest) == 0 {
		return st, coords{}, brokerwire.CompactError(v, "topic")
	}
	c := coords{partition: int32(nums[0]), offset: nums[1]}
	for _, k := range known {
		if string(rest) == k {
			c.topic = k
			break
		}
	}
	if c.topic == "" {
		c.topic = string(rest)
	}
	return st, c, nil
}

// isOwnHeader reports the headers a forward rewrites: the state (both
// forms) and the original's coordinates.
func isOwnHeader(k string) bool {
	switch k {
	case HeaderState, HeaderTopic, HeaderPartition, HeaderOffset:
		return true
	}
	return brokerwire.IsStateHeader(k)
}

// legacyCoords reads the coordinates headers of the nine-header form;
// false when they are missing or malformed (an empty topic, a partition
// or offset that is not a decimal in range), and the caller uses the
// record's own: a malformed value read as 0 would give the record the ID
// of another.
func legacyCoords(get func(string) (string, bool)) (coords, bool) {
	t, ok := get(HeaderTopic)
	p, _ := get(HeaderPartition)
	o, _ := get(HeaderOffset)
	pn, pok := brokerwire.ParseDecimal([]byte(p))
	on, ook := brokerwire.ParseDecimal([]byte(o))
	if !ok || t == "" || !pok || pn > math.MaxInt32 || !ook {
		return coords{}, false
	}
	return coords{topic: t, partition: int32(pn), offset: on}, true
}

// recordCoords are r's own coordinates.
func recordCoords(r *kgo.Record) coords {
	return coords{topic: r.Topic, partition: r.Partition, offset: r.Offset}
}
