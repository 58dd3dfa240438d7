package ui

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Errors an operations source returns (wrapped, with a message that names
// the job or queue); the dashboard shows the message and answers 404, 409
// or 501.
var (
	// ErrNotFound: no job or queue has that name.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the job's state does not allow the action (a job
	// already canceled, a requeue of a job that is not dead), so nothing
	// was done.
	ErrConflict = errors.New("conflict")
	// ErrUnsupported: the source cannot do this (a store without the
	// operator API).
	ErrUnsupported = errors.New("not supported")
	// ErrUnauthorized is what Config.Authorize returns to ask for
	// credentials: the dashboard answers 401 with a Basic challenge.
	ErrUnauthorized = errors.New("ui: unauthorized")
)

// Queues is what the queues pages need of a durable queue: counts, a job
// search, one job and the operator's actions. NewQueues adapts a
// queue.Queue; a test or another store may implement it. Every method is
// called from request goroutines at once.
type Queues interface {
	// Overview counts the jobs of every queue by state.
	Overview(ctx context.Context) ([]QueueInfo, error)
	// Jobs returns up to f.Limit jobs that match f, in ID order after
	// f.After, and the cursor of the next page ("" on the last).
	Jobs(ctx context.Context, f JobFilter) (jobs []JobInfo, next string, err error)
	// Job returns one job with its payload (at most maxPayload bytes of
	// it) and its history; ErrNotFound when there is none.
	Job(ctx context.Context, id string, maxPayload int) (JobDetail, error)
	// Cancel cancels a pending job; ErrConflict when its state does not
	// allow it (nothing is done). actor is recorded as who did it.
	Cancel(ctx context.Context, id, actor string) (JobInfo, error)
	// Requeue gives a dead job grant more attempts and a deadline that
	// long from now; ErrConflict when it is not dead.
	Requeue(ctx context.Context, id string, grant int, deadline time.Duration, actor string) (JobInfo, error)
	// SetPaused pauses (true) or resumes a queue's claims; ErrConflict
	// when it is paused (resumed) already.
	SetPaused(ctx context.Context, queue string, paused bool, actor string) error
}

// QueueInfo is one queue's counts at an instant.
type QueueInfo struct {
	Name      string `json:"name"`
	Due       int64  `json:"due"`       // pending, due now
	Scheduled int64  `json:"scheduled"` // pending, due later
	Leased    int64  `json:"leased"`
	Dying     int64  `json:"dying"` // can never run again, not buried yet
	Done      int64  `json:"done"`
	Dead      int64  `json:"dead"`     // every reason
	Canceled  int64  `json:"canceled"` // of the dead, canceled by an operator
	LagMs     int64  `json:"lagMs"`    // how long the oldest due job has waited
	Paused    bool   `json:"paused"`
	// Throughput is jobs finished (done or dead) per second since
	// the previous sample; the dashboard fills it in.
	Throughput float64 `json:"throughput"`
}

// JobInfo is one job as a list shows it. Times are Unix ms (0: none).
type JobInfo struct {
	ID          string `json:"id"`
	Queue       string `json:"queue"`
	State       string `json:"state"`
	Reason      string `json:"reason,omitempty"` // why it is dead
	Attempts    int    `json:"attempts"`
	MaxAttempts int    `json:"maxAttempts"`
	LastError   string `json:"lastError,omitempty"`
	PayloadSize int    `json:"payloadSize"` // -1 in a job search, which reads no payload
	CreatedAt   int64  `json:"createdAt"`
	UpdatedAt   int64  `json:"updatedAt"`
	AvailableAt int64  `json:"availableAt"`
	Deadline    int64  `json:"deadline"`
	FinishedAt  int64  `json:"finishedAt"`
}

// JobDetail is one job with its payload (Payload holds at most the bytes
// asked for; PayloadSize is the whole) and its history, oldest first.
type JobDetail struct {
	JobInfo
	Payload []byte
	History []HistoryEntry
}

// HistoryEntry is one event in a job's life.
type HistoryEntry struct {
	At     int64  // Unix ms
	What   string // "enqueued", "attempt 2 failed", "requeued" …
	Detail string
}

// JobFilter selects jobs (Queues.Jobs); zero fields select all.
type JobFilter struct {
	State     string        // pending, leased, done, dead
	Queue     string        // a queue name
	Reason    string        // a dead reason
	OlderThan time.Duration // created at least this long ago
	Prefix    string        // the ID starts with this
	After     string        // the page starts after this ID
	Limit     int           // 1..MaxPageSize
}

// Bounds of a job search.
const (
	DefaultPageSize = 50
	MaxPageSize     = 1000
	maxFilterLen    = 255 // an ID, a prefix or a cursor
	maxAge          = 100 * 365 * 24 * time.Hour
)

// States are the job states a filter accepts.
var States = []string{"pending", "leased", "done", "dead"}

// ParseJobFilter reads a job search from a query string (state, queue,
// reason, age, prefix, after, limit). An error names the field and the
// rule and wraps ErrInvalid.
func ParseJobFilter(q url.Values) (JobFilter, error) {
	f := JobFilter{Limit: DefaultPageSize}
	one := func(k string) (string, error) {
		v := q[k]
		if len(v) > 1 {
			return "", fmt.Errorf("%w: %s is given %d times, want at most once", ErrInvalid, k, len(v))
		}
		if len(v) == 0 {
			return "", nil
		}
		return strings.TrimSpace(v[0]), nil
	}
	var err error
	if f.State, err = one("state"); err != nil {
		return f, err
	}
	if f.State != "" && !contains(States, f.State) {
		return f, fmt.Errorf("%w: state must be one of %s, got %q", ErrInvalid, strings.Join(States, ", "), clip(f.State))
	}
	if f.Queue, err = one("queue"); err != nil {
		return f, err
	}
	if f.Queue != "" && !validQueue(f.Queue) {
		return f, fmt.Errorf("%w: queue must be 1 to 64 ASCII letters, digits, '_', '-', '.' or ':', got %q", ErrInvalid, clip(f.Queue))
	}
	if f.Reason, err = one("reason"); err != nil {
		return f, err
	}
	if f.Reason != "" && !validReason(f.Reason) {
		return f, fmt.Errorf("%w: reason must be 1 to 64 lower-case letters, digits or '_' (such as exhausted), got %q", ErrInvalid, clip(f.Reason))
	}
	if f.Reason != "" && f.State != "" && f.State != "dead" {
		return f, fmt.Errorf("%w: reason selects dead jobs; state must be dead or any, got %q", ErrInvalid, f.State)
	}
	age, err := one("age")
	if err != nil {
		return f, err
	}
	if age != "" {
		d, perr := time.ParseDuration(age)
		if perr != nil || d < 0 || d > maxAge {
			return f, fmt.Errorf("%w: age must be a duration from 0 to 100 years, such as 90s, 15m or 2h, got %q", ErrInvalid, clip(age))
		}
		f.OlderThan = d
	}
	for _, p := range []struct {
		key string
		dst *string
	}{{"prefix", &f.Prefix}, {"after", &f.After}} {
		v := q[p.key]
		if len(v) > 1 {
			return f, fmt.Errorf("%w: %s is given %d times, want at most once", ErrInvalid, p.key, len(v))
		}
		if len(v) == 1 {
			if err := checkText(p.key, v[0]); err != nil {
				return f, err
			}
			*p.dst = v[0]
		}
	}
	lim, err := one("limit")
	if err != nil {
		return f, err
	}
	if lim != "" {
		n, perr := strconv.Atoi(lim)
		if perr != nil || n < 1 || n > MaxPageSize {
			return f, fmt.Errorf("%w: limit must be a whole number from 1 to %d, got %q", ErrInvalid, MaxPageSize, clip(lim))
		}
		f.Limit = n
	}
	return f, nil
}

// Query is the query string of f (ParseJobFilter reads it back); After is
// left out.
func (f JobFilter) Query() url.Values {
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("state", f.State)
	set("queue", f.Queue)
	set("reason", f.Reason)
	if f.OlderThan > 0 {
		q.Set("age", f.OlderThan.String())
	}
	set("prefix", f.Prefix)
	if f.Limit != 0 && f.Limit != DefaultPageSize {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	return q
}

// checkText checks an ID, a prefix or a cursor: at most 255 bytes of
// UTF-8 without control characters.
func checkText(field, s string) error {
	if len(s) > maxFilterLen {
		return fmt.Errorf("%w: %s must be at most %d bytes, got %d", ErrInvalid, field, maxFilterLen, len(s))
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s must be valid UTF-8", ErrInvalid, field)
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: %s must not hold control characters", ErrInvalid, field)
		}
	}
	return nil
}

func validQueue(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' || c == ':') {
			return false
		}
	}
	return true
}

