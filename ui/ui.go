// Package ui is the operator's dashboard: an http.Handler a service
// mounts at a prefix (or `stagger ui` serves alone). It shows retries from
// the dependency's side — for each named policy, attempts and retries per
// second, amplification (attempts per finished operation), give-ups by
// reason, the budget's level, the breaker's state and what the limiter
// holds, with the last hour kept in bounded memory — and, given a queue
// (NewQueues), broker dead-letter queues (BrokerDeadLetters) or a running
// stagger proxy (Config.Proxy), the work that waits: counts by state per
// queue, a job search, each job's history, and the operator's actions
// (cancel, requeue, pause and resume a queue, a paced redrive of dead
// letters with a dry run). Pages update by server-sent events.
//
//	d, _ := ui.New(ui.Config{Queues: ui.NewQueues(q)})
//	hooks, _ := d.Hooks("payments")
//	policy := &retry.Policy{Hooks: hooks, Budget: tokenBucket}
//	go d.Run(ctx)
//	mux.Handle("/ops/", http.StripPrefix("/ops", d))
//
// Pages are GET; an action is a POST of a page's form, refused without the
// form's CSRF token (an HMAC of a per-browser cookie) or from another
// origin, and refused altogether in read-only mode (Config.ReadOnly).
// Every text is escaped (html/template; live data as JSON written with
// textContent). Assets are embedded: no CDN, no network at run time.
// Config.Authorize (BasicAuth is one) or a wrapping handler authenticates;
// a standalone server should bind 127.0.0.1.
package ui

import (
	"context"
	"crypto/rand"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/staggerhq/stagger/budget"
	"github.com/staggerhq/stagger/limit"
	"github.com/staggerhq/stagger/retry"
)

// Defaults of Config's zero fields, and the bounds of a name.
const (
	DefaultInterval        = time.Second
	DefaultHistory         = 3600 // an hour at DefaultInterval
	DefaultMaxDependencies = 100
	DefaultMaxClients      = 16
	MaxNameLen             = 200
)

// ErrInvalid is wrapped by configuration and registration errors; the
// message names the field or argument and the rule.
var ErrInvalid = errors.New("ui: invalid")

// Config configures a Dashboard; zero fields take the defaults.
type Config struct {
	// Interval is the time between samples (Run); 0 means DefaultInterval.
	Interval time.Duration
	// History is how many samples are kept per dependency; 0 means
	// DefaultHistory. Memory is about 40 bytes per sample.
	History int
	// MaxDependencies bounds the names registered; 0 means
	// DefaultMaxDependencies.
	MaxDependencies int
	// MaxClients bounds the event streams open at once (more get 503);
	// 0 means DefaultMaxClients.
	MaxClients int

	// Queues, when set, adds the queues, jobs and dead-letters pages
	// (NewQueues adapts a queue.Queue).
	Queues Queues
	// DeadLetters are more dead-letter sources, shown after the queue's
	// on the dead-letters page (BrokerDeadLetters adapts a broker's DLQ).
	DeadLetters []DeadLetters
	// Proxy, when set, is the base URL of a running stagger proxy's
	// control API (http://127.0.0.1:8474): the proxy page shows its
	// GET /proxies and each proxy's GET /stats.
	Proxy string
	// ReadOnly refuses every action (403) and shows no action buttons.
	ReadOnly bool
	// Authorize, when set, is asked about every request with action "",
	// and about an action again with its name (cancel, requeue, pause,
	// resume, redrive) once its form is read. An error refuses the
	// request: 401 with a Basic challenge when it wraps ErrUnauthorized
	// (BasicAuth), else 403.
	Authorize func(r *http.Request, action string) error
	// Actor, when set, names who acts on a request, for the job's history
	// (a single sign-on user); "" falls back to the Basic authentication
	// user ("ui:NAME"), else "ui".
	Actor func(r *http.Request) string
}

