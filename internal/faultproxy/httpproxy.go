package faultproxy

import (
	"bytes"
	"context"
	"errors"
	"hash/maphash"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/staggerhq/stagger/internal/labkit"
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
// forwards. The fields without a JSON name are for a proxy started in
// process (`stagger proxy`, package proxytest); zero values are defaults.
type Config struct {
	Name     string `json:"name"`
	Listen   string `json:"listen"`   // host:port; port 0 picks a free one
	Upstream string `json:"upstream"` // http(s)://host:port for HTTP, host:port (or tcp://host:port) for TCP
	Kind     string `json:"kind"`     // "http" (default) or "tcp"
	// Window is the width the peak and the timeline are counted in
	// (labkit.DefaultWindow when 0).
	Window time.Duration `json:"-"`
	// GroupBy is the request header that makes attempts one logical
	// request (labkit.HeaderRequestID when ""); Group, when set, wins.
	GroupBy string    `json:"-"`
	Group   *Grouping `json:"-"`

	// HTTP only. Horizon is how far back the timeline reaches
	// (labkit.DefaultHorizon, at most labkit.MaxWindows windows);
	// MaxRequests the request keys tracked at once
	// (labkit.DefaultMaxRequests); MaxBody the largest request body
	// forwarded (DefaultMaxBody; larger: 413).
	Horizon     time.Duration `json:"-"`
	MaxRequests int           `json:"-"`
	MaxBody     int64         `json:"-"`
	// Schedule is the fault schedule at the start: clauses of
	// labkit.FaultGrammar, named by their first word.
	Schedule []string `json:"-"`
	// StatsPath, when set, is a path the proxy answers itself with its
	// Stats, never counted (`stagger proxy`: /_stagger/stats).
	StatsPath string `json:"-"`
	// NoRequestCounts leaves out the per-request counts of
	// GET /stats/requests/{id} (a lock per attempt).
	NoRequestCounts bool `json:"-"`
	// Start is the proxy's start, the origin of the schedule's times
	// (time.Now when zero).
	Start time.Time `json:"-"`
	// MaxConns bounds the connections open at once (DefaultMaxConns);
	// ReadHeaderTimeout, ReadTimeout and IdleTimeout are the server's
	// limits on clients (10s, 1m, 1m).
	MaxConns                                    int           `json:"-"`
	ReadHeaderTimeout, ReadTimeout, IdleTimeout time.Duration `json:"-"`
}

// Defaults of an HTTP proxy.
const (
	// DefaultMaxBody bounds a forwarded request body.
	DefaultMaxBody = 10 << 20
	// MaxHeaderBytes bounds the request headers an HTTP proxy reads.
	MaxHeaderBytes = 64 << 10
)

// HTTPProxy is an HTTP reverse proxy that injects faults and counts every
// attempt that arrives: the fault schedule (timeline clauses), then the
// run-time faults, then the upstream. `stagger proxy` and package
// proxytest both run it.
type HTTPProxy struct {
	name, upstream string
	faults         *Set
	sched          *Schedule
	next           http.Handler // the reverse proxy; tests may serve in process
	window         time.Duration
	horizon        time.Duration
	maxReqs        int
	maxBody        int64
	group          Grouping
	statsPath      string
	start          time.Time
	rec            atomic.Pointer[labkit.WindowedRecorder]
	// byAttempt counts arrivals per Stagger-Attempt value (index 0: none
	// or unreadable; the last entry: TrackedAttempts and above).
	byAttempt [retryhttp.TrackedAttempts + 1]atomic.Int64
	inflight  atomic.Int64
	// oversized counts requests refused with 413 (MaxBody); they are not
	// attempts in the recorder.
	oversized atomic.Int64
	// ids counts the attempts of each logical request (nil with
	// NoRequestCounts); replaced by a reset.
	ids atomic.Pointer[IDCounts]
	// tl writes the timeline file (StartRecord); nil without one.
	tl        *timelineRecorder
	ln        net.Listener
	srv       *http.Server
	closeOnce sync.Once
	now       func() time.Time
}

// MaxTrackedIDs bounds the request IDs whose attempts an IDCounts keeps
// one by one; attempts of further IDs are in the totals only.
const MaxTrackedIDs = 1 << 14

// IDCounts is the attempts of each logical request, at most MaxTrackedIDs
// of them, for GET /stats/requests/{id}. The zero value is not usable:
// call NewIDCounts. It is safe for concurrent use: its IDs are spread over
// idShards locks, so concurrent attempts seldom wait for each other.
type IDCounts struct {
	hashKey maphash.Seed
	tracked atomic.Int64 // IDs kept, over every shard
	shards  [idShards]idShard
}

const idShards = 16

type idShard struct {
	mu sync.Mutex
	n  map[string]int
	_  [40]byte // a cache line each
}

// NewIDCounts returns an empty IDCounts.
func NewIDCounts() *IDCounts {
	c := &IDCounts{hashKey: maphash.MakeSeed()}
	for i := range c.shards {
		c.shards[i].n = map[string]int{}
	}
	return c
}

func (c *IDCounts) shard(id string) *idShard {
	return &c.shards[maphash.String(c.hashKey, id)%idShards]
}

// Add counts an attempt of id.
func (c *IDCounts) Add(id string) {
	sh := c.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, ok := sh.n[id]; ok {
		sh.n[id]++
	} else if c.tracked.Add(1) <= MaxTrackedIDs {
		sh.n[id] = 1
	} else {
		c.tracked.Add(-1)
	}
}

// Get returns the attempts of id, false when it was not tracked.
func (c *IDCounts) Get(id string) (int, bool) {
	sh := c.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	n, ok := sh.n[id]
	return n, ok
}

// RequestCounter is a proxy that keeps the attempts of each logical
// request (GET /stats/requests/{id}).
type RequestCounter interface {
	// Attempts returns the attempts that carried id, and false when the
	// proxy did not track it (never seen, or past MaxTrackedIDs).
	Attempts(id string) (int, bool)
}

// Scheduler is a proxy with a fault schedule changed at run time
// (GET/POST /schedule, GET/PUT/DELETE /schedule/{name}).
type Scheduler interface {
	Schedule() *Schedule
}

// Attempts returns the attempts of the logical request id.
func (p *HTTPProxy) Attempts(id string) (int, bool) {
	if c := p.ids.Load(); c != nil {
		return c.Get(id)
	}
	return 0, false
}

// StartHTTP listens on cfg.Listen and forwards to cfg.Upstream.
func StartHTTP(cfg Config) (*HTTPProxy, error) {
	p, err := NewHTTP(cfg)
	if err != nil {
		return nil, err
	}
	ln, err := listen(cfg.Listen)
	if err != nil {
		return nil, err
	}
	p.Serve(ln, cfg)
	return p, nil
}

// Serve serves p on ln with the limits of cfg (MaxConns and the timeouts)
// until Close or Shutdown; the channel gets the error that stops it
// otherwise.
func (p *HTTPProxy) Serve(ln net.Listener, cfg Config) <-chan error {
	or := func(d, def time.Duration) time.Duration {
		if d > 0 {
			return d
		}
		return def
	}
	rt := or(cfg.ReadTimeout, time.Minute)
	maxConns := cfg.MaxConns
	if maxConns <= 0 {
		maxConns = DefaultMaxConns
	}
	p.ln = ln
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: min(or(cfg.ReadHeaderTimeout, 10*time.Second), rt), ReadTimeout: rt,
		IdleTimeout: or(cfg.IdleTimeout, time.Minute), MaxHeaderBytes: MaxHeaderBytes,
		// No WriteTimeout: a response may take as long as the upstream
		// and the latency faults make it.
		ErrorLog: log.New(io.Discard, "", 0)} // a client that went away is counted, not logged
	srv, errc := p.srv, make(chan error, 1)
	go func() {
		if err := srv.Serve(NewLimitListener(ln, maxConns)); err != http.ErrServerClosed {
			errc <- err
		}
	}()
	return errc
}

