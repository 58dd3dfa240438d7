package timeline

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"
)

// headerJSON is the first line.
type headerJSON struct {
	Version  *int64  `json:"stagger_timeline"`
	WindowMS *int64  `json:"window_ms"`
	Origin   *string `json:"origin,omitempty"`
	Source   *string `json:"source,omitempty"`
}

// lineJSON is a window line or the end line.
type lineJSON struct {
	StartMS   *int64           `json:"start_ms,omitempty"`
	Arrivals  *int64           `json:"arrivals,omitempty"`
	Originals *int64           `json:"originals,omitempty"`
	Status    map[string]int64 `json:"status,omitempty"`
	Refusals  int64            `json:"refusals,omitempty"`
	Errors    *errorsJSON      `json:"errors,omitempty"`
	Abandoned int64            `json:"abandoned,omitempty"`
	P50       *float64         `json:"p50_ms,omitempty"`
	P90       *float64         `json:"p90_ms,omitempty"`
	P99       *float64         `json:"p99_ms,omitempty"`
	End       *endJSON         `json:"end,omitempty"`
}

type errorsJSON struct {
	Timeout int64 `json:"timeout,omitempty"`
	Reset   int64 `json:"reset,omitempty"`
	Refused int64 `json:"refused,omitempty"`
}

type endJSON struct {
	Windows  *int64 `json:"windows"`
	Arrivals *int64 `json:"arrivals"`
}

// decodeStrict decodes one JSON object from line into v: unknown fields
// and trailing data are errors, as are type mismatches (named by field).
func decodeStrict(line []byte, v any) (field, rule string) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		switch {
		case errors.As(err, &te):
			what := "a whole number"
			switch te.Type.Kind().String() {
			case "string":
				what = "a string"
			case "float64":
				what = "a number"
			case "map", "struct", "ptr":
				what = "an object"
			}
			return te.Field, fmt.Sprintf("want %s, got %s", what, te.Value)
		case errors.As(err, &se):
			return "", fmt.Sprintf("malformed JSON at byte %d: %v", se.Offset, err)
		}
		msg := err.Error()
		if f, ok := cutUnknown(msg); ok {
			return f, "unknown field"
		}
		return "", "malformed JSON: " + msg
	}
	if dec.More() {
		return "", "one JSON object per line; found more after it"
	}
	if _, err := dec.Token(); err != io.EOF { // More misses a stray '}' or ']'
		return "", "one JSON object per line; found more after it"
	}
	return "", ""
}

// cutUnknown extracts the name from encoding/json's `unknown field "x"`.
func cutUnknown(msg string) (string, bool) {
	const p = `json: unknown field "`
	if len(msg) > len(p) && msg[:len(p)] == p {
		return msg[len(p) : len(msg)-1], true
	}
	return "", false
}

// msDuration converts a finite, non-negative float of milliseconds.
func msDuration(v float64) (time.Duration, bool) {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > float64(MaxLatency/time.Millisecond) {
		return 0, false
	}
	return time.Duration(math.Round(v * float64(time.Millisecond))), true
}

// lineReader yields the lines of a file, each at most MaxLine bytes with
// its "\n"; a last line without one is a truncated file.
type lineReader struct {
	r    *bufio.Reader
	line int
}

func newLineReader(r io.Reader) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, MaxLine)}
}

// next returns the next line without its "\n" (and "\r"), io.EOF at a clean
// end.
func (lr *lineReader) next() ([]byte, error) {
	b, err := lr.r.ReadSlice('\n')
	switch {
	case err == nil:
		lr.line++
		b = b[:len(b)-1]
		if n := len(b); n > 0 && b[n-1] == '\r' {
			b = b[:n-1]
		}
		return b, nil
	case errors.Is(err, bufio.ErrBufferFull):
		lr.line++
		return nil, &Error{Line: lr.line, Window: -1, Rule: fmt.Sprintf("longer than %d bytes", MaxLine)}
	case err == io.EOF && len(b) == 0:
		return nil, io.EOF
	case err == io.EOF:
		lr.line++
		return nil, &Error{Line: lr.line, Window: -1, Rule: "truncated: the last line does not end with a newline"}
	}
	return nil, err
}

