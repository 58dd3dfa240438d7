package timeline

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

const sampleFile = `{"stagger_timeline":1,"window_ms":200,"origin":"2026-11-03T14:00:00Z","source":"stagger proxy"}
{"start_ms":0,"arrivals":12,"originals":4,"status":{"200":3},"refusals":9,"p50_ms":24.1,"p90_ms":25,"p99_ms":31.5}
{"start_ms":200,"arrivals":7,"status":{"200":5,"5xx":1},"errors":{"timeout":1},"p50_ms":24,"p90_ms":26,"p99_ms":40}
{"end":{"windows":2,"arrivals":19}}
`

func TestReadSample(t *testing.T) {
	tl, err := Read(strings.NewReader(sampleFile))
	if err != nil {
		t.Fatal(err)
	}
	if tl.Width != 200*time.Millisecond || tl.Source != "stagger proxy" || !tl.Origin.Equal(time.Date(2026, 11, 3, 14, 0, 0, 0, time.UTC)) {
		t.Errorf("header %+v", tl.Header)
	}
	if len(tl.Windows) != 2 || tl.Arrivals() != 19 || tl.End() != 400*time.Millisecond {
		t.Fatalf("windows %+v", tl.Windows)
	}
	w0, w1 := tl.Windows[0], tl.Windows[1]
	if w0.Originals != 4 || w0.Refusals != 9 || w0.Served() != 3 || w0.Failed() != 9 || w0.Latency.P50 != 24100*time.Microsecond {
		t.Errorf("window 0 %+v", w0)
	}
	if w1.Originals != -1 || w1.Class(5) != 1 || w1.Class(2) != 5 || w1.Timeouts != 1 || w1.Failed() != 2 || w1.Latency.P99 != 40*time.Millisecond {
		t.Errorf("window 1 %+v", w1)
	}
	if tl.At(0) != 0 || tl.At(399*time.Millisecond) != 1 || tl.At(400*time.Millisecond) != -1 {
		t.Errorf("At: %d %d %d", tl.At(0), tl.At(399*time.Millisecond), tl.At(400*time.Millisecond))
	}
}

// TestRoundTrip: what Write writes, Read reads back equal.
func TestRoundTrip(t *testing.T) {
	tl, err := Read(strings.NewReader(sampleFile))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := Write(&buf, tl); err != nil {
		t.Fatal(err)
	}
	back, err := Read(&buf)
	if err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	if !reflect.DeepEqual(tl, back) {
		t.Errorf("round trip:\n%+v\n%+v", tl, back)
	}
}

