package retryhttp_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/limit"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retryhttp"
)

// dropReused is a loopback server that answers the first request on each
// connection with a retryable 503 (keeping the connection alive) and drops
// every later request on that connection: it reads it, then closes the
// connection without answering. net/http re-sends an idempotent request on
// a new connection when that happens.
type dropReused struct {
	srv      *httptest.Server
	mu       sync.Mutex
	attempts []string // the AttemptHeader of every request received, in order
	dropped  int      // requests read on a reused connection and not answered
	gate     *sync.WaitGroup
}

type connCount struct{ n atomic.Int64 }

type connKey struct{}

func newDropReused(t *testing.T) *dropReused {
	d := &dropReused{}
	d.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := r.Context().Value(connKey{}).(*connCount).n.Add(1)
		d.mu.Lock()
		d.attempts = append(d.attempts, r.Header.Get(retryhttp.AttemptHeader))
		if n > 1 {
			d.dropped++
		}
		gate := d.gate
		d.mu.Unlock()
		if n == 1 && gate != nil {
			gate.Done() // hold the connection busy until all have come
			gate.Wait()
		}
		if n == 1 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		conn.Close()
	}))
	d.srv.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		return context.WithValue(ctx, connKey{}, &connCount{})
	}
	d.srv.Start()
	t.Cleanup(d.srv.Close)
	return d
}

func (d *dropReused) seen() ([]string, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.attempts), d.dropped
}

// TestWireCountsNetHTTPResends: what the server receives is what the
// policy allows. Attempt 1 gets a 503 on a fresh connection; attempt 2
// reuses it and is dropped, so net/http re-sends it on a new connection —
// that re-send is attempt 3, with its own header, and the last one
// MaxAttempts allows. (Counted by net/http's loop alone, the server would
// receive 5 requests: 1, 2, 2, 3, 3.)
func TestWireCountsNetHTTPResends(t *testing.T) {
	d := newDropReused(t)
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	rec := &recorder{}
	p := &retry.Policy{MaxAttempts: 3, Schedule: backoff.Constant(0), Hooks: rec.hooks()}
	resp, err := get(t, context.Background(), retryhttp.New(base, p), d.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	got, dropped := d.seen()
	if !slices.Equal(got, []string{"1", "2", "3"}) {
		t.Fatalf("server received attempts %q, want 1, 2, 3 (at most MaxAttempts, each its own)", got)
	}
	if dropped != 1 {
		t.Fatalf("%d requests dropped on a reused connection, want 1: the test did not make net/http re-send", dropped)
	}
	if resp.StatusCode != 503 {
		t.Errorf("status %d, want the last attempt's 503", resp.StatusCode)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.starts != 3 || len(rec.retries) != 2 {
		t.Errorf("hooks saw %d attempts and %d retries, want 3 and 2", rec.starts, len(rec.retries))
	}
	if g := rec.giveUps; len(g) != 1 || g[0].Reason != retry.Exhausted || g[0].Attempt != 3 {
		t.Errorf("give-ups %+v, want one: exhausted after 3", g)
	}
}

// TestWireRefusedResend: a re-send beyond MaxAttempts, or one the Budget
// refuses, never reaches the server; the call gives up on the dropped
// attempt with a retryable error. The refusal cancels the attempt's
// context whatever it is: the Step's bounded one (Policy.Timeout,
// AttemptTimeout), one that cancels itself (a parent that is never done),
// or a cancel of its own over a parent that can end but that the Step did
// not bound (a caller's cancel, or a context deadline alone) — and never
// the caller's.
func TestWireRefusedResend(t *testing.T) {
	never := func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }
	cancelable := func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }
	deadline := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), time.Hour)
	}
	for _, c := range []struct {
		name   string
		parent func() (context.Context, context.CancelFunc)
		policy retry.Policy
		reason retry.Reason
	}{
		{"attempts", never, retry.Policy{MaxAttempts: 2}, retry.Exhausted},
		{"attempts, bounded attempt", never, retry.Policy{MaxAttempts: 2, AttemptTimeout: time.Minute}, retry.Exhausted},
		{"attempts, cancelable parent", cancelable, retry.Policy{MaxAttempts: 2}, retry.Exhausted},
		{"budget", never, retry.Policy{MaxAttempts: 5, Budget: &retriesLeft{n: 1}}, retry.Budget},
		{"budget, deadline", never, retry.Policy{MaxAttempts: 5, Budget: &retriesLeft{n: 1}, Timeout: time.Minute}, retry.Budget},
		{"budget, context deadline", deadline, retry.Policy{MaxAttempts: 5, Budget: &retriesLeft{n: 1}}, retry.Budget},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := newDropReused(t)
			base := &http.Transport{}
			defer base.CloseIdleConnections()
			rec := &recorder{}
			lim, _ := limit.NewBulkhead(1)
			p := c.policy
			p.Schedule, p.Hooks, p.Limiter = backoff.Constant(0), rec.hooks(), lim
			ctx, cancel := c.parent()
			defer cancel()
			attempts := &attemptContexts{base: base}
			_, err := get(t, ctx, retryhttp.New(attempts, &p), d.srv.URL)
			if err == nil {
				t.Fatal("the dropped attempt succeeded")
			}
			if ctx.Err() != nil {
				t.Errorf("the caller's context ended (%v): the refusal canceled it, not the attempt's", ctx.Err())
			}
			if n := len(attempts.ended); n != 2 || attempts.ended[1] == nil {
				t.Errorf("attempts' contexts when they returned: %v, want 2, the second canceled by the refusal", attempts.ended)
			}
			if got, _ := d.seen(); !slices.Equal(got, []string{"1", "2"}) {
				t.Fatalf("server received attempts %q, want 1, 2: the refused re-send went out", got)
			}
			if c, _ := retry.Classify(err); c != retry.ClassRetryable {
				t.Errorf("err = %v, want it to carry the retryable drop", err)
			}
			if g := rec.lastGiveUp(t); g.Reason != c.reason || g.Attempt != 2 {
				t.Errorf("gave up %v after %d, want %v after 2", g.Reason, g.Attempt, c.reason)
			}
			if n := lim.InFlight(); n != 0 {
				t.Errorf("%d bulkhead slots held after the call, want 0", n)
			}
		})
	}
}