// Read reads a timeline file (the JSON lines format of the package
// documentation) and checks every rule; an error about the content is an
// [*Error] naming the line, the field and the rule.
func Read(r io.Reader) (*Timeline, error) {
	lr := newLineReader(r)
	tl, err := readHeaderLine(lr)
	if err != nil {
		return nil, err
	}
	var arrivals int64
	for {
		line, err := lr.next()
		if err == io.EOF {
			return nil, &Error{Line: lr.line + 1, Window: -1, Rule: `truncated: the file ends without its end line {"end":{...}}`}
		}
		if err != nil {
			return nil, err
		}
		var l lineJSON
		if f, rule := decodeStrict(line, &l); rule != "" {
			return nil, lr.bad(f, rule)
		}
		if l.End != nil {
			if err := readEnd(lr, &l, len(tl.Windows), arrivals); err != nil {
				return nil, err
			}
			return tl, nil
		}
		w, err := nextWindow(lr, &l, tl)
		if err != nil {
			return nil, err
		}
		arrivals += w.Arrivals
		tl.Windows = append(tl.Windows, w)
	}
}

// bad is a content error at the current line.
func (lr *lineReader) bad(field, rule string) error {
	return &Error{Line: lr.line, Window: -1, Field: field, Rule: rule}
}

// readHeaderLine reads the first line, the header, into an empty timeline.
func readHeaderLine(lr *lineReader) (*Timeline, error) {
	line, err := lr.next()
	if err == io.EOF {
		return nil, &Error{Line: 1, Window: -1, Rule: "empty file: want a header line such as {\"stagger_timeline\":1,\"window_ms\":200}"}
	}
	if err != nil {
		return nil, err
	}
	var h headerJSON
	if f, rule := decodeStrict(line, &h); rule != "" {
		return nil, lr.bad(f, rule)
	}
	tl, field, rule := h.timeline()
	if rule != "" {
		return nil, lr.bad(field, rule)
	}
	return tl, nil
}

// timeline checks the header and converts it to a timeline without
// windows; on a broken rule it returns the field and the rule.
func (h *headerJSON) timeline() (*Timeline, string, string) {
	tl := &Timeline{}
	switch {
	case h.Version == nil:
		return nil, "stagger_timeline", "the header must give the format's version (1); is this a timeline file?"
	case *h.Version != Version:
		return nil, "stagger_timeline", fmt.Sprintf("version %d is not supported (want %d)", *h.Version, Version)
	case h.WindowMS == nil:
		return nil, "window_ms", "required: the width of the windows in ms"
	case *h.WindowMS <= 0 || *h.WindowMS > MaxWidth.Milliseconds():
		return nil, "window_ms", fmt.Sprintf("must be in [1, %d], got %d", MaxWidth.Milliseconds(), *h.WindowMS)
	}
	tl.Width = time.Duration(*h.WindowMS) * time.Millisecond
	if h.Origin != nil {
		t, err := time.Parse(time.RFC3339Nano, *h.Origin)
		if err != nil {
			return nil, "origin", "want an RFC 3339 time such as 2026-11-03T14:00:00Z"
		}
		tl.Origin = t
	}
	if h.Source != nil {
		if len(*h.Source) > MaxSource {
			return nil, "source", fmt.Sprintf("at most %d bytes, got %d", MaxSource, len(*h.Source))
		}
		tl.Source = *h.Source
	}
	return tl, "", ""
}

// readEnd checks the end line against the windows and arrivals read, and
// that nothing follows it.
func readEnd(lr *lineReader, l *lineJSON, windows int, arrivals int64) error {
	if l.holdsWindowFields() {
		return lr.bad("end", "the end line holds only \"end\"")
	}
	switch {
	case l.End.Windows == nil || *l.End.Windows != int64(windows):
		return lr.bad("end.windows", fmt.Sprintf("must equal the windows read (%d)", windows))
	case l.End.Arrivals == nil || *l.End.Arrivals != arrivals:
		return lr.bad("end.arrivals", fmt.Sprintf("must equal the arrivals read (%d)", arrivals))
	}
	if _, err := lr.next(); err != io.EOF {
		if err == nil {
			return lr.bad("", "nothing may follow the end line")
		}
		return err
	}
	return nil
}

// holdsWindowFields reports whether the line sets any field of a window
// line.
func (l *lineJSON) holdsWindowFields() bool {
	return l.StartMS != nil || l.Arrivals != nil || l.Originals != nil || len(l.Status) > 0 || l.Refusals != 0 ||
		l.Errors != nil || l.Abandoned != 0 || l.P50 != nil || l.P90 != nil || l.P99 != nil
}