// NewHTTP returns an HTTP proxy for cfg that is not listening (serve it
// yourself, or with Serve; Addr is "" until then).
func NewHTTP(cfg Config) (*HTTPProxy, error) {
	u, err := url.Parse(cfg.Upstream)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return nil, errorf("upstream: want an http or https URL with a host and no user, such as http://127.0.0.1:9000")
	}
	window := cfg.Window
	if window <= 0 {
		window = labkit.DefaultWindow
	}
	horizon := cfg.Horizon
	if horizon <= 0 {
		horizon = min(labkit.DefaultHorizon, window*labkit.MaxWindows)
	}
	group := Grouping{Header: labkit.HeaderRequestID}
	switch {
	case cfg.Group != nil:
		group = *cfg.Group
	case cfg.GroupBy != "":
		group.Header = http.CanonicalHeaderKey(cfg.GroupBy)
	}
	start := cfg.Start
	if start.IsZero() {
		start = time.Now()
	}
	p := &HTTPProxy{name: cfg.Name, upstream: u.Redacted(), faults: NewSet(false, nil), sched: newSchedule(), window: window, horizon: horizon,
		maxReqs: cfg.MaxRequests, maxBody: cfg.MaxBody, group: group, statsPath: cfg.StatsPath, start: start, now: time.Now}
	if p.maxReqs <= 0 {
		p.maxReqs = labkit.DefaultMaxRequests
	}
	if p.maxBody <= 0 {
		p.maxBody = DefaultMaxBody
	}
	rec, err := p.newRecorder(start)
	if err != nil {
		return nil, errorf("%v", err)
	}
	p.rec.Store(rec)
	for _, c := range cfg.Schedule {
		if _, err := p.sched.Add("", c); err != nil {
			return nil, err
		}
	}
	if !cfg.NoRequestCounts {
		p.ids.Store(NewIDCounts())
	}
	p.next = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.SetXForwarded() },
		// The proxy never retries: it counts what its clients do.
		Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second,
			DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if sw, ok := w.(*labkit.StatusWriter); ok {
				sw.UpstreamErr = true
			}
			noteUpstreamErr(r, err)
			http.Error(w, "stagger proxy: upstream: "+err.Error(), http.StatusBadGateway)
		},
	}
	return p, nil
}

