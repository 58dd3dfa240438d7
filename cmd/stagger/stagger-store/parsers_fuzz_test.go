package main

import (
	"bytes"
	"encoding/json"
	"math"
	"math/big"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/staggerhq/stagger/queue"
)

// fuzzNow is the enqueue time of the job-line targets (Unix ms).
const fuzzNow = int64(1_767_366_245_000) // 2026-01-02T15:04:05Z

// jobFields are the words an error about a job line names.
var jobFields = []string{`"id"`, `"payload"`, `"max_attempts"`, `"deadline"`, `"queue"`, "deadline:", "id ", "queue name",
	"malformed JSON", "unknown field"}

// FuzzParseJobLine: any line of `stagger queue enqueue` input is refused
// with an error naming the field (or the JSON at fault), or gives a job
// within the queue's bounds, which written back as a line (the payload as
// a JSON string, the deadline as an RFC 3339 time) parses to the same job.
func FuzzParseJobLine(f *testing.F) {
	for _, s := range []string{
		`{"id":"o-1","payload":"hello","max_attempts":5,"deadline":"1h","queue":"emails"}`,
		`{"id":"o-2","payload":{"n":1,"s":[true,null]},"deadline":"2026-06-01T00:00:00Z"}`,
		`{"id":"o-3","payload":null,"max_attempts":null,"deadline":null,"queue":null}`,
		`{"id":"o-4","max_attempts":1e6}`, `{"id":"o-5","max_attempts":1000001}`, `{"id":"o-6","max_attempts":2.5}`, `{"id":"o","max_attempts":150e-2}`, `{"id":"o","max_attempts":1500e-3}`, `{"id":"o","max_attempts":0.03e2}`,
		`{"id":"o-7","max_attempts":9223372036854775808}`, `{"id":"o-8","max_attempts":-1}`, `{"id":"o-9","max_attempts":"3"}`,
		`{"id":"o","max_attempts":true}`, `{"id":"o","max_attempts":1e400}`, `{"id":"o","max_attempts":NaN}`,
		`{"id":"o","deadline":"-1h"}`, `{"id":"o","deadline":"87601h"}`, `{"id":"o","deadline":"2000-01-01T00:00:00Z"}`,
		`{"id":"o","deadline":"9999-12-31T23:59:59.999Z"}`, `{"id":"o","deadline":"9999-12-31T23:59:59-23:59"}`,
		`{"id":"o","deadline":3600}`, `{"id":"","payload":"x"}`, `{"id":"a\u0000b"}`, `{"id":"\ud800"}`, "{\"id\":\"\xff\"}",
		`{"ID":"o"}`, `{"id":"o","id":"p"}`, `{"id":"o","queue":"a b"}`, `{"id":"o","queue":""}`, `{"id":"o"} {"id":"p"}`,
		`{"id":"o","extra":1}`, `{"id":1}`, `[]`, `null`, ``, `{`, `{"id":"` + strings.Repeat("x", 256) + `"}`,
		`{"id":"o","payload":"` + strings.Repeat("p", 2000) + `"}`,
	} {
		f.Add([]byte(s))
	}
	const maxPayload = 1024
	f.Fuzz(func(t *testing.T, line []byte) {
		j, err := parseJobLine(line, fuzzNow, maxPayload)
		if err != nil {
			named := false
			for _, w := range jobFields {
				named = named || strings.Contains(err.Error(), w)
			}
			if !named {
				t.Fatalf("parseJobLine(%q): error %q names no field", line, err)
			}
			return
		}
		switch {
		case queue.ValidateID(j.ID) != nil:
			t.Fatalf("parseJobLine(%q) accepted ID %q: %v", line, j.ID, queue.ValidateID(j.ID))
		case j.Queue != "" && queue.ValidateQueue(j.Queue) != nil:
			t.Fatalf("parseJobLine(%q) accepted queue %q", line, j.Queue)
		case len(j.Payload) > maxPayload:
			t.Fatalf("parseJobLine(%q) accepted a payload of %d bytes", line, len(j.Payload))
		case j.MaxAttempts < 0 || j.MaxAttempts > queue.MaxMaxAttempts:
			t.Fatalf("parseJobLine(%q) accepted max_attempts %d", line, j.MaxAttempts)
		case j.Deadline != 0 && (j.Deadline <= fuzzNow || j.Deadline > queue.MaxTime):
			t.Fatalf("parseJobLine(%q) accepted deadline %d", line, j.Deadline)
		}
		var raw struct {
			MaxAttempts json.Number `json:"max_attempts"`
		}
		if json.Unmarshal(line, &raw) == nil && raw.MaxAttempts != "" {
			// The number as written, exactly (a bounded exponent: big.Rat
			// would build 10^e).
			exact, ok := new(big.Float).SetPrec(4096).SetString(string(raw.MaxAttempts))
			if want := big.NewFloat(float64(j.MaxAttempts)); !ok || exact.Cmp(want) != 0 {
				t.Fatalf("parseJobLine(%q): max_attempts %s read as %d", line, raw.MaxAttempts, j.MaxAttempts)
			}
		}
		if !utf8.Valid(j.Payload) {
			return // a JSON string cannot carry it back
		}
		back := map[string]any{"id": j.ID, "payload": string(j.Payload)}
		if j.MaxAttempts != 0 {
			back["max_attempts"] = j.MaxAttempts
		}
		if j.Deadline != 0 {
			back["deadline"] = time.UnixMilli(j.Deadline).UTC().Format(time.RFC3339Nano)
		}
		if j.Queue != "" {
			back["queue"] = j.Queue
		}
		again, _ := json.Marshal(back)
		j2, err := parseJobLine(again, fuzzNow, maxPayload)
		if err != nil {
			t.Fatalf("parseJobLine(%q) = %+v, written back as %s: %v", line, j, again, err)
		}
		if len(j.Payload) == 0 {
			j.Payload = nil
		}
		if len(j2.Payload) == 0 {
			j2.Payload = nil
		}
		if !reflect.DeepEqual(j2, j) {
			t.Fatalf("parseJobLine(%q) = %+v, written back as %s: %+v", line, j, again, j2)
		}
	})
}