// nextWindow converts a window line and checks it against the window
// before it.
func nextWindow(lr *lineReader, l *lineJSON, tl *Timeline) (Window, error) {
	if len(tl.Windows) == MaxWindows {
		return Window{}, lr.bad("", fmt.Sprintf("more than %d windows", MaxWindows))
	}
	w, field, rule := l.window(tl.Width)
	if rule == "" {
		var prev *Window
		if n := len(tl.Windows); n > 0 {
			prev = &tl.Windows[n-1]
		}
		field, rule = w.check(prev, tl.Width)
	}
	if rule != "" {
		return Window{}, lr.bad(field, rule)
	}
	return w, nil
}

// window converts a window line; it checks what the conversion needs (the
// required fields, the ranges of the numbers); Window.check the rest.
func (l *lineJSON) window(width time.Duration) (Window, string, string) {
	var w Window
	if l.StartMS == nil {
		return w, "start_ms", "required in a window line"
	}
	if *l.StartMS < 0 || *l.StartMS > MaxSpan.Milliseconds() {
		return w, "start_ms", fmt.Sprintf("must be in [0, %d], got %d", MaxSpan.Milliseconds(), *l.StartMS)
	}
	if l.Arrivals == nil {
		return w, "arrivals", "required in a window line"
	}
	w.Start = time.Duration(*l.StartMS) * time.Millisecond
	w.Arrivals, w.Originals = *l.Arrivals, -1
	if l.Originals != nil {
		w.Originals = *l.Originals
		if w.Originals < 0 {
			return w, "originals", fmt.Sprintf("must be >= 0, got %d", w.Originals)
		}
	}
	w.Refusals, w.Abandoned = l.Refusals, l.Abandoned
	if l.Errors != nil {
		w.Timeouts, w.Resets, w.Refused = l.Errors.Timeout, l.Errors.Reset, l.Errors.Refused
	}
	keys := make([]string, 0, len(l.Status))
	for k := range l.Status {
		if !validStatus(k) {
			return w, fmt.Sprintf("status[%q]", k), "want a status code 100–599 or a class 1xx–5xx"
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		w.Status = append(w.Status, StatusCount{Status: k, N: l.Status[k]})
	}
	if l.P50 != nil || l.P90 != nil || l.P99 != nil {
		if l.P50 == nil || l.P99 == nil {
			return w, "p50_ms", "p50_ms and p99_ms go together (p90_ms is optional)"
		}
		var ok bool
		for _, p := range []struct {
			name string
			v    *float64
			d    *time.Duration
		}{{"p50_ms", l.P50, &w.Latency.P50}, {"p90_ms", l.P90, &w.Latency.P90}, {"p99_ms", l.P99, &w.Latency.P99}} {
			if p.v == nil {
				continue
			}
			if *p.d, ok = msDuration(*p.v); !ok {
				return w, p.name, fmt.Sprintf("must be a finite number of ms in [0, %d], got %v", MaxLatency.Milliseconds(), *p.v)
			}
		}
		if l.P90 == nil {
			w.Latency.P90 = InterpolateP90(w.Latency.P50, w.Latency.P99)
		}
		w.HasLatency = true
	}
	return w, "", ""
}

// ReadFile reads the timeline file at path (see [Read]).
func ReadFile(path string) (*Timeline, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tl, err := Read(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return tl, nil
}

// Writer writes a timeline file window by window: memory does not grow
// with the windows written.
type Writer struct {
	w        *bufio.Writer
	h        Header
	n        int
	arrivals int64
	prev     Window
	buf      []byte
	err      error
}

// NewWriter writes the header line to w and returns a Writer for the
// windows; Close writes the end line.
func NewWriter(w io.Writer, h Header) (*Writer, error) {
	if err := h.validate(); err != nil {
		return nil, err
	}
	tw := &Writer{w: bufio.NewWriter(w), h: h}
	hj := headerJSON{Version: ptr(int64(Version)), WindowMS: ptr(h.Width.Milliseconds())}
	if !h.Origin.IsZero() {
		hj.Origin = ptr(h.Origin.UTC().Format(time.RFC3339Nano))
	}
	if h.Source != "" {
		hj.Source = &h.Source
	}
	tw.line(hj)
	return tw, tw.err
}

func ptr[T any](v T) *T { return &v }

func (tw *Writer) line(v any) {
	if tw.err != nil {
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		tw.err = err
		return
	}
	tw.buf = append(append(tw.buf[:0], b...), '\n')
	if len(tw.buf) > MaxLine {
		tw.err = fmt.Errorf("timeline: a line of %d bytes is longer than %d", len(tw.buf), MaxLine)
		return
	}
	_, tw.err = tw.w.Write(tw.buf)
}

// Add writes one window; it must follow the previous one (see the
// package's rules).
func (tw *Writer) Add(w Window) error {
	if tw.err != nil {
		return tw.err
	}
	var prev *Window
	if tw.n > 0 {
		prev = &tw.prev
	}
	if tw.n == MaxWindows {
		return &Error{Window: tw.n, Rule: fmt.Sprintf("more than %d windows", MaxWindows)}
	}
	if field, rule := w.check(prev, tw.h.Width); rule != "" {
		return &Error{Window: tw.n, Field: field, Rule: rule}
	}
	l := lineJSON{StartMS: ptr(w.Start.Milliseconds()), Arrivals: ptr(w.Arrivals), Refusals: w.Refusals, Abandoned: w.Abandoned}
	if w.Originals >= 0 {
		l.Originals = ptr(w.Originals)
	}
	if len(w.Status) > 0 {
		l.Status = make(map[string]int64, len(w.Status))
		for _, s := range w.Status {
			l.Status[s.Status] = s.N
		}
	}
	if w.Timeouts|w.Resets|w.Refused != 0 {
		l.Errors = &errorsJSON{Timeout: w.Timeouts, Reset: w.Resets, Refused: w.Refused}
	}
	if w.HasLatency {
		l.P50, l.P90, l.P99 = ptr(msFloat(w.Latency.P50)), ptr(msFloat(w.Latency.P90)), ptr(msFloat(w.Latency.P99))
	}
	tw.line(l)
	if tw.err == nil {
		tw.n++
		tw.arrivals += w.Arrivals
		tw.prev = w
		tw.prev.Status = nil // keep nothing of the caller's
	}
	return tw.err
}

// msFloat is d in ms, rounded to the µs so that reading it back gives d
// when d is whole µs.
func msFloat(d time.Duration) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 6, 64), 64)
	return v
}