func (p *HTTPProxy) newRecorder(start time.Time) (*labkit.WindowedRecorder, error) {
	return labkit.NewWindowedRecorder(start, labkit.WindowedConfig{Window: p.window, Horizon: p.horizon, MaxRequests: p.maxReqs})
}

func newRecorder(start time.Time, window time.Duration) *labkit.WindowedRecorder {
	rec, err := labkit.NewWindowedRecorder(start, labkit.WindowedConfig{Window: window, Horizon: min(labkit.DefaultHorizon, window*labkit.MaxWindows)})
	if err != nil {
		panic("faultproxy: " + err.Error())
	}
	return rec
}

// ServeHTTP counts the attempt, applies the schedule and the run-time
// faults, and forwards it.
func (p *HTTPProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.statsPath != "" && r.URL.Path == p.statsPath {
		p.serveStats(w, r)
		return
	}
	if fits, abandoned := p.bodyFits(w, r); !fits {
		if abandoned && p.tl != nil {
			// The client stopped sending its body: an attempt that was
			// abandoned, not an answer (an oversized body is no attempt).
			_, _, a := p.tl.arrive(w, r, p.now)
			a.abandon()
			a.done()
		}
		return
	}
	if p.tl != nil { // StartRecord: every attempt the proxy counts
		var a *recAttempt
		w, r, a = p.tl.arrive(w, r, p.now)
		defer a.done()
	}
	arrived := p.now()
	rec := p.rec.Load() // one recorder for the attempt, whatever a reset does meanwhile
	pend := rec.Arrive(arrived)
	id, attempt := p.identify(r)
	p.byAttempt[min(attempt, retryhttp.TrackedAttempts)].Add(1)
	if c := p.ids.Load(); c != nil && id != "" {
		c.Add(id)
	}
	sc := p.sched.load() // one schedule for the attempt, whatever a change does meanwhile
	t := arrived.Sub(p.start)
	if sc.IsDropped(t) {
		rec.Finish(pend, id, attempt, labkit.Dropped)
		panic(http.ErrAbortHandler) // the server closes the connection: no answer at all
	}
	// The lab gateway's decision, on the lab's timeline.
	o, lat := sc.Decide(t, int(p.inflight.Add(1)-1))
	if o == labkit.Busy {
		p.inflight.Add(-1)
		p.refuse(w, sc, labkit.Busy)
		rec.Finish(pend, id, attempt, labkit.Busy)
		return
	}
	defer p.inflight.Add(-1)
	if lat > 0 {
		timer := time.NewTimer(lat)
		select {
		case <-timer.C:
		case <-r.Context().Done():
			timer.Stop()
			rec.Finish(pend, id, attempt, labkit.Abandoned) // the client gave up first
			return
		}
	}
	if o == labkit.Down {
		p.refuse(w, sc, labkit.Down)
		rec.Finish(pend, id, attempt, labkit.Down)
		return
	}
	// The run-time faults, then forwarding: Plan.Serve calls
	// labkit.ServeAttempt, which wraps w in the StatusWriter ErrorHandler
	// marks.
	p.faults.PlanHTTP(r).Serve(w, r, p.next, p.now, func(o labkit.Outcome) { rec.Finish(pend, id, attempt, o) })
}

