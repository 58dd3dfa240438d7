package faultproxy

import (
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/staggerhq/stagger/internal/labkit"
	"github.com/staggerhq/stagger/internal/wire"
	"github.com/staggerhq/stagger/retryhttp"
)

// Proxy is one named proxy the control API steers.
type Proxy interface {
	Name() string
	Kind() string // "http" or "tcp"
	Addr() string // the address it listens on
	Upstream() string
	Faults() *Set
	Stats(timeline bool) Stats
	ResetStats()
	Close() error
}

// Config is a proxy to start: a name, where it listens and where it
// forwards.
type Config struct {
	Name     string `json:"name"`
	Listen   string `json:"listen"`   // host:port; port 0 picks a free one
	Upstream string `json:"upstream"` // http(s)://host:port for HTTP, host:port (or tcp://host:port) for TCP
	Kind     string `json:"kind"`     // "http" (default) or "tcp"
	// Window is the width the peak and the timeline are counted in
	// (labkit.DefaultWindow when 0).
	Window time.Duration `json:"-"`
	// GroupBy is the request header that makes attempts one logical
	// request (labkit.HeaderRequestID when "").
	GroupBy string `json:"-"`
}

// HTTPProxy is an HTTP reverse proxy with run-time faults that counts every
// attempt: what `stagger proxy` does, without its report and timeline file.
type HTTPProxy struct {
	name, upstream string
	faults         *Set
	next           http.Handler // the reverse proxy; tests may serve in process
	window         time.Duration
	group          string
	start          time.Time
	rec            atomic.Pointer[labkit.WindowedRecorder]
	byAttempt      [retryhttp.TrackedAttempts + 1]atomic.Int64
	inflight       atomic.Int64
	ln             net.Listener
	srv            *http.Server
	closeOnce      sync.Once
	now            func() time.Time
	ids            atomic.Pointer[IDCounts]
}

// MaxTrackedIDs bounds the request IDs whose attempts an IDCounts keeps
// one by one; attempts of further IDs are in the totals only.
const MaxTrackedIDs = 1 << 14

// IDCounts is the attempts of each logical request, at most MaxTrackedIDs
// of them, for GET /stats/requests/{id}. The zero value is not usable:
// call NewIDCounts. It is safe for concurrent use.
type IDCounts struct {
	mu sync.Mutex
	n  map[string]int
}

// NewIDCounts returns an empty IDCounts.
func NewIDCounts() *IDCounts { return &IDCounts{n: map[string]int{}} }

// Add counts an attempt of id.
func (c *IDCounts) Add(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.n[id]; ok || len(c.n) < MaxTrackedIDs {
		c.n[id]++
	}
}

// Get returns the attempts of id, false when it was not tracked.
func (c *IDCounts) Get(id string) (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.n[id]
	return n, ok
}

// RequestCounter is a proxy that keeps the attempts of each logical
// request (GET /stats/requests/{id}).
type RequestCounter interface {
	// Attempts returns the attempts that carried id, and false when the
	// proxy did not track it (never seen, or past MaxTrackedIDs).
	Attempts(id string) (int, bool)
}

// Attempts returns the attempts of the logical request id.
func (p *HTTPProxy) Attempts(id string) (int, bool) { return p.ids.Load().Get(id) }

// StartHTTP listens on cfg.Listen and forwards to cfg.Upstream.
func StartHTTP(cfg Config) (*HTTPProxy, error) {
	u, err := url.Parse(cfg.Upstream)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return nil, errorf("upstream: want an http or https URL with a host and no user, such as http://127.0.0.1:9000")
	}
	ln, err := listen(cfg.Listen)
	if err != nil {
		return nil, err
	}
	p := NewHTTP(cfg.Name, u, cfg.Window, cfg.GroupBy)
	p.ln = ln
	// The limits of `stagger proxy`'s defaults: headers, a whole request,
	// an idle connection, and the connections open at once.
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, IdleTimeout: time.Minute,
		MaxHeaderBytes: 64 << 10, ErrorLog: log.New(io.Discard, "", 0)}
	go p.srv.Serve(NewLimitListener(ln, DefaultMaxConns))
	return p, nil
}