// Dashboard collects what named policies do and serves the page. It is
// safe for concurrent use; the hooks it returns add to atomics only.
type Dashboard struct {
	cfg     Config
	mu      sync.Mutex // deps, order, the rings and last; never on the retry path
	deps    map[string]*dep
	order   []*dep
	last    []byte // the JSON of the last sample
	subs    map[chan struct{}]struct{}
	clients atomic.Int32
	page    *template.Template

	csrfKey [32]byte
	origins *http.CrossOriginProtection
	ctx     context.Context // redrives run in it; Run's, else Background
	proxy   *http.Client

	qmu          sync.Mutex // the fields below
	qstate       queueState
	qjson        []byte
	qprev        map[string]int64
	busy         map[string]bool
	redrives     map[string]*RedriveRun
	redriveOrder []string
}

type dep struct {
	name                         string
	attempts, retries, successes atomic.Int64
	giveups                      [256]atomic.Int64 // by retry.Reason
	level                        budget.Leveler
	circuit                      budget.Circuit
	limiter                      limit.Gauge

	prev  [3]int64 // attempts, retries, finished at the last sample
	ring  []Sample
	next  int
	count int
}

// Sample is one dependency at one instant: rates over the interval that
// ended then, and the gauges read then.
type Sample struct {
	T              int64   `json:"t"`              // Unix ms
	AttemptsPerSec float64 `json:"attemptsPerSec"` // attempts started
	RetriesPerSec  float64 `json:"retriesPerSec"`  // failed attempts that will be retried
	// Amplification is attempts per finished operation (successes and
	// give-ups) over the interval; 0 when none finished.
	Amplification float64 `json:"amplification"`
	Level         float64 `json:"level"`    // budget level in [0, 1]; -1 without a budget
	State         string  `json:"state"`    // breaker state; "" without a breaker
	InFlight      int     `json:"inFlight"` // limiter slots in use; -1 without a limiter
	Limit         int     `json:"limit"`    // limiter slots in all; -1 without a limiter
}

// Dependency is what the page shows of one name: the last sample, the
// give-ups by reason since the start, and the history (oldest first).
type Dependency struct {
	Name    string           `json:"name"`
	Now     Sample           `json:"now"`
	GiveUps map[string]int64 `json:"giveUps"`
	History []Sample         `json:"history,omitempty"`
}

//go:embed assets
var assets embed.FS

// New returns a Dashboard configured by c; an error names the field.
func New(c Config) (*Dashboard, error) {
	for _, f := range []struct {
		name string
		v    int64
	}{{"Interval", int64(c.Interval)}, {"History", int64(c.History)}, {"MaxDependencies", int64(c.MaxDependencies)}, {"MaxClients", int64(c.MaxClients)}} {
		if f.v < 0 {
			return nil, fmt.Errorf("%w: Config.%s must be >= 0 (0 means the default), got %d", ErrInvalid, f.name, f.v)
		}
	}
	if c.History > 1<<20 {
		return nil, fmt.Errorf("%w: Config.History must be <= %d, got %d", ErrInvalid, 1<<20, c.History)
	}
	c.Interval = or(c.Interval, DefaultInterval)
	c.History = or(c.History, DefaultHistory)
	c.MaxDependencies = or(c.MaxDependencies, DefaultMaxDependencies)
	c.MaxClients = or(c.MaxClients, DefaultMaxClients)
	if c.Proxy != "" {
		u, err := url.Parse(c.Proxy)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("%w: Config.Proxy must be an http:// or https:// URL of a proxy's control API", ErrInvalid)
		}
		c.Proxy = strings.TrimSuffix(c.Proxy, "/")
	}
	page, err := template.New("").Funcs(funcs).ParseFS(assets, "assets/*.html")
	if err != nil {
		return nil, err
	}
	d := &Dashboard{cfg: c, deps: map[string]*dep{}, subs: map[chan struct{}]struct{}{}, page: page,
		origins: http.NewCrossOriginProtection(), ctx: context.Background(),
		proxy: &http.Client{Timeout: 3 * time.Second},
		busy:  map[string]bool{}, redrives: map[string]*RedriveRun{}}
	rand.Read(d.csrfKey[:])
	return d, nil
}

