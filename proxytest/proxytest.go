// Package proxytest puts stagger's fault proxy in a Go test: start one in
// process on a free loopback port (or connect to a running `stagger proxy
// --control`), add and remove faults by clause while the test runs (and,
// for HTTP, the fault schedule's outages, drops, latency and cap), and
// check what arrived: the attempts of one logical request, the peak inside
// a window, the amplification. A check that fails says what it saw.
//
// The clauses are those of `stagger proxy --fault` (docs/proxy.md): for
// HTTP "status 503 p=0.3 retry-after=1s", "delay 200ms jitter=50ms",
// "cut 100", "reset", each with method=, path= and header= to match; for
// TCP (an upstream of tcp://host:port) toxiproxy's toxics: "latency 50ms",
// "bandwidth 64KB", "slow-close 1s", "timeout 0s", "slicer 10 delay=1ms",
// "limit-data 100", "reset-peer", each with dir=down|up|both.
package proxytest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/staggerhq/stagger/internal/faultproxy"
)

// Stats is what the proxy counted (GET /stats of the control API).
type Stats = faultproxy.Stats

// ScheduleClause is a named clause of an HTTP proxy's fault schedule.
type ScheduleClause = faultproxy.ScheduleClause

// FaultCount is a fault with what it did: the attempts or connections it
// matched and those it applied to.
type FaultCount = faultproxy.FaultCount

// Option configures New and Start.
type Option func(*faultproxy.Config)

// WithName names the proxy (default "proxytest").
func WithName(name string) Option { return func(c *faultproxy.Config) { c.Name = name } }

// WithWindow sets the window the peak and the timeline are counted in
// (default 200ms).
func WithWindow(d time.Duration) Option { return func(c *faultproxy.Config) { c.Window = d } }

// WithGroupBy names the request header that makes attempts one logical
// request (default Stagger-Request-Id, which retryhttp sends;
// Idempotency-Key and X-Request-Id are common too).
func WithGroupBy(header string) Option { return func(c *faultproxy.Config) { c.GroupBy = header } }

// Proxy is a fault proxy: in process (New, Start) or a running one's
// control API (Connect).
type Proxy struct {
	// URL is where clients go: http://127.0.0.1:PORT for an HTTP proxy,
	// the host:port for a TCP one. Empty after Connect (the control API
	// tells the address in Stats().Listen).
	URL string

	local faultproxy.Proxy
	ctl   string // control API base URL; "" in process
	name  string
	http  *http.Client
}

// New starts a proxy in process on a free 127.0.0.1 port in front of
// upstream: an http(s):// URL for an HTTP proxy, tcp://host:port for a TCP
// one. Close it when done.
func New(upstream string, opts ...Option) (*Proxy, error) {
	cfg := faultproxy.Config{Name: "proxytest", Listen: "127.0.0.1:0", Upstream: upstream}
	if strings.HasPrefix(upstream, "tcp://") {
		cfg.Kind = "tcp"
	}
	for _, o := range opts {
		o(&cfg)
	}
	p, err := faultproxy.Start(cfg)
	if err != nil {
		return nil, fmt.Errorf("proxytest: %w", err)
	}
	u := p.Addr()
	if cfg.Kind != "tcp" {
		u = "http://" + u
	}
	return &Proxy{URL: u, local: p, name: p.Name()}, nil
}

// Start is New for a test: it fails the test when the proxy cannot start
// and closes it when the test ends.
func Start(tb testing.TB, upstream string, opts ...Option) *Proxy {
	tb.Helper()
	p, err := New(upstream, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { p.Close() })
	return p
}

// Connect steers the proxy called name ("" for the default one) of a
// running `stagger proxy --control ADDR`, whose control API is at
// controlURL (http://127.0.0.1:8474).
func Connect(controlURL, name string) (*Proxy, error) {
	p := &Proxy{ctl: strings.TrimRight(controlURL, "/"), name: name, http: &http.Client{Timeout: 10 * time.Second}}
	if _, err := p.Stats(); err != nil {
		return nil, err
	}
	return p, nil
}

// Close stops an in-process proxy; for a connected one it does nothing.
func (p *Proxy) Close() error {
	if p.local != nil {
		return p.local.Close()
	}
	return nil
}