// warm leaves n idle connections to d in base's pool, each of which has
// served one request (so the server drops the next one on it).
func (d *dropReused) warm(t *testing.T, base *http.Transport, n int) {
	var gate sync.WaitGroup
	gate.Add(n)
	d.mu.Lock()
	d.gate = &gate
	d.mu.Unlock()
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodGet, d.srv.URL, nil)
			resp, err := base.RoundTrip(req)
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
	}
	wg.Wait()
	d.mu.Lock()
	d.gate, d.attempts, d.dropped = nil, nil, 0
	d.mu.Unlock()
}

// TestWireRefusedResendWithIdleConnections: when net/http's re-send is
// refused while an idle connection is in the pool, net/http may pick that
// connection rather than notice the canceled context; nothing is written
// on it either. (Each round runs that race once; it goes the wrong way
// rarely, so a regression shows over many runs, not in every one.) Every
// other round the caller's context can end, so the refusal cancels a
// context of the attempt's own rather than one that cancels itself.
func TestWireRefusedResendWithIdleConnections(t *testing.T) {
	for i := range 50 {
		d := newDropReused(t)
		base := &http.Transport{MaxIdleConnsPerHost: 8}
		d.warm(t, base, 4)
		p := &retry.Policy{MaxAttempts: 2, Schedule: backoff.Constant(0)}
		ctx, cancel := context.Background(), context.CancelFunc(func() {})
		if i%2 == 1 {
			ctx, cancel = context.WithCancel(ctx)
		}
		_, err := get(t, ctx, retryhttp.New(base, p), d.srv.URL)
		cancel()
		if err == nil {
			t.Fatal("the dropped attempts succeeded")
		}
		base.CloseIdleConnections()
		if got, _ := d.seen(); !slices.Equal(got, []string{"1", "2"}) {
			t.Fatalf("server received attempts %q, want 1, 2: the refused re-send went out", got)
		}
	}
}

// TestWireUnderUpstreamOwner: below an upstream owner a request is sent
// once, and net/http's re-send of it is refused too.
func TestWireUnderUpstreamOwner(t *testing.T) {
	d := newDropReused(t)
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	tr := retryhttp.New(base, &retry.Policy{MaxAttempts: 3, Schedule: backoff.Constant(0)})
	// A first call leaves an idle connection the second one reuses.
	resp, err := get(t, context.Background(), tr, d.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	d.mu.Lock()
	d.attempts = nil
	d.mu.Unlock()

	ctx := retryhttp.WithUpstreamAttempt(context.Background(), 4)
	if _, err := get(t, ctx, tr, d.srv.URL); err == nil {
		t.Fatal("the dropped request succeeded")
	}
	if got, _ := d.seen(); !slices.Equal(got, []string{"4"}) {
		t.Fatalf("server received %q, want the one attempt of the upstream owner", got)
	}
}

// TestWireKeepsCallerTrace: a caller's own ClientTrace still sees every
// try, and a try that wrote nothing is not counted.
func TestWireKeepsCallerTrace(t *testing.T) {
	d := newDropReused(t)
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	var gets atomic.Int64
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		GetConn: func(string) { gets.Add(1) },
	})
	resp, err := get(t, ctx, retryhttp.New(base, noWait(3)), d.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got, _ := d.seen(); !slices.Equal(got, []string{"1", "2", "3"}) {
		t.Fatalf("server received %q, want 1, 2, 3", got)
	}
	if n := gets.Load(); n != 3 {
		t.Errorf("the caller's GetConn ran %d times, want 3 (one per try)", n)
	}
}

