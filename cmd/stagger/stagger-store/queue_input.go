package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/staggerhq/stagger/queue"
)

// maxEnqueueLines bounds the jobs one `enqueue` reads from stdin (they are
// all validated before any is written).
const maxEnqueueLines = 1_000_000

// jobLine is one JSON object of `stagger queue enqueue` input. Fields are
// raw so that their JSON types can be checked strictly.
type jobLine struct {
	ID          json.RawMessage `json:"id"`
	Payload     json.RawMessage `json:"payload"`
	MaxAttempts json.RawMessage `json:"max_attempts"`
	Deadline    json.RawMessage `json:"deadline"`
	Queue       json.RawMessage `json:"queue"`
}

// readJobLines parses one JSON object per line from r. Every line is
// checked before the caller writes anything; the first bad line is
// reported with its number, the field and the rule.
func readJobLines(r io.Reader, now int64, maxPayload int) ([]queue.NewJob, []int, error) {
	maxLine := 2*maxPayload + 64<<10 // a payload string may need escaping
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	var jobs []queue.NewJob
	var lines []int
	n := 0
	for sc.Scan() {
		n++
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		if len(jobs) == maxEnqueueLines {
			return nil, nil, fmt.Errorf("stdin: more than %d jobs; split the input", maxEnqueueLines)
		}
		j, err := parseJobLine(line, now, maxPayload)
		if err != nil {
			return nil, nil, fmt.Errorf("line %d: %w", n, err)
		}
		jobs = append(jobs, j)
		lines = append(lines, n)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, nil, fmt.Errorf("line %d: longer than %d bytes (payload limit %d bytes)", n+1, maxLine, maxPayload)
		}
		return nil, nil, fmt.Errorf("reading stdin: %w", err)
	}
	if len(jobs) == 0 {
		return nil, nil, errors.New("no jobs: give --id, or one JSON object per line on stdin")
	}
	return jobs, lines, nil
}

func parseJobLine(line []byte, now int64, maxPayload int) (queue.NewJob, error) {
	var l jobLine
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		msg := err.Error()
		if bytes.Contains(line, []byte("NaN")) || bytes.Contains(line, []byte("Infinity")) {
			msg += " (NaN and Infinity are not numbers in JSON)"
		}
		return queue.NewJob{}, fmt.Errorf("malformed JSON object: %s", msg)
	}
	if dec.More() {
		return queue.NewJob{}, errors.New("malformed JSON: more than one value on the line")
	}
	if err := checkJobKeys(line); err != nil {
		return queue.NewJob{}, err
	}
	var j queue.NewJob
	if len(l.ID) == 0 || isNull(l.ID) {
		return j, errors.New(`"id" is required`)
	}
	if err := jsonString("id", l.ID, &j.ID); err != nil {
		return j, err
	}
	if err := queue.ValidateID(j.ID); err != nil {
		return j, err
	}
	if len(l.Payload) > 0 && !isNull(l.Payload) {
		if l.Payload[0] == '"' {
			var s string
			if err := json.Unmarshal(l.Payload, &s); err != nil {
				return j, fmt.Errorf(`"payload": %w`, err)
			}
			j.Payload = []byte(s)
		} else {
			j.Payload = append([]byte(nil), l.Payload...) // any other JSON value, verbatim
		}
		if len(j.Payload) > maxPayload {
			return j, fmt.Errorf(`"payload" must be at most %d bytes, got %d`, maxPayload, len(j.Payload))
		}
	}
	if len(l.Queue) > 0 && !isNull(l.Queue) {
		if err := jsonString("queue", l.Queue, &j.Queue); err != nil {
			return j, err
		}
		if err := queue.ValidateQueue(j.Queue); err != nil {
			return j, err
		}
	}
	if len(l.MaxAttempts) > 0 && !isNull(l.MaxAttempts) {
		n, err := jsonInt("max_attempts", l.MaxAttempts, 1, queue.MaxMaxAttempts)
		if err != nil {
			return j, err
		}
		j.MaxAttempts = int(n)
	}
	if len(l.Deadline) > 0 && !isNull(l.Deadline) {
		var s string
		if err := jsonString("deadline", l.Deadline, &s); err != nil {
			return j, fmt.Errorf(`%w (a duration such as "1h" or an RFC 3339 time)`, err)
		}
		dl, err := parseDeadline("deadline", s, now)
		if err != nil {
			return j, err
		}
		j.Deadline = dl
	}
	return j, nil
}