func or[T int | time.Duration](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// get returns the dependency called name, registering it.
func (d *Dashboard) get(name string) (*dep, error) {
	if name == "" || len(name) > MaxNameLen || !utf8.ValidString(name) {
		return nil, fmt.Errorf("%w: name must be 1..%d bytes of UTF-8, got %d bytes", ErrInvalid, MaxNameLen, len(name))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if x := d.deps[name]; x != nil {
		return x, nil
	}
	if len(d.deps) >= d.cfg.MaxDependencies {
		return nil, fmt.Errorf("%w: at most %d dependencies (Config.MaxDependencies), %q would be one more", ErrInvalid, d.cfg.MaxDependencies, name)
	}
	x := &dep{name: name, ring: make([]Sample, d.cfg.History)}
	d.deps[name] = x
	d.order = append(d.order, x)
	return x, nil
}

// Hooks returns retry hooks that count the loop of the policy called name
// (register them on its retry.Policy, joined with others by Hooks.Join).
// They add to atomics: no lock, no allocation on the retry path.
func (d *Dashboard) Hooks(name string) (retry.Hooks, error) {
	x, err := d.get(name)
	if err != nil {
		return retry.Hooks{}, err
	}
	return retry.Hooks{
		OnAttempt: func(retry.Event) { x.attempts.Add(1) },
		OnRetry:   func(retry.Event) { x.retries.Add(1) },
		OnSuccess: func(retry.Event) { x.successes.Add(1) },
		OnGiveUp:  func(e retry.Event) { x.giveups[e.Reason].Add(1) },
	}, nil
}

// Budget shows b's level beside name's counts.
func (d *Dashboard) Budget(name string, b budget.Leveler) error {
	return d.attach(name, func(x *dep) { x.level = b })
}

// Breaker shows c's state beside name's counts.
func (d *Dashboard) Breaker(name string, c budget.Circuit) error {
	return d.attach(name, func(x *dep) { x.circuit = c })
}

// Limiter shows what l holds beside name's counts.
func (d *Dashboard) Limiter(name string, l limit.Gauge) error {
	return d.attach(name, func(x *dep) { x.limiter = l })
}

func (d *Dashboard) attach(name string, set func(*dep)) error {
	x, err := d.get(name)
	if err != nil {
		return err
	}
	d.mu.Lock()
	set(x)
	d.mu.Unlock()
	return nil
}

// queueSpacing bounds the store's time spent counting the queues: after
// a count that took d, the next starts no sooner than queueSpacing×d
// later, so a store whose counts are slow (a million jobs) spends at most
// about a tenth of its time on a dashboard.
const queueSpacing = 10

// Run samples every Config.Interval until ctx ends: the dependencies
// (Sample) and the queues (SampleQueues, in a goroutine of its own so that
// a slow database does not hold the dependencies back; a count that took
// d waits 10×d before the next, so a slow store is sampled less often).
// Redrives started from the page run in ctx.
func (d *Dashboard) Run(ctx context.Context) {
	d.qmu.Lock()
	d.ctx = ctx
	d.qmu.Unlock()
	t := time.NewTicker(d.cfg.Interval)
	defer t.Stop()
	var queues chan time.Time
	if d.cfg.Queues != nil {
		queues = make(chan time.Time, 1)
		defer close(queues)
		go func() {
			var next time.Time
			for now := range queues {
				if now.Before(next) {
					continue
				}
				start := time.Now()
				qctx, cancel := context.WithTimeout(ctx, opTimeout)
				d.SampleQueues(qctx, now)
				cancel()
				next = now.Add(queueSpacing * time.Since(start))
			}
		}()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			d.Sample(now)
			select {
			case queues <- now:
			default: // the last queue sample is still running
			}
		}
	}
}

// Sample takes one sample of every dependency at now (Run calls it; a
// test or a simulator calls it with its own clock) and wakes the event
// streams. Rates are over Config.Interval.
func (d *Dashboard) Sample(now time.Time) {
	secs := d.cfg.Interval.Seconds()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, x := range d.order {
		a, r := x.attempts.Load(), x.retries.Load()
		fin := x.successes.Load()
		for i := range x.giveups {
			fin += x.giveups[i].Load()
		}
		da, dr, df := a-x.prev[0], r-x.prev[1], fin-x.prev[2]
		x.prev = [3]int64{a, r, fin}
		s := Sample{T: now.UnixMilli(), AttemptsPerSec: float64(da) / secs, RetriesPerSec: float64(dr) / secs,
			Level: -1, InFlight: -1, Limit: -1}
		if df > 0 {
			s.Amplification = float64(da) / float64(df)
		}
		if x.level != nil {
			s.Level = x.level.Level(now)
		}
		if x.circuit != nil {
			s.State = x.circuit.State().String()
		}
		if x.limiter != nil {
			s.InFlight, s.Limit = x.limiter.InFlight(), x.limiter.Limit()
		}
		x.ring[x.next] = s
		x.next = (x.next + 1) % len(x.ring)
		x.count = min(x.count+1, len(x.ring))
	}
	d.last, _ = json.Marshal(d.snapshotLocked(false))
	d.wakeLocked()
}

// wake wakes every event stream.
func (d *Dashboard) wake() {
	d.mu.Lock()
	d.wakeLocked()
	d.mu.Unlock()
}

func (d *Dashboard) wakeLocked() {
	for ch := range d.subs {
		select {
		case ch <- struct{}{}:
		default: // a slow client gets the newest sample when it reads
		}
	}
}

// Dependencies returns every dependency as of the last sample, in the
// order they were registered; with history, each one's samples too.
func (d *Dashboard) Dependencies(history bool) []Dependency {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.snapshotLocked(history)
}

func (d *Dashboard) snapshotLocked(history bool) []Dependency {
	out := make([]Dependency, 0, len(d.order))
	for _, x := range d.order {
		out = append(out, d.depLocked(x, history))
	}
	return out
}

// writeDependencies writes Dependencies(true) as a JSON array, one
// dependency at a time, so a request holds one history, not all of them.
func (d *Dashboard) writeDependencies(w io.Writer) error {
	d.mu.Lock()
	deps := append([]*dep(nil), d.order...)
	d.mu.Unlock()
	enc := json.NewEncoder(w)
	if _, err := io.WriteString(w, "["); err != nil {
		return err
	}
	for i, x := range deps {
		if i > 0 {
			io.WriteString(w, ",")
		}
		d.mu.Lock()
		dp := d.depLocked(x, true)
		d.mu.Unlock()
		if err := enc.Encode(dp); err != nil {
			return err
		}
	}
	_, err := io.WriteString(w, "]\n")
	return err
}

func (d *Dashboard) depLocked(x *dep, history bool) Dependency {
	dp := Dependency{Name: x.name, GiveUps: map[string]int64{}}
	if x.count > 0 {
		dp.Now = x.ring[(x.next-1+len(x.ring))%len(x.ring)]
	}
	for r := range x.giveups {
		if n := x.giveups[r].Load(); n > 0 {
			dp.GiveUps[retry.Reason(r).String()] = n
		}
	}
	if history {
		dp.History = make([]Sample, 0, x.count)
		for i := range x.count {
			dp.History = append(dp.History, x.ring[(x.next-x.count+i+len(x.ring))%len(x.ring)])
		}
	}
	return dp
}

// ServeHTTP serves the pages, their assets, the data as JSON and the
// event streams (see docs/ui.md for the list). Mount it with
// http.StripPrefix and a trailing slash. GET and HEAD read; POST act runs
// an action, refused in read-only mode and without this dashboard's CSRF
// token; every other method is refused (405).
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	p := strings.TrimPrefix(r.URL.Path, "/")
	if r.Method == http.MethodPost && p == "act" {
		if err := d.authorize(r, ""); err != nil {
			d.denied(w, r, err)
			return
		}
		d.act(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		allow := "GET, HEAD"
		if p == "act" {
			allow = "POST"
		}
		h.Set("Allow", allow)
		http.Error(w, "method not allowed: pages answer GET and HEAD; actions are POST act", http.StatusMethodNotAllowed)
		return
	}
	if err := d.authorize(r, ""); err != nil {
		d.denied(w, r, err)
		return
	}
	if page, ok := d.pages()[p]; ok {
		if page == nil {
			http.NotFound(w, r) // not configured
			return
		}
		page(w, r)
		return
	}
	switch p {
	case "", "index.html":
		pg := d.newPage(w, r, "index", "dependencies")
		pg.Scripts = []string{"app.js"}
		d.render(w, http.StatusOK, "index", pg)
	case "app.js", "live.js", "style.css":
		ctype := "text/css; charset=utf-8"
		if strings.HasSuffix(p, ".js") {
			ctype = "text/javascript; charset=utf-8"
		}
		b, _ := assets.ReadFile("assets/" + p)
		h.Set("Content-Type", ctype)
		w.Write(b)
	case "api/dependencies":
		h.Set("Content-Type", "application/json")
		d.writeDependencies(w)
	case "events":
		d.events(w, r, func() []byte {
			d.mu.Lock()
			defer d.mu.Unlock()
			if d.last == nil {
				d.last, _ = json.Marshal(d.snapshotLocked(false))
			}
			return d.last
		})
	case "api/queues", "events/queues":
		get := func() []byte {
			d.qmu.Lock()
			defer d.qmu.Unlock()
			if d.qjson == nil {
				d.qjson, _ = json.Marshal(queueState{Queues: []QueueInfo{}, Redrives: []RedriveRun{}})
			}
			return d.qjson
		}
		if p == "api/queues" {
			h.Set("Content-Type", "application/json")
			w.Write(get())
			return
		}
		d.events(w, r, get)
	default:
		http.NotFound(w, r)
	}
}

// pages are the operator's pages by path; nil for those not configured.
func (d *Dashboard) pages() map[string]http.HandlerFunc {
	on := func(ok bool, h http.HandlerFunc) http.HandlerFunc {
		if ok {
			return h
		}
		return nil
	}
	q, p := d.cfg.Queues != nil, d.cfg.Proxy != ""
	return map[string]http.HandlerFunc{
		"queues": on(q, d.queuesPage), "jobs": on(q, d.jobsPage), "job": on(q, d.jobPage),
		"dead":  on(q || len(d.cfg.DeadLetters) > 0, d.deadPage),
		"proxy": on(p, d.proxyPage), "api/proxy": on(p, d.proxyJSON),
	}
}

// events streams data(), then data() again after each sample, until the
// client goes or the request's context ends. Bytes equal to the last sent
// are not sent again.
func (d *Dashboard) events(w http.ResponseWriter, r *http.Request, data func() []byte) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	if d.clients.Add(1) > int32(d.cfg.MaxClients) {
		d.clients.Add(-1)
		http.Error(w, "too many event streams", http.StatusServiceUnavailable)
		return
	}
	defer d.clients.Add(-1)
	ch := make(chan struct{}, 1)
	d.mu.Lock()
	d.subs[ch] = struct{}{}
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		delete(d.subs, ch)
		d.mu.Unlock()
	}()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	var sent []byte
	for {
		b := data()
		if sent == nil || string(b) != string(sent) {
			// JSON has no raw newline, so one data line carries it.
			if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
				return
			}
			fl.Flush()
			sent = b
		}
		select {
		case <-r.Context().Done():
			return
		case <-ch:
		}
	}
}