// Flush writes what is buffered to the underlying writer.
func (tw *Writer) Flush() error {
	if tw.err == nil {
		tw.err = tw.w.Flush()
	}
	return tw.err
}

// Close writes the end line and flushes; it does not close the
// underlying writer.
func (tw *Writer) Close() error {
	tw.line(struct {
		End endJSON `json:"end"`
	}{endJSON{Windows: ptr(int64(tw.n)), Arrivals: ptr(tw.arrivals)}})
	return tw.Flush()
}

// Write writes tl to w: the header, every window and the end line.
func Write(w io.Writer, tl *Timeline) error {
	if err := tl.Validate(); err != nil {
		return err
	}
	tw, err := NewWriter(w, tl.Header)
	if err != nil {
		return err
	}
	for _, win := range tl.Windows {
		if err := tw.Add(win); err != nil {
			return err
		}
	}
	return tw.Close()
}

// File is a timeline file being written: the windows go to a temporary
// file next to the destination, which [File.Commit] renames into place
// once the end line is written and synced, so a reader never sees half a
// file and a crash leaves the destination as it was.
type File struct {
	*Writer
	f         *os.File
	path, tmp string
	done      bool
}

// Create starts writing a timeline file at path (see [File]).
func Create(path string, h Header) (*File, error) {
	if err := h.validate(); err != nil {
		return nil, err
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".partial-*")
	if err != nil {
		return nil, err
	}
	tw, err := NewWriter(f, h)
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return &File{Writer: tw, f: f, path: path, tmp: f.Name()}, nil
}

// Commit writes the end line, syncs the file and renames it to its path.
// On an error the temporary file is removed and the path left untouched.
func (f *File) Commit() (err error) {
	if f.done {
		return errors.New("timeline: file already committed or aborted")
	}
	f.done = true
	defer func() {
		if err != nil {
			f.f.Close()
			os.Remove(f.tmp)
		}
	}()
	if err = f.Writer.Close(); err != nil {
		return err
	}
	if err = f.f.Chmod(0o644); err != nil {
		return err
	}
	if err = f.f.Sync(); err != nil {
		return err
	}
	if err = f.f.Close(); err != nil {
		return err
	}
	if err = os.Rename(f.tmp, f.path); err != nil {
		return err
	}
	if d, derr := os.Open(filepath.Dir(f.path)); derr == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// Abort removes the temporary file; the path is left untouched.
func (f *File) Abort() {
	if f.done {
		return
	}
	f.done = true
	f.f.Close()
	os.Remove(f.tmp)
}