// FuzzReadJobLines: any input is refused with an error naming the line
// (or that there are none), or gives one job per non-blank line with
// increasing line numbers.
func FuzzReadJobLines(f *testing.F) {
	f.Add([]byte("{\"id\":\"a\"}\n\n  {\"id\":\"b\",\"payload\":\"x\"}\r\n"))
	f.Add([]byte("{\"id\":\"a\"}\n{\"id\":\"a\"}\n"))
	f.Add([]byte("\n\n\n"))
	f.Add([]byte("{\"id\":\"a\"}\n{\"id\":\"" + strings.Repeat("x", 5000) + "\"}"))
	f.Add([]byte("{\"id\":\"a\"}\n{\"id\":2}\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		jobs, lines, err := readJobLines(bytes.NewReader(in), fuzzNow, 1024)
		if err != nil {
			if m := err.Error(); !strings.HasPrefix(m, "line ") && !strings.HasPrefix(m, "no jobs") && !strings.HasPrefix(m, "stdin:") {
				t.Fatalf("readJobLines(%q): error %q names no line", in, err)
			}
			return
		}
		if len(jobs) == 0 || len(jobs) != len(lines) {
			t.Fatalf("readJobLines(%q): %d jobs, %d line numbers", in, len(jobs), len(lines))
		}
		for i := range lines {
			if lines[i] < 1 || (i > 0 && lines[i] <= lines[i-1]) {
				t.Fatalf("readJobLines(%q): line numbers %v", in, lines)
			}
		}
		if n := bytes.Count(in, []byte("\n")) + 1; lines[len(lines)-1] > n {
			t.Fatalf("readJobLines(%q): line %d of %d", in, lines[len(lines)-1], n)
		}
	})
}