// TestReadErrors: each broken file fails with the line, the field and
// the rule.
func TestReadErrors(t *testing.T) {
	const h = `{"stagger_timeline":1,"window_ms":200}` + "\n"
	const w0 = `{"start_ms":0,"arrivals":1,"status":{"200":1}}` + "\n"
	const end1 = `{"end":{"windows":1,"arrivals":1}}` + "\n"
	cases := []struct {
		name, in string
		line     int
		field    string
		rule     string
	}{
		{"empty", "", 1, "", "empty file"},
		{"no header", w0 + end1, 1, "start_ms", "unknown field"},
		{"version", `{"stagger_timeline":2,"window_ms":200}` + "\n" + end1, 1, "stagger_timeline", "not supported"},
		{"width missing", `{"stagger_timeline":1}` + "\n", 1, "window_ms", "required"},
		{"width zero", `{"stagger_timeline":1,"window_ms":0}` + "\n", 1, "window_ms", "must be in"},
		{"width bool", `{"stagger_timeline":1,"window_ms":true}` + "\n", 1, "window_ms", "want a whole number, got bool"},
		{"width fraction", `{"stagger_timeline":1,"window_ms":0.5}` + "\n", 1, "window_ms", "got number 0.5"},
		{"origin", `{"stagger_timeline":1,"window_ms":200,"origin":"yesterday"}` + "\n", 1, "origin", "RFC 3339"},
		{"truncated mid-line", h + `{"start_ms":0,"arri`, 2, "", "truncated"},
		{"truncated no end", h + w0, 3, "", "without its end line"},
		{"unknown field", h + `{"start_ms":0,"arrivals":1,"status":{"200":1},"color":"red"}` + "\n", 2, "color", "unknown field"},
		{"negative", h + `{"start_ms":0,"arrivals":-1}` + "\n", 2, "arrivals", "must be a whole number"},
		{"negative start", h + `{"start_ms":-200,"arrivals":0}` + "\n", 2, "start_ms", "must be in"},
		{"nan", h + `{"start_ms":0,"arrivals":1,"status":{"200":1},"p50_ms":NaN,"p99_ms":1}` + "\n", 2, "", "malformed JSON"},
		{"nan string", h + `{"start_ms":0,"arrivals":1,"status":{"200":1},"p50_ms":"NaN","p99_ms":1}` + "\n", 2, "p50_ms", "want a number, got string"},
		{"inf", h + `{"start_ms":0,"arrivals":1,"status":{"200":1},"p50_ms":1e400,"p99_ms":1}` + "\n", 2, "p50_ms", "got number 1e400"},
		{"huge count", h + `{"start_ms":0,"arrivals":99999999999999999999}` + "\n", 2, "arrivals", "want a whole number"},
		{"bool count", h + `{"start_ms":0,"arrivals":true}` + "\n", 2, "arrivals", "got bool"},
		{"sum", h + `{"start_ms":0,"arrivals":2,"status":{"200":1}}` + "\n", 2, "arrivals", "must equal status"},
		{"status key", h + `{"start_ms":0,"arrivals":1,"status":{"600":1}}` + "\n", 2, `status["600"]`, "status code"},
		{"originals", h + `{"start_ms":0,"arrivals":1,"originals":2,"status":{"200":1}}` + "\n", 2, "originals", "must be in"},
		{"out of order", h + `{"start_ms":400,"arrivals":0}` + "\n" + `{"start_ms":200,"arrivals":0}` + "\n", 3, "start_ms", "in order"},
		{"duplicate", h + w0 + w0, 3, "start_ms", "in order"},
		{"overlap", h + w0 + `{"start_ms":100,"arrivals":0}` + "\n", 3, "start_ms", "overlaps"},
		{"percentiles", h + `{"start_ms":0,"arrivals":1,"status":{"200":1},"p50_ms":5,"p99_ms":4}` + "\n", 2, "p90_ms", "must not decrease"},
		{"p50 alone", h + `{"start_ms":0,"arrivals":1,"status":{"200":1},"p50_ms":5}` + "\n", 2, "p50_ms", "go together"},
		{"negative latency", h + `{"start_ms":0,"arrivals":1,"status":{"200":1},"p50_ms":-5,"p99_ms":4}` + "\n", 2, "p50_ms", "finite number"},
		{"end windows", h + w0 + `{"end":{"windows":2,"arrivals":1}}` + "\n", 3, "end.windows", "must equal"},
		{"end arrivals", h + w0 + `{"end":{"windows":1,"arrivals":5}}` + "\n", 3, "end.arrivals", "must equal"},
		{"after end", h + w0 + end1 + w0, 4, "", "nothing may follow"},
		{"two objects", h + `{"start_ms":0,"arrivals":0}{}` + "\n", 2, "", "one JSON object per line"},
		{"oversized", h + `{"start_ms":0,"arrivals":0,"source":"` + strings.Repeat("x", MaxLine) + `"}` + "\n", 2, "", "longer than"},
		{"malformed", h + "{\n", 2, "", "malformed JSON"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Read(strings.NewReader(c.in))
			var e *Error
			if !errors.As(err, &e) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("got %v, want an *Error", err)
			}
			if e.Line != c.line || e.Field != c.field || !strings.Contains(e.Rule, c.rule) {
				t.Errorf("got line %d field %q rule %q (%v); want line %d field %q rule containing %q", e.Line, e.Field, e.Rule, err, c.line, c.field, c.rule)
			}
		})
	}
}

