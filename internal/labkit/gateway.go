package labkit

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/staggerhq/stagger/retryhttp"
)

// Headers by which a sender identifies its attempts, and by which the
// gateway says what it did. The request ID names the logical request (one
// per caller in a lab run); the attempt header counts from 1.
const (
	HeaderRequestID = retryhttp.RequestIDHeader // sent: the logical request's ID (the caller number in a run)
	HeaderAttempt   = retryhttp.AttemptHeader   // sent: the attempt number, from 1
	HeaderOutcome   = "Stagger-Outcome"         // answered: the Outcome's String, e.g. "down"
	// headerWarmup carries the per-run key of a warm-up request.
	headerWarmup = "Stagger-Warmup"
)

// outcomeHeader holds the Stagger-Outcome values, allocated once.
var outcomeHeader = [...][]string{Accepted: {"accepted"}, Down: {"down"}, Busy: {"busy"}, Failed: {"failed"}}

// maxHeaderBytes bounds the request headers the gateway reads.
const maxHeaderBytes = 16 << 10

// Gateway is the lab's receiving side: an HTTP server that plays a [Faults]
// timeline and counts every attempt that reaches it in a [Recorder].
//
// Every request is an attempt. The gateway decides its outcome when it
// arrives — Busy if Capacity attempts are already in flight, Down if the
// timeline has the gateway down, Accepted otherwise — records it (arrival
// time, the Stagger-Request-Id and Stagger-Attempt headers, the outcome), then
// answers after the timeline's latency: 200 for Accepted, 503 otherwise, with
// a Stagger-Outcome header naming the outcome. An attempt whose sender hangs
// up while it waits out the latency is still counted as it was decided.
//
// A Gateway is an http.Handler, so it can also be mounted in another server
// or served over an in-memory listener (for tests in a testing/synctest
// bubble); [Gateway.Listen] serves it on 127.0.0.1 with a random port.
type Gateway struct {
	clock    atomic.Pointer[gatewayClock]
	inFlight atomic.Int64
	// warmup, when set, is the key of warm-up requests: they are answered
	// at once with 204 and not counted (see Scenario.Run).
	warmup string

	mu   sync.Mutex
	srv  *http.Server
	url  string
	done chan struct{}
}

// NewGateway returns a gateway whose timeline starts at start.
func NewGateway(f Faults, start time.Time) (*Gateway, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	g := &Gateway{}
	g.restart(start, f)
	return g, nil
}

// gatewayClock is the timeline, its origin and the recorder counting from
// it.
type gatewayClock struct {
	start  time.Time
	faults Faults
	rec    *Recorder
}

// restart starts timeline f at start with a fresh recorder.
func (g *Gateway) restart(start time.Time, f Faults) {
	g.clock.Store(&gatewayClock{start: start, faults: f, rec: NewRecorder(start)})
}

// Recorder returns the recorder that counts the gateway's attempts.
func (g *Gateway) Recorder() *Recorder { return g.clock.Load().rec }

// Faults returns the gateway's timeline.
func (g *Gateway) Faults() Faults { return g.clock.Load().faults }

// ServeHTTP counts one attempt and answers it as the timeline says.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	if g.warmup != "" {
		if v := r.Header[headerWarmup]; len(v) > 0 && v[0] == g.warmup {
			g.warm(w, r)
			return
		}
	}
	clk := g.clock.Load()
	others := g.inFlight.Add(1) - 1
	o, lat := clk.faults.Decide(now.Sub(clk.start), int(others))
	if o == Busy {
		g.inFlight.Add(-1)
	} else {
		defer g.inFlight.Add(-1)
	}
	id, attempt := Identify(r.Header)
	clk.rec.Record(now, id, attempt, o)

	if !sleep(r.Context(), lat) {
		return // the sender hung up
	}
	h := w.Header()
	h[HeaderOutcome] = outcomeHeader[o] // shared, never modified
	h["Date"] = nil                     // nothing reads it; formatting it is a tenth of the handler
	if o == Accepted {
		w.WriteHeader(http.StatusOK)
		return
	}
	if ra := clk.faults.RetryAfter; ra > 0 {
		secs := int64(ra / time.Second) // rounded up, without overflowing near the largest Duration
		if ra%time.Second != 0 {
			secs++
		}
		h["Retry-After"] = []string{strconv.FormatInt(secs, 10)}
	}
	w.WriteHeader(http.StatusServiceUnavailable)
}

// warmupLatency is how long the gateway waits before answering a warm-up
// request (and how long the warm-up loop waits between them): timers like
// the ones of a retry cycle, so that warm-ups measure their lateness too.
const warmupLatency = 20 * time.Millisecond

// warm refuses an uncounted warm-up request after warmupLatency, so that
// the warm-up loop retries like a caller.
func (g *Gateway) warm(w http.ResponseWriter, r *http.Request) {
	if sleep(r.Context(), warmupLatency) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
}

// sleep waits d (nothing for d <= 0) and reports whether it did; false when
// ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Listen serves the gateway on 127.0.0.1 with a random port and returns its
// base URL.
func (g *Gateway) Listen() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	return g.Serve(l), nil
}

// Serve serves the gateway on l in a new goroutine and returns its base
// URL. Close stops it. Serve may be called once.
func (g *Gateway) Serve(l net.Listener) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.srv != nil {
		panic("lab: Gateway.Serve called twice")
	}
	g.srv = &http.Server{
		Handler:           g,
		MaxHeaderBytes:    maxHeaderBytes,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       time.Minute,
	}
	g.url = "http://" + l.Addr().String()
	g.done = make(chan struct{})
	srv, done := g.srv, g.done
	go func() {
		defer close(done)
		_ = srv.Serve(l) // http.ErrServerClosed after Close; nothing else to report
	}()
	return g.url
}

// URL returns the base URL given out by Serve or Listen ("" before).
func (g *Gateway) URL() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.url
}

// Close stops the server started by Serve or Listen, waiting (until ctx is
// done) for the attempts it is answering, so that the recorder holds every
// attempt that reached the gateway when Close returns nil.
func (g *Gateway) Close(ctx context.Context) error {
	g.mu.Lock()
	srv, done := g.srv, g.done
	g.mu.Unlock()
	if srv == nil {
		return nil
	}
	err := srv.Shutdown(ctx)
	if err == nil {
		select {
		case <-done:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}