// NewHTTP returns the handler of an HTTP proxy to u that is not listening
// (serve it yourself; Addr is then "").
func NewHTTP(name string, u *url.URL, window time.Duration, groupBy string) *HTTPProxy {
	if window <= 0 {
		window = labkit.DefaultWindow
	}
	if groupBy == "" {
		groupBy = labkit.HeaderRequestID
	}
	p := &HTTPProxy{name: name, upstream: u.Redacted(), faults: NewSet(false, nil), window: window,
		group: http.CanonicalHeaderKey(groupBy), start: time.Now(), now: time.Now}
	p.rec.Store(newRecorder(p.start, window))
	p.ids.Store(NewIDCounts())
	p.next = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.SetXForwarded() },
		Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second,
			DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if sw, ok := w.(*labkit.StatusWriter); ok {
				sw.UpstreamErr = true
			}
			http.Error(w, "stagger proxy: upstream: "+err.Error(), http.StatusBadGateway)
		},
	}
	return p
}

func newRecorder(start time.Time, window time.Duration) *labkit.WindowedRecorder {
	rec, err := labkit.NewWindowedRecorder(start, labkit.WindowedConfig{Window: window, Horizon: min(labkit.DefaultHorizon, window*labkit.MaxWindows)})
	if err != nil {
		panic("faultproxy: " + err.Error())
	}
	return rec
}

// ServeHTTP counts the attempt, applies the faults and forwards it.
func (p *HTTPProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := p.rec.Load()
	pend := rec.Arrive(p.now())
	id := ""
	if v := r.Header[p.group]; len(v) == 1 && wire.ValidID(v[0]) {
		id = v[0]
		p.ids.Load().Add(id)
	}
	attempt := 0
	if v := r.Header[retryhttp.AttemptHeader]; len(v) == 1 {
		attempt, _ = retryhttp.ParseAttempt(v[0])
	}
	p.byAttempt[min(attempt, retryhttp.TrackedAttempts)].Add(1)
	p.inflight.Add(1)
	defer p.inflight.Add(-1)
	p.faults.PlanHTTP(r).Serve(w, r, p.next, p.now, func(o labkit.Outcome) { rec.Finish(pend, id, attempt, o) })
}

// Name returns the proxy's name.
func (p *HTTPProxy) Name() string { return p.name }

// Kind returns "http".
func (p *HTTPProxy) Kind() string { return "http" }

// Addr returns the address it listens on ("" when not listening).
func (p *HTTPProxy) Addr() string {
	if p.ln == nil {
		return ""
	}
	return p.ln.Addr().String()
}

// Upstream returns the upstream URL, any password hidden.
func (p *HTTPProxy) Upstream() string { return p.upstream }

// Faults returns its run-time faults.
func (p *HTTPProxy) Faults() *Set { return p.faults }

// Stats returns what it counted.
func (p *HTTPProxy) Stats(timeline bool) Stats {
	s := BaseStats(p, p.now().Sub(p.start), p.inflight.Load(), p.rec.Load().Stats(timeline))
	for i := range p.byAttempt {
		if n := p.byAttempt[i].Load(); n > 0 {
			s.ByAttempt[AttemptKey(i)] = n
		}
	}
	return s
}

// ResetStats starts the counts afresh (the faults' too); attempts in
// flight are counted where they started.
func (p *HTTPProxy) ResetStats() {
	p.rec.Store(newRecorder(p.now(), p.window))
	p.ids.Store(NewIDCounts())
	for i := range p.byAttempt {
		p.byAttempt[i].Store(0)
	}
	p.faults.ResetCounts()
}

// Close stops listening and closes its connections.
func (p *HTTPProxy) Close() error {
	var err error
	p.closeOnce.Do(func() {
		if p.srv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if err = p.srv.Shutdown(ctx); err != nil {
				err = p.srv.Close()
			}
		}
	})
	return err
}

// listen listens on addr, 127.0.0.1:0 when "".
func listen(addr string) (net.Listener, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, errorf("listen %q: want host:port, such as 127.0.0.1:0", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, errorf("listen %s: %v", addr, err)
	}
	return ln, nil
}

type urlT = url.URL

var parseURL = url.Parse