func TestWriterRejects(t *testing.T) {
	tw, err := NewWriter(&bytes.Buffer{}, Header{Width: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Add(Window{Start: 200 * time.Millisecond, Originals: -1}); err != nil {
		t.Fatal(err)
	}
	err = tw.Add(Window{Start: 300 * time.Millisecond, Originals: -1})
	var e *Error
	if !errors.As(err, &e) || e.Window != 1 || e.Field != "start_ms" || !strings.Contains(err.Error(), "overlaps") {
		t.Errorf("overlap: %v", err)
	}
	if _, err := NewWriter(&bytes.Buffer{}, Header{Width: 1500 * time.Microsecond}); err == nil || !strings.Contains(err.Error(), "whole milliseconds") {
		t.Errorf("width 1.5ms: %v", err)
	}
}

// TestFileAtomic: the destination appears only at Commit, complete; Abort
// leaves nothing behind.
func TestFileAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "run.jsonl")
	f, err := Create(path, Header{Width: time.Second, Source: "test"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := f.Add(Window{Start: time.Duration(i) * time.Second, Arrivals: 2, Originals: -1, Status: []StatusCount{{"200", 2}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("destination exists before Commit: %v", err)
	}
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	tl, err := ReadFile(path)
	if err != nil || len(tl.Windows) != 3 || tl.Arrivals() != 6 {
		t.Fatalf("%v %+v", err, tl)
	}
	g, err := Create(path, Header{Width: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	g.Abort()
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("files left: %v", ents)
	}
	if again, err := ReadFile(path); err != nil || !reflect.DeepEqual(again, tl) {
		t.Errorf("aborted write changed the file: %v", err)
	}
}

const sampleCSV = `window_start,arrivals,status_2xx,status_503,timeout,p50_ms,p99_ms
2026-11-03T14:00:00Z,10,8,1,1,12.5,80
2026-11-03T14:00:01Z,4,4,0,0,11,20

2026-11-03T14:00:03Z,0,,,,,
`

func TestReadCSV(t *testing.T) {
	tl, err := ReadCSV(strings.NewReader(sampleCSV), 0)
	if err != nil {
		t.Fatal(err)
	}
	if tl.Width != time.Second || len(tl.Windows) != 3 || tl.Windows[2].Start != 3*time.Second {
		t.Fatalf("%+v", tl)
	}
	w := tl.Windows[0]
	if w.Code("503") != 1 || w.Class(2) != 8 || w.Timeouts != 1 || w.Failed() != 2 || w.Latency.P90 != InterpolateP90(12500*time.Microsecond, 80*time.Millisecond) {
		t.Errorf("row 1: %+v", w)
	}
	if tl.Windows[2].HasLatency || tl.Windows[2].Originals != -1 {
		t.Errorf("row 3: %+v", tl.Windows[2])
	}
	// A CSV without status columns counts the rest as 2xx.
	tl, err = ReadCSV(strings.NewReader("window_start_ms,arrivals,timeout,reset\n0,10,2,1\n500,3,0,0\n"), 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if tl.Windows[0].Class(2) != 7 || tl.Windows[0].Failed() != 3 {
		t.Errorf("%+v", tl.Windows[0])
	}
}

func TestReadCSVErrors(t *testing.T) {
	cases := []struct {
		name, in string
		width    time.Duration
		line     int
		field    string
		rule     string
	}{
		{"empty", "", 0, 1, "", "empty file"},
		{"unknown column", "window_start_ms,arrivals,colour\n", 0, 1, "colour", "unknown column"},
		{"both starts", "window_start,window_start_ms,arrivals\n", 0, 1, "window_start", "exactly one"},
		{"no arrivals", "window_start_ms,timeout\n", 0, 1, "arrivals", "required"},
		{"no rows", "window_start_ms,arrivals\n", 0, 2, "", "no rows"},
		{"truncated", "window_start_ms,arrivals\n0,1\n200,1", 0, 3, "", "truncated"},
		{"negative", "window_start_ms,arrivals\n0,-1\n", 200 * time.Millisecond, 2, "arrivals", "whole number"},
		{"bool", "window_start_ms,arrivals\n0,true\n", 200 * time.Millisecond, 2, "arrivals", "whole number"},
		{"nan", "window_start_ms,arrivals,p50_ms,p99_ms\n0,1,NaN,2\n", 200 * time.Millisecond, 2, "p50_ms", "finite"},
		{"inf", "window_start_ms,arrivals,p50_ms,p99_ms\n0,1,1,+Inf\n", 200 * time.Millisecond, 2, "p99_ms", "finite"},
		{"order", "window_start_ms,arrivals\n400,1\n200,1\n", 0, 3, "window_start_ms", "in order"},
		{"overlap", "window_start_ms,arrivals\n0,1\n100,1\n", 200 * time.Millisecond, 3, "window_start_ms", "overlaps"},
		{"sum", "window_start_ms,arrivals,status_200\n0,2,1\n", 200 * time.Millisecond, 2, "arrivals", "must equal"},
		{"sum inferred", "window_start_ms,arrivals,status_200\n0,1,1\n200,2,1\n", 0, 3, "arrivals", "must equal"},
		{"errors above arrivals", "window_start_ms,arrivals,timeout\n0,1,2\n", 200 * time.Millisecond, 2, "arrivals", "at least"},
		{"cells", "window_start_ms,arrivals\n0,1,2\n", 0, 2, "", "cells"},
		{"one row", "window_start_ms,arrivals\n0,1\n", 0, 0, "width", "give it"},
		{"bad time", "window_start,arrivals\nnoon,1\n", 0, 2, "window_start", "RFC 3339"},
		{"oversized", "window_start_ms,arrivals\n" + strings.Repeat("1", MaxLine) + "\n", 0, 2, "", "longer than"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ReadCSV(strings.NewReader(c.in), c.width)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("got %v, want an *Error", err)
			}
			if e.Line != c.line || e.Field != c.field || !strings.Contains(e.Rule, c.rule) {
				t.Errorf("got line %d field %q rule %q; want line %d field %q rule containing %q", e.Line, e.Field, e.Rule, c.line, c.field, c.rule)
			}
		})
	}
}

func TestQuantile(t *testing.T) {
	l := Latency{P50: 10 * time.Millisecond, P90: 50 * time.Millisecond, P99: 100 * time.Millisecond}
	for _, c := range []struct {
		u    float64
		want time.Duration
	}{{0, 10 * time.Millisecond}, {0.5, 10 * time.Millisecond}, {0.7, 30 * time.Millisecond}, {0.9, 50 * time.Millisecond}, {0.99, 100 * time.Millisecond}, {1, 100 * time.Millisecond}} {
		if got := l.Quantile(c.u); got != c.want {
			t.Errorf("Quantile(%v) = %v, want %v", c.u, got, c.want)
		}
	}
}

// FuzzRead: Read never panics, and what it accepts survives a round trip
// through Write unchanged.
func FuzzRead(f *testing.F) {
	f.Add([]byte(sampleFile))
	f.Add([]byte(`{"stagger_timeline":1,"window_ms":1}` + "\n" + `{"end":{"windows":0,"arrivals":0}}` + "\n"))
	f.Add([]byte(`{"stagger_timeline":1,"window_ms":200}` + "\n" + `{"start_ms":0,"arrivals":3,"errors":{"reset":1,"refused":1},"abandoned":1}` + "\n" + `{"end":{"windows":1,"arrivals":3}}` + "\n"))
	f.Add([]byte(`{"stagger_timeline":1,"window_ms":200}` + "\n" + `{"start_ms":0,"arri`))
	f.Fuzz(func(t *testing.T, b []byte) {
		tl, err := Read(bytes.NewReader(b))
		if err != nil {
			var e *Error
			if errors.As(err, &e) && e.Rule == "" {
				t.Fatalf("an error without a rule: %v", err)
			}
			return
		}
		if err := tl.Validate(); err != nil {
			t.Fatalf("Read accepted what Validate rejects: %v", err)
		}
		var buf bytes.Buffer
		if err := Write(&buf, tl); err != nil {
			t.Fatalf("Write: %v", err)
		}
		back, err := Read(&buf)
		if err != nil {
			t.Fatalf("reading what Write wrote: %v\n%s", err, buf.String())
		}
		if !reflect.DeepEqual(tl, back) {
			t.Fatalf("round trip changed the timeline:\n%+v\n%+v", tl, back)
		}
	})
}

// FuzzReadCSV: ReadCSV never panics, and what it accepts is a valid
// timeline that survives the JSON lines format.
func FuzzReadCSV(f *testing.F) {
	f.Add([]byte(sampleCSV), int64(0))
	f.Add([]byte("window_start_ms,arrivals,timeout,reset\n0,10,2,1\n500,3,0,0\n"), int64(500))
	f.Add([]byte("window_start_ms,arrivals,originals,refusals,refused,abandoned,p50_ms,p90_ms,p99_ms\n0,5,2,1,1,1,1.5,2,3\n"), int64(100))
	f.Add([]byte("window_start,arrivals\n2026-11-03T14:00:00Z,1\n2026-11-03T14:00:00.5Z,1\n"), int64(0))
	f.Fuzz(func(t *testing.T, b []byte, widthMS int64) {
		tl, err := ReadCSV(bytes.NewReader(b), time.Duration(widthMS)*time.Millisecond)
		if err != nil {
			return
		}
		if err := tl.Validate(); err != nil {
			t.Fatalf("ReadCSV accepted what Validate rejects: %v", err)
		}
		var buf bytes.Buffer
		if err := Write(&buf, tl); err != nil {
			t.Fatalf("Write: %v", err)
		}
		if _, err := Read(&buf); err != nil {
			t.Fatalf("reading what Write wrote: %v", err)
		}
	})
}
