package kafka

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/broker"
)

// HeaderState carries a retry's whole state in one header on the records
// forwarded to retry topics: a record's headers are most of a small
// record's size and much of its produce and fetch cost, and one header in
// place of nine keeps a retry near the cost of the raw client's own. Dead
// letters keep the readable headers of package broker (and HeaderTopic,
// HeaderPartition, HeaderOffset). The value is ASCII:
//
//	1 <attempts> <delay ms> <due ms> <first attempt ms> <first failure ms> <partition> <offset> <topic>[\n<last error>]
//
// times in Unix milliseconds (0: unset), topic, partition and offset the
// original record's. A consumer reads both this and the nine-header form
// that earlier versions wrote, so records in flight across an upgrade keep
// their state.
const HeaderState = "x-stagger-state"

// stateVersion is the first field of HeaderState.
const stateVersion = '1'

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
	ms := func(t time.Time) int64 {
		if t.IsZero() {
			return 0
		}
		return t.UnixMilli()
	}
	buf = append(buf, stateVersion, ' ')
	buf = strconv.AppendInt(buf, int64(st.Attempts), 10)
	for _, n := range [...]int64{st.Prev.Milliseconds(), ms(st.Due), ms(st.FirstAttempt), ms(st.FirstFailure), int64(c.partition), c.offset} {
		buf = append(buf, ' ')
		buf = strconv.AppendInt(buf, n, 10)
	}
	buf = append(buf, ' ')
	buf = append(buf, c.topic...)
	if st.Error != "" {
		buf = append(buf, '\n')
		buf = append(buf, st.Error...)
	}
	return buf
}

// parseState reads a HeaderState value; an error names the header and the
// field that does not parse.
func parseState(v []byte) (broker.State, coords, error) {
	var (
		st broker.State
		c  coords
	)
	bad := func(field string) error {
		return fmt.Errorf("broker: header %s: %s does not parse in %s", HeaderState, field, quoteShortBytes(v))
	}
	line, errText, _ := bytes.Cut(v, []byte{'\n'})
	if len(line) < 2 || line[0] != stateVersion || line[1] != ' ' {
		return st, c, bad("the version (want 1)")
	}
	rest := line[2:]
	var nums [7]int64
	names := [...]string{"attempts", "delay", "due", "first attempt", "first failure", "partition", "offset"}
	for i := range nums {
		sp := bytes.IndexByte(rest, ' ')
		if sp <= 0 {
			return st, c, bad(names[i])
		}
		n, ok := parseNonNeg(rest[:sp])
		if !ok {
			return st, c, bad(names[i])
		}
		nums[i], rest = n, rest[sp+1:]
	}
	if len(rest) == 0 || nums[0] > math.MaxInt32 || nums[5] > math.MaxInt32 {
		return st, c, bad("the topic, attempts or partition")
	}
	st.Attempts = int(nums[0])
	st.Prev = time.Duration(min(nums[1], int64(backoff.MaxDelay/time.Millisecond))) * time.Millisecond
	var times [3]time.Time
	for i, n := range nums[2:5] {
		if n > 0 {
			times[i] = time.UnixMilli(n)
		}
	}
	st.Due, st.FirstAttempt, st.FirstFailure = times[0], times[1], times[2]
	c = coords{topic: string(rest), partition: int32(nums[5]), offset: nums[6]}
	if len(errText) > 0 {
		st.Error = broker.ErrorText(errorString(errText))
	}
	st.Origin = c.String()
	return st, c, nil
}

// errorString lets broker.ErrorText cut a header's error text.
type errorString []byte

func (e errorString) Error() string { return string(e) }

// parseNonNeg parses a decimal int64 >= 0 without allocating.
func parseNonNeg(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var n int64
	for _, ch := range b {
		if ch < '0' || ch > '9' {
			return 0, false
		}
		n = n*10 + int64(ch-'0')
		if n < 0 {
			return 0, false
		}
	}
	return n, true
}

func quoteShortBytes(v []byte) string {
	const max = 64
	if len(v) <= max {
		return strconv.Quote(string(v))
	}
	return strconv.Quote(string(v[:max])) + fmt.Sprintf("… (%d bytes)", len(v))
}

// isOwnHeader reports the headers a forward rewrites: the state (both
// forms) and the original's coordinates.
func isOwnHeader(k string) bool {
	switch k {
	case HeaderState, HeaderTopic, HeaderPartition, HeaderOffset:
		return true
	}
	return broker.IsStateHeader(k)
}

// legacyCoords reads the coordinates headers of the nine-header form.
func legacyCoords(get func(string) (string, bool)) (coords, bool) {
	t, ok := get(HeaderTopic)
	if !ok {
		return coords{}, false
	}
	p, _ := get(HeaderPartition)
	o, _ := get(HeaderOffset)
	pn, _ := strconv.ParseInt(p, 10, 32)
	on, _ := strconv.ParseInt(o, 10, 64)
	return coords{topic: t, partition: int32(pn), offset: on}, true
}

// recordCoords are r's own coordinates.
func recordCoords(r *kgo.Record) coords {
	return coords{topic: r.Topic, partition: r.Partition, offset: r.Offset}
}
