package retryhttp_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/retry"
)

// fakeBase is an in-memory http.RoundTripper: it answers attempt i (from 0)
// with answers[min(i, len-1)] and records what it saw. It needs no network,
// so tests run inside testing/synctest with virtual time.
type fakeBase struct {
	mu      sync.Mutex
	answers []answer
	seen    []seenAttempt
	bodies  []*trackedBody
}

type answer struct {
	status int
	header http.Header
	body   string
	err    error
	// block makes the attempt wait for its context to end.
	block bool
}

type seenAttempt struct {
	attempt  string // the AttemptHeader value
	body     string
	at       time.Time
	deadline time.Duration // time left before the attempt's context deadline (0: none)
	header   http.Header   // the attempt's header, as sent
}

// trackedBody records whether it was read to the end and closed.
type trackedBody struct {
	r      io.Reader
	ctx    context.Context
	read   atomic.Int64
	eof    atomic.Bool
	closed atomic.Bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	if err := b.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := b.r.Read(p)
	b.read.Add(int64(n))
	if err == io.EOF {
		b.eof.Store(true)
	}
	return n, err
}

func (b *trackedBody) Close() error { b.closed.Store(true); return nil }

func (f *fakeBase) RoundTrip(r *http.Request) (*http.Response, error) {
	var body string
	if r.Body != nil {
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		body = string(b)
	}
	s := seenAttempt{attempt: r.Header.Get("Stagger-Attempt"), body: body, at: time.Now(), header: r.Header.Clone()}
	if d, ok := r.Context().Deadline(); ok {
		s.deadline = time.Until(d)
	}
	f.mu.Lock()
	i := len(f.seen)
	f.seen = append(f.seen, s)
	a := f.answers[min(i, len(f.answers)-1)]
	f.mu.Unlock()
	if a.block {
		<-r.Context().Done()
		return nil, r.Context().Err()
	}
	if a.err != nil {
		return nil, a.err
	}
	tb := &trackedBody{r: strings.NewReader(a.body), ctx: r.Context()}
	f.mu.Lock()
	f.bodies = append(f.bodies, tb)
	f.mu.Unlock()
	h := a.header.Clone()
	if h == nil {
		h = http.Header{}
	}
	return &http.Response{StatusCode: a.status, Status: http.StatusText(a.status), Header: h, Body: tb, Request: r}, nil
}

func (f *fakeBase) attempts() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.seen)
}

func (f *fakeBase) seenCopy() []seenAttempt {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]seenAttempt(nil), f.seen...)
}

func statuses(codes ...int) []answer {
	a := make([]answer, len(codes))
	for i, c := range codes {
		a[i] = answer{status: c, body: http.StatusText(c)}
	}
	return a
}

// noWait is a policy that retries at once: tests that are not about time.
func noWait(attempts int) *retry.Policy {
	return &retry.Policy{MaxAttempts: attempts, Schedule: backoff.Constant(0)}
}

// recorder collects hook events.
type recorder struct {
	mu      sync.Mutex
	retries []retry.Event
	giveUps []retry.Event
	success []retry.Event
	starts  int
}

func (r *recorder) hooks() retry.Hooks {
	return retry.Hooks{
		OnAttempt: func(retry.Event) { r.mu.Lock(); r.starts++; r.mu.Unlock() },
		OnRetry:   func(e retry.Event) { r.mu.Lock(); r.retries = append(r.retries, e); r.mu.Unlock() },
		OnSuccess: func(e retry.Event) { r.mu.Lock(); r.success = append(r.success, e); r.mu.Unlock() },
		OnGiveUp:  func(e retry.Event) { r.mu.Lock(); r.giveUps = append(r.giveUps, e); r.mu.Unlock() },
	}
}

func (r *recorder) lastGiveUp(t *testing.T) retry.Event {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.giveUps) != 1 {
		t.Fatalf("give-ups = %d, want 1 (%+v)", len(r.giveUps), r.giveUps)
	}
	return r.giveUps[0]
}

func get(t *testing.T, ctx context.Context, rt http.RoundTripper, url string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return rt.RoundTrip(req)
}

var errBoom = errors.New("boom")