// AddFault adds a fault by its clause and returns its name (name=NAME in
// the clause, or one made from its kind).
func (p *Proxy) AddFault(clause string) (string, error) {
	if p.local != nil {
		f, err := p.local.Faults().Parse(clause)
		if err != nil {
			return "", fmt.Errorf("proxytest: %w", err)
		}
		name, err := p.local.Faults().Add(f)
		if err != nil {
			return "", fmt.Errorf("proxytest: %w", err)
		}
		return name, nil
	}
	var got FaultCount
	err := p.do("POST", "/faults", faultproxy.FaultRequest{Clause: clause}, &got)
	return got.Name, err
}

// SetFault sets the fault called name to clause, adding it if there is
// none; its counts go on.
func (p *Proxy) SetFault(name, clause string) error {
	if p.local != nil {
		f, err := p.local.Faults().Parse(clause)
		if err != nil {
			return fmt.Errorf("proxytest: %w", err)
		}
		if f.Name != "" && f.Name != name {
			return fmt.Errorf("proxytest: the clause names %q, not %q", f.Name, name)
		}
		_, err = p.local.Faults().Put(name, f)
		return err
	}
	return p.do("PUT", "/faults/"+url.PathEscape(name), faultproxy.FaultRequest{Clause: clause}, nil)
}

// RemoveFault removes the fault called name.
func (p *Proxy) RemoveFault(name string) error {
	if p.local != nil {
		if err := p.local.Faults().Remove(name); err != nil {
			return fmt.Errorf("proxytest: %w", err)
		}
		return nil
	}
	return p.do("DELETE", "/faults/"+url.PathEscape(name), nil, nil)
}

// Fault returns the fault called name with its counts.
func (p *Proxy) Fault(name string) (FaultCount, error) {
	if p.local != nil {
		f, err := p.local.Faults().Get(name)
		if err != nil {
			return f, fmt.Errorf("proxytest: %w", err)
		}
		return f, nil
	}
	var got FaultCount
	err := p.do("GET", "/faults/"+url.PathEscape(name), nil, &got)
	return got, err
}

// AddSchedule adds a clause to the fault schedule of an HTTP proxy
// ("down 2s at 5s", "drop 1s at 3s", "latency 20ms", "slow 1s at 2s for
// 10s", "flap 100ms/200ms at 1s for 5s", "cap 50", "retry-after 1s"; times
// count from the proxy's start) and returns its name: name when not "",
// else the clause's first word with a number if needed.
func (p *Proxy) AddSchedule(name, clause string) (string, error) {
	if p.local != nil {
		s, err := p.schedule()
		if err != nil {
			return "", err
		}
		if name, err = s.Add(name, clause); err != nil {
			return "", fmt.Errorf("proxytest: %w", err)
		}
		return name, nil
	}
	var got ScheduleClause
	err := p.do("POST", "/schedule", faultproxy.FaultRequest{Name: name, Clause: clause}, &got)
	return got.Name, err
}

// SetSchedule sets the schedule's clause called name, adding it if there
// is none.
func (p *Proxy) SetSchedule(name, clause string) error {
	if p.local != nil {
		s, err := p.schedule()
		if err != nil {
			return err
		}
		if _, err := s.Put(name, clause); err != nil {
			return fmt.Errorf("proxytest: %w", err)
		}
		return nil
	}
	return p.do("PUT", "/schedule/"+url.PathEscape(name), faultproxy.FaultRequest{Clause: clause}, nil)
}

// RemoveSchedule removes the schedule's clause called name.
func (p *Proxy) RemoveSchedule(name string) error {
	if p.local != nil {
		s, err := p.schedule()
		if err != nil {
			return err
		}
		if err := s.Remove(name); err != nil {
			return fmt.Errorf("proxytest: %w", err)
		}
		return nil
	}
	return p.do("DELETE", "/schedule/"+url.PathEscape(name), nil, nil)
}