// bodyFits refuses a request whose body is over MaxBody before any of it
// reaches the upstream, and before it counts as an attempt: 413, counted
// as too_large (the proxy refused it; the upstream did not fail). A
// declared length is checked at once; a body of unknown length (chunked)
// is read into memory up to the limit and forwarded from there, so the
// memory it holds is bounded by MaxBody per connection. A body the client
// stops sending (the read timeout) counts as an abandoned attempt
// (abandoned is then true).
func (p *HTTPProxy) bodyFits(w http.ResponseWriter, r *http.Request) (fits, abandoned bool) {
	max := p.maxBody
	if r.ContentLength > max {
		p.tooLarge(w)
		return false, false
	}
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength >= 0 {
		return true, false // the server reads no more than the declared length, checked above
	}
	buf, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			p.tooLarge(w)
			return false, false
		}
		id, attempt := p.identify(r)
		p.rec.Load().Record(p.now(), id, attempt, labkit.Abandoned)
		return false, true
	}
	r.Body, r.ContentLength, r.TransferEncoding = io.NopCloser(bytes.NewReader(buf)), int64(len(buf)), nil
	return true, false
}

// tooLarge answers 413 for a body over MaxBody.
func (p *HTTPProxy) tooLarge(w http.ResponseWriter) {
	p.oversized.Add(1)
	http.Error(w, "stagger proxy: request body over --max-body "+strconv.FormatInt(p.maxBody, 10)+" bytes", http.StatusRequestEntityTooLarge)
}

// identify returns the logical request r belongs to and its attempt
// number (0: none or unreadable, by the rule for values from the wire).
func (p *HTTPProxy) identify(r *http.Request) (id string, attempt int) {
	if v := r.Header[retryhttp.AttemptHeader]; len(v) == 1 {
		attempt, _ = retryhttp.ParseAttempt(v[0])
	}
	return p.group.Key(r), attempt
}