func validReason(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// clip shortens a value quoted back in an error.
func clip(s string) string {
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return strings.ToValidUTF8(s, "�")
}

// DeadLetters is one place dead work waits: the durable queue's dead jobs
// or a broker's DLQ. The command wires the brokers (their adapters live
// outside this module); BrokerDeadLetters adapts any broker.RedriveSource
// and NewQueues' DeadLetters the queue.
type DeadLetters interface {
	// Name names the source on the page, such as "rabbitmq orders.dlq".
	Name() string
	// List returns up to limit dead letters, changing nothing.
	List(ctx context.Context, limit int) ([]DeadLetter, error)
	// Redrive moves the dead letters r selects back, paced at r.Rate per
	// second (or, with r.DryRun, reports them and moves nothing), calling
	// each for every one moved or selected.
	Redrive(ctx context.Context, r Redrive, each func(DeadLetter)) (RedriveResult, error)
}

// DeadLetter is one dead job or message.
type DeadLetter struct {
	Source   string `json:"source"`
	ID       string `json:"id"`
	Reason   string `json:"reason"`
	Attempts int    `json:"attempts"`
	Error    string `json:"error,omitempty"`
	At       int64  `json:"at,omitempty"` // Unix ms: when it died (queue), first failed (broker); 0 unknown
	Size     int    `json:"size"`         // payload bytes
	To       string `json:"to,omitempty"` // where a redrive sends it
}

// Redrive selects dead letters and paces their move.
type Redrive struct {
	Reason string  // "" selects every reason
	Limit  int     // 0: every one that matches
	Rate   float64 // per second, (0, MaxRedriveRate]
	DryRun bool
	// Grant and Deadline are what a requeued job of the queue gets: more
	// attempts, and a deadline that long after its requeue. Brokers
	// ignore them.
	Grant    int
	Deadline time.Duration
	Actor    string // who redrives, recorded where the source keeps it
}

// MaxRedriveRate bounds Redrive.Rate.
const MaxRedriveRate = 10000

// RedriveResult counts what a redrive did.
type RedriveResult struct {
	Matched int `json:"matched"` // selected
	Moved   int `json:"moved"`   // moved back (0 in a dry run)
	Skipped int `json:"skipped"` // selected but gone or left (no origin, requeued by another)
}