// jobKeys are the fields of a job line, spelled as they must be.
var jobKeys = []string{"id", "payload", "max_attempts", "deadline", "queue"}

// checkJobKeys rejects what encoding/json lets through silently: a field
// given twice (the last would win) and a field whose name differs from a
// known one only in case ("ID" would be taken for "id"). line is one
// well-formed JSON object.
func checkJobKeys(line []byte) error {
	dec := json.NewDecoder(bytes.NewReader(line))
	if _, err := dec.Token(); err != nil { // '{'
		return fmt.Errorf("malformed JSON object: %v", err)
	}
	seen := make([]bool, len(jobKeys))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("malformed JSON object: %v", err)
		}
		key, _ := tok.(string)
		i := slices.Index(jobKeys, key)
		if i < 0 {
			return fmt.Errorf("unknown field %q (the fields are %s)", key, strings.Join(jobKeys, ", "))
		}
		if seen[i] {
			return fmt.Errorf("%q is given twice", key)
		}
		seen[i] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return fmt.Errorf("malformed JSON object: %v", err)
		}
	}
	return nil
}

func isNull(raw json.RawMessage) bool { return string(raw) == "null" }

// jsonKind names the JSON type of a raw value, for error messages.
func jsonKind(raw json.RawMessage) string {
	switch raw[0] {
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 'n':
		return "null"
	}
	return "a number"
}

func jsonString(field string, raw json.RawMessage, dst *string) error {
	if raw[0] != '"' {
		return fmt.Errorf("%q must be a string, got %s", field, jsonKind(raw))
	}
	return json.Unmarshal(raw, dst)
}

// jsonInt reads an integer in [lo, hi], rejecting booleans, strings,
// fractions and out-of-range numbers with a message naming the field.
func jsonInt(field string, raw json.RawMessage, lo, hi int64) (int64, error) {
	if k := jsonKind(raw); k != "a number" {
		return 0, fmt.Errorf("%q must be a number, got %s", field, k)
	}
	s := string(raw)
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(s, 64)
		switch {
		case ferr != nil && !errors.Is(ferr, strconv.ErrRange):
			return 0, fmt.Errorf("%q: %s is not a number", field, s)
		case math.IsInf(f, 0) || errors.Is(ferr, strconv.ErrRange) || f > float64(hi) || f < float64(lo):
			return 0, fmt.Errorf("%q must be in [%d, %d], got %s", field, lo, hi, s)
		case f != math.Trunc(f) || !isWhole(s):
			return 0, fmt.Errorf("%q must be a whole number, got %s", field, s)
		}
		n = int64(f)
	}
	if n < lo || n > hi {
		return 0, fmt.Errorf("%q must be in [%d, %d], got %s", field, lo, hi, s)
	}
	return n, nil
}

// isWhole reports whether s, a JSON number with a fraction or an exponent,
// is exactly a whole number: float64 rounds 1.00000000000000001 to 1.
func isWhole(s string) bool {
	mant, exp, _ := strings.Cut(strings.ToLower(strings.TrimPrefix(s, "-")), "e")
	e := 0
	if exp != "" {
		var err error
		if e, err = strconv.Atoi(exp); err != nil {
			return false
		}
	}
	ip, frac, _ := strings.Cut(mant, ".")
	digits := strings.TrimRight(ip+frac, "0") // the point sits after len(ip)+e of them
	return digits == "" || len(digits) <= len(ip)+e
}

// parseDeadline reads a deadline given as a duration from now ("1h",
// "90m") or as an RFC 3339 time, returning absolute Unix ms later than now.
func parseDeadline(field, s string, now int64) (int64, error) {
	s = strings.TrimSpace(s)
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 || d > queue.MaxDuration {
			return 0, fmt.Errorf("%s: duration must be in (0, %v], got %v", field, queue.MaxDuration, d)
		}
		ms := (d + time.Millisecond - 1).Milliseconds()
		if ms > queue.MaxTime-now {
			return 0, fmt.Errorf("%s: %v from now is past year 9999", field, d)
		}
		return now + ms, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is neither a duration (such as 1h) nor an RFC 3339 time (such as 2026-01-02T15:04:05Z)", field, s)
	}
	ms := t.UnixMilli()
	switch {
	case ms <= now:
		return 0, fmt.Errorf("%s: %s is not in the future", field, s)
	case ms > queue.MaxTime:
		return 0, fmt.Errorf("%s: %s is past year 9999", field, s)
	}
	return ms, nil
}