// Schedule returns the clauses of the fault schedule, in order.
func (p *Proxy) Schedule() ([]ScheduleClause, error) {
	if p.local != nil {
		s, err := p.schedule()
		if err != nil {
			return nil, err
		}
		return s.List(), nil
	}
	var got []ScheduleClause
	err := p.do("GET", "/schedule", nil, &got)
	return got, err
}

func (p *Proxy) schedule() (*faultproxy.Schedule, error) {
	sp, ok := p.local.(faultproxy.Scheduler)
	if !ok {
		return nil, fmt.Errorf("proxytest: a %s proxy has no fault schedule; use AddFault", p.local.Kind())
	}
	return sp.Schedule(), nil
}

// Stats returns what the proxy counted, with the timeline.
func (p *Proxy) Stats() (Stats, error) {
	if p.local != nil {
		return p.local.Stats(true), nil
	}
	var s Stats
	err := p.do("GET", "/stats?timeline=1", nil, &s)
	return s, err
}

// Reset starts the counts afresh; the faults stay.
func (p *Proxy) Reset() error {
	if p.local != nil {
		p.local.ResetStats()
		return nil
	}
	return p.do("POST", "/stats/reset", nil, nil)
}

// Attempts returns the attempts that carried the logical request id (0
// when none did).
func (p *Proxy) Attempts(id string) (int, error) {
	if p.local != nil {
		n, _ := p.local.(faultproxy.RequestCounter).Attempts(id)
		return n, nil
	}
	var got faultproxy.RequestAttempts
	err := p.do("GET", "/stats/requests/"+url.PathEscape(id), nil, &got)
	var ae *apiError
	if errors.As(err, &ae) && ae.code == http.StatusNotFound && strings.Contains(ae.msg, "no attempt carried") {
		return 0, nil
	}
	return got.Attempts, err
}

// CheckAttempts returns an error saying what arrived unless the logical
// request id made exactly want attempts.
func (p *Proxy) CheckAttempts(id string, want int) error {
	n, err := p.Attempts(id)
	if err != nil {
		return err
	}
	if n != want {
		s, _ := p.Stats()
		return fmt.Errorf("proxytest: request %q made %d attempts, want %d (all requests: %d attempts, by attempt number %v)", id, n, want, s.Total, s.ByAttempt)
	}
	return nil
}

// CheckAmplification returns an error unless the attempts per logical
// request are at most max.
func (p *Proxy) CheckAmplification(max float64) error {
	s, err := p.Stats()
	if err != nil {
		return err
	}
	if s.AttemptsPerRequest == nil {
		return fmt.Errorf("proxytest: amplification unknown: none of the %d attempts carried the request ID header", s.Total)
	}
	if *s.AttemptsPerRequest > max {
		return fmt.Errorf("proxytest: %.3g attempts per request, over %.3g: %d attempts for %d requests, the most %d by one (by attempt number %v)",
			*s.AttemptsPerRequest, max, s.Total-s.Unidentified, *s.Requests, *s.MaxAttempts, s.ByAttempt)
	}
	return nil
}

// CheckPeak returns an error unless at most max attempts (connections for
// TCP) arrived inside any one window.
func (p *Proxy) CheckPeak(max int) error {
	s, err := p.Stats()
	if err != nil {
		return err
	}
	if s.Peak > max {
		return fmt.Errorf("proxytest: peak of %d attempts in one %dms window (from %dms), over %d; %d attempts in all",
			s.Peak, s.WindowMS, s.PeakAtMS, max, s.Total)
	}
	return nil
}

type apiError struct {
	code int
	msg  string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("proxytest: control API: %d: %s", e.code, e.msg)
}

// do calls the control API for the proxy p steers.
func (p *Proxy) do(method, path string, in, out any) error {
	u := p.ctl + path
	if p.name != "" {
		u = p.ctl + "/proxies/" + url.PathEscape(p.name) + path
	}
	var body io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		return fmt.Errorf("proxytest: %w", err)
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return fmt.Errorf("proxytest: control API: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("proxytest: control API: %w", err)
	}
	if resp.StatusCode >= 300 {
		var e struct{ Error string }
		json.Unmarshal(b, &e)
		return &apiError{code: resp.StatusCode, msg: e.Error}
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("proxytest: control API: %s %s: %w", method, path, err)
		}
	}
	return nil
}