// refuse answers 503 for a scheduled fault (down) or the cap (busy).
func (p *HTTPProxy) refuse(w http.ResponseWriter, sc *schedule, o labkit.Outcome) {
	h := w.Header()
	if v := sc.retryAfterValue(); v != "" {
		h.Set("Retry-After", v)
	}
	h.Set(labkit.HeaderOutcome, o.String())
	h.Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusServiceUnavailable)
	io.WriteString(w, "stagger proxy: "+o.String()+"\n")
}

func (p *HTTPProxy) serveStats(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	writeJSON(w, http.StatusOK, p.Stats(r.URL.Query().Get("timeline") == "1"))
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

// Schedule returns its fault schedule.
func (p *HTTPProxy) Schedule() *Schedule { return p.sched }

// StartTime returns the proxy's start, the origin of the schedule's times.
func (p *HTTPProxy) StartTime() time.Time { return p.start }

// SetClock replaces the clock (time.Now) the proxy reads; for tests, before
// any attempt.
func (p *HTTPProxy) SetClock(now func() time.Time) { p.now = now }

// InFlight returns the attempts being served.
func (p *HTTPProxy) InFlight() int64 { return p.inflight.Load() }

// Recorder returns the recorder counting the attempts (replaced by
// ResetStats).
func (p *HTTPProxy) Recorder() *labkit.WindowedRecorder { return p.rec.Load() }

// Grouping returns how attempts are grouped into logical requests.
func (p *HTTPProxy) Grouping() Grouping { return p.group }

// Stats returns what it counted: the recorder's counts, the attempt
// numbers, the faults and the schedule. by_attempt is null when no attempt
// carried a Stagger-Attempt.
func (p *HTTPProxy) Stats(timeline bool) Stats {
	rs := p.rec.Load().Stats(timeline)
	s := BaseStats(p, p.now().Sub(p.start), p.inflight.Load(), rs)
	s.Faults = append(p.sched.Clauses(), s.Faults...)
	s.Evicted, s.HorizonMS, s.Folded, s.GroupBy = rs.Evicted, p.horizon.Milliseconds(), rs.Folded, p.group.String()
	s.Unnumbered, s.TooLarge = p.byAttempt[0].Load(), p.oversized.Load()
	for i := range p.byAttempt {
		if n := p.byAttempt[i].Load(); n > 0 {
			s.ByAttempt[AttemptKey(i)] = n
		}
	}
	if rs.Total > 0 && s.Unnumbered >= int64(rs.Total) {
		s.ByAttempt = nil
	}
	return s
}

// ResetStats starts the counts afresh: the recorder, the attempt numbers,
// the 413s and the faults' counts; attempts in flight are counted where
// they started. The schedule keeps its clock.
func (p *HTTPProxy) ResetStats() {
	rec, err := p.newRecorder(p.now())
	if err != nil {
		panic("faultproxy: " + err.Error()) // the same config as at the start
	}
	p.rec.Store(rec)
	for i := range p.byAttempt {
		p.byAttempt[i].Store(0)
	}
	p.oversized.Store(0)
	if p.ids.Load() != nil {
		p.ids.Store(NewIDCounts())
	}
	p.faults.ResetCounts()
}

// StartRecord writes what the upstream did per window to a timeline file
// at path (`stagger proxy --record`), with the proxy's start as its
// origin; StopRecord puts the file in place. Call it before serving.
func (p *HTTPProxy) StartRecord(path string) error {
	rc, err := newTimelineRecorder(path, p.window, p.start)
	if err != nil {
		return err
	}
	p.tl = rc
	return nil
}

// StopRecord writes the rest of the timeline file and renames it into
// place; attempts that end later are not counted. Without StartRecord it
// does nothing.
func (p *HTTPProxy) StopRecord() error {
	if p.tl == nil {
		return nil
	}
	return p.tl.close()
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

// Shutdown stops listening and waits, until ctx ends, for the attempts in
// flight to be answered.
func (p *HTTPProxy) Shutdown(ctx context.Context) error {
	if p.srv == nil {
		return nil
	}
	return p.srv.Shutdown(ctx)
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