// retriesLeft is a Budget that allows n retries, then refuses.
type retriesLeft struct {
	mu sync.Mutex
	n  int
}

func (b *retriesLeft) Request(time.Time) bool { return true }
func (b *retriesLeft) Retry(time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.n == 0 {
		return false
	}
	b.n--
	return true
}
func (b *retriesLeft) Result(time.Time, bool) {}

// attemptContexts is a Base that records each attempt's context, whether
// it carried a ClientTrace while the attempt ran, and its Err when base
// returned.
type attemptContexts struct {
	base   http.RoundTripper
	mu     sync.Mutex
	ctxs   []context.Context
	traced int
	ended  []error
}

func (a *attemptContexts) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	a.mu.Lock()
	a.ctxs = append(a.ctxs, ctx)
	if httptrace.ContextClientTrace(ctx) != nil {
		a.traced++
	}
	a.mu.Unlock()
	resp, err := a.base.RoundTrip(req)
	a.mu.Lock()
	a.ended = append(a.ended, ctx.Err())
	a.mu.Unlock()
	return resp, err
}

// TestWireContextAfterTheCall: an attempt's context outlives the call (it
// is resp.Request.Context()), and the call's hooks go back to a pool when
// it ends. A request sent later under such a context — here while another
// call, which may have taken those hooks, is in flight — is a plain
// request: it reaches no call's hooks, so it neither panics nor adds a try
// (and a charged re-send) to the call in flight.
func TestWireContextAfterTheCall(t *testing.T) {
	var flaky atomic.Int64
	entered, release := make(chan struct{}), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/flaky":
			if flaky.Add(1) == 1 {
				http.Error(w, "busy", http.StatusServiceUnavailable)
				return
			}
		case "/hold":
			entered <- struct{}{}
			<-release
		}
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	defer unblock() // before srv.Close, should the test stop early
	base := &http.Transport{}
	defer base.CloseIdleConnections()

	// A call of two attempts (a 503, then a 200), each with its context.
	rec := &attemptContexts{base: base}
	resp, err := get(t, context.Background(), retryhttp.New(rec, noWait(3)), srv.URL+"/flaky")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if len(rec.ctxs) != 2 || rec.traced != 2 {
		t.Fatalf("%d attempts, %d of them traced, want 2 and 2", len(rec.ctxs), rec.traced)
	}
	if resp.Request.Context() != rec.ctxs[1] {
		t.Fatal("resp.Request.Context() is not the last attempt's context")
	}
	for i, ctx := range rec.ctxs {
		if tr := httptrace.ContextClientTrace(ctx); tr != nil {
			t.Errorf("attempt %d's context still carries the call's trace after the call", i+1)
		}
	}

	// Requests under those contexts, once no call holds the hooks, then
	// while a call in flight may hold them.
	plain := &http.Transport{}
	defer plain.CloseIdleConnections()
	sendUnder := func(ctxs []context.Context) {
		t.Helper()
		for i, ctx := range ctxs {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := (&http.Client{Transport: plain}).Do(req)
			if err != nil {
				t.Fatalf("a request under attempt %d's context: %v", i+1, err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	sendUnder(rec.ctxs)
	live := &recorder{}
	liveTr := retryhttp.New(base, &retry.Policy{MaxAttempts: 3, Hooks: live.hooks()})
	liveReq, err := http.NewRequest(http.MethodGet, srv.URL+"/hold", nil)
	if err != nil {
		t.Fatal(err)
	}
	liveErr := make(chan error, 1)
	go func() {
		resp, err := liveTr.RoundTrip(liveReq)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		liveErr <- err
	}()
	<-entered // its request was written: a second try of it would be a re-send
	sendUnder(rec.ctxs)
	unblock()
	if err := <-liveErr; err != nil {
		t.Fatal(err)
	}
	live.mu.Lock()
	defer live.mu.Unlock()
	if live.starts != 1 || len(live.retries) != 0 {
		t.Errorf("the call in flight counted %d attempts and %d retries, want 1 and 0: requests of another context reached its hooks", live.starts, len(live.retries))
	}
}