// FuzzParseDeadline: any --deadline value at any time now is refused with
// an error naming the flag, or gives a Unix ms time after now and no later
// than queue.MaxTime: a duration d is now plus d rounded up to the
// millisecond, an RFC 3339 time is that time.
func FuzzParseDeadline(f *testing.F) {
	for _, s := range []string{"1h", "90m", " 1.5s ", "1ns", "0s", "-1h", "87600h", "87600h0m0.000000001s", "9223372036854775807ns",
		"2026-06-01T00:00:00Z", "2026-06-01T00:00:00.123456789+05:30", "2000-01-01T00:00:00Z", "9999-12-31T23:59:59.999Z",
		"9999-12-31T23:59:59-23:59", "0000-01-01T00:00:00Z", "", "1", "NaN", "1e3h", "\xff", "2026-13-01T00:00:00Z"} {
		f.Add(s, fuzzNow)
	}
	f.Add("1ms", queue.MaxTime-1)
	f.Add("1h", int64(0))
	f.Fuzz(func(t *testing.T, s string, now int64) {
		now = min(max(now, 0), queue.MaxTime)
		ms, err := parseDeadline("--deadline", s, now)
		if err != nil {
			if ms != 0 || !strings.HasPrefix(err.Error(), "--deadline: ") {
				t.Fatalf("parseDeadline(%q, %d) = %d, %q: want 0 and an error naming the flag", s, now, ms, err)
			}
			return
		}
		if ms <= now || ms > queue.MaxTime {
			t.Fatalf("parseDeadline(%q, %d) = %d: outside (now, MaxTime]", s, now, ms)
		}
		if d, derr := time.ParseDuration(strings.TrimSpace(s)); derr == nil {
			if want := now + int64((d+time.Millisecond-1)/time.Millisecond); ms != want {
				t.Fatalf("parseDeadline(%q, %d) = %d, want %d", s, now, ms, want)
			}
		} else if at, terr := time.Parse(time.RFC3339Nano, strings.TrimSpace(s)); terr != nil || ms != at.UnixMilli() {
			t.Fatalf("parseDeadline(%q, %d) = %d: neither a duration nor the RFC 3339 time (%v)", s, now, ms, terr)
		}
	})
}

// FuzzParseRetention: any --retain-done value is refused with an error
// naming the flag, or is "forever" or a duration in [1ms, MaxDuration];
// whole days ("30d") are that many 24-hour days.
func FuzzParseRetention(f *testing.F) {
	for _, s := range []string{"forever", " forever ", "30d", "1d", "0d", "-1d", "+2d", "3650d", "3651d", "9223372036854775807d", "36h",
		"1ms", "999us", "0s", "-1h", "87600h", "87601h", "1.5d", "d", "", "\xffd", "forEVER"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := parseRetention("--retain-done", s)
		if err != nil {
			if d != 0 || !strings.HasPrefix(err.Error(), "--retain-done") {
				t.Fatalf("parseRetention(%q) = %v, %q: want 0 and an error naming the flag", s, d, err)
			}
			return
		}
		if d == queue.KeepForever {
			if strings.TrimSpace(s) != "forever" {
				t.Fatalf("parseRetention(%q) = forever", s)
			}
			return
		}
		if d < time.Millisecond || d > queue.MaxDuration {
			t.Fatalf("parseRetention(%q) = %v: outside [1ms, %v]", s, d, queue.MaxDuration)
		}
		if n, ok := strings.CutSuffix(strings.TrimSpace(s), "d"); ok {
			days, _ := strconv.Atoi(n)
			if d != time.Duration(days)*24*time.Hour {
				t.Fatalf("parseRetention(%q) = %v, want %d days", s, d, days)
			}
		}
	})
}

// FuzzStoreFlagValues: the checked flag values of the queue and broker
// commands (--rate, --retry-status) refuse a bad value or store one within
// their bounds, and what the rate prints (String) sets the same value again.
func FuzzStoreFlagValues(f *testing.F) {
	for _, s := range []string{"1", "0", "-1", "1.5", "1e3", "1e6", "1000001", "NaN", "Inf", "-Inf", "1e-320", "5e-324", "",
		"503,520-599", "400-599", "399", "600", "599-400", "503-", "-503", "5 03", ",,", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var r float64
		rv := rateValue{&r}
		if rv.Set(s) == nil {
			if !(r > 0) || r > 1e6 || math.IsInf(r, 0) {
				t.Fatalf("rateValue.Set(%q) stored %v", s, r)
			}
			if w := r; rv.Set(rv.String()) != nil || r != w {
				t.Fatalf("rateValue %v does not set again from %q", w, rv.String())
			}
		}
		if set, err := parseStatusSet(s); err == nil {
			for c, on := range set {
				if on && (c < 400 || c > 599) {
					t.Fatalf("parseStatusSet(%q) set %d", s, c)
				}
			}
		} else if !strings.HasPrefix(err.Error(), "--retry-status") {
			t.Fatalf("parseStatusSet(%q): error %q does not name the flag", s, err)
		}
	})
}
