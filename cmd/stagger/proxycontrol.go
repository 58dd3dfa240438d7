package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/staggerhq/stagger/internal/faultproxy"
	"github.com/staggerhq/stagger/internal/labkit"
)

// recorderRef is the proxy's recorder, replaced by a reset of the counts
// (POST /stats/reset). An attempt loads it once and finishes where it
// arrived.
type recorderRef struct {
	p atomic.Pointer[labkit.WindowedRecorder]
}

func (r *recorderRef) load() *labkit.WindowedRecorder { return r.p.Load() }

// Arrive, Finish, Record and Stats act on the current recorder.
func (r *recorderRef) Arrive(at time.Time) labkit.Pending { return r.load().Arrive(at) }
func (r *recorderRef) Finish(p labkit.Pending, id string, attempt int, o labkit.Outcome) {
	r.load().Finish(p, id, attempt, o)
}
func (r *recorderRef) Record(at time.Time, id string, attempt int, o labkit.Outcome) {
	r.load().Record(at, id, attempt, o)
}
func (r *recorderRef) Stats(timeline bool) labkit.Stats { return r.load().Stats(timeline) }

// The proxy is the control API's default proxy (faultproxy.Proxy).

func (p *proxy) Name() string            { return p.cfg.name }
func (p *proxy) Kind() string            { return "http" }
func (p *proxy) Addr() string            { return p.addr }
func (p *proxy) Upstream() string        { return p.cfg.upstream.Redacted() }
func (p *proxy) Faults() *faultproxy.Set { return p.rt }
func (p *proxy) Close() error            { return nil } // runProxy closes it

// Attempts returns the attempts of the logical request id
// (faultproxy.RequestCounter).
func (p *proxy) Attempts(id string) (int, bool) {
	if c := p.ids.Load(); c != nil {
		return c.Get(id)
	}
	return 0, false
}

// Stats is what the control API's GET /stats returns: the counts of
// /_stagger/stats in the shape every proxy of the API shares.
func (p *proxy) Stats(timeline bool) faultproxy.Stats {
	s := faultproxy.BaseStats(p, p.now().Sub(p.start), p.inflight.Load(), p.rec.Stats(timeline))
	s.Faults = append(append([]string{}, p.cfg.faults.clauses...), s.Faults...)
	for i := range p.byAttempt {
		if n := p.byAttempt[i].Load(); n > 0 {
			s.ByAttempt[faultproxy.AttemptKey(i)] = n
		}
	}
	return s
}

// ResetStats starts the counts afresh: the recorder, the attempt numbers,
// the 413s and the faults' counts. The fault schedule keeps its clock.
func (p *proxy) ResetStats() {
	rec, err := labkit.NewWindowedRecorder(p.now(), labkit.WindowedConfig{Window: p.cfg.window, Horizon: p.cfg.horizon, MaxRequests: p.cfg.maxReqs})
	if err != nil {
		panic("stagger proxy: " + err.Error()) // the same config as at the start
	}
	p.rec.p.Store(rec)
	for i := range p.byAttempt {
		p.byAttempt[i].Store(0)
	}
	p.oversized.Store(0)
	if p.ids.Load() != nil {
		p.ids.Store(faultproxy.NewIDCounts())
	}
	p.rt.ResetCounts()
}

// Limits of the control API's server.
const (
	controlMaxConns = 64
	controlTimeout  = 10 * time.Second
)

// startControl serves the control API on addr (an empty host is
// 127.0.0.1) with main as its default proxy; stop it with the returned
// function, which also closes the proxies added through it.
func startControl(addr string, main faultproxy.Proxy, window time.Duration) (stop func(), bound string, err error) {
	ctl := faultproxy.NewControl(func(c faultproxy.Config) (faultproxy.Proxy, error) {
		c.Window = window
		return faultproxy.Start(c)
	})
	if err := ctl.Add(main); err != nil {
		return nil, "", err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", err
	}
	srv := &http.Server{Handler: ctl.Handler(), ReadHeaderTimeout: controlTimeout, ReadTimeout: controlTimeout, WriteTimeout: controlTimeout,
		IdleTimeout: time.Minute, MaxHeaderBytes: 16 << 10, ErrorLog: log.New(io.Discard, "", 0)}
	go srv.Serve(newLimitListener(l, controlMaxConns))
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		ctl.Close()
	}, l.Addr().String(), nil
}

// controlLine is the line printed once the control API listens.
func controlLine(addr string) string {
	line := "control API: http://" + addr + " (GET /faults, POST /faults, GET /stats; see docs/proxy.md)"
	if host, _, err := net.SplitHostPort(addr); err == nil {
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			line += "\nwarning: the control API is not on a loopback address: whoever reaches it can change the faults and start proxies"
		}
	}
	return line
}

// controlAddr reads --control: host:port, an empty host meaning 127.0.0.1.
func controlAddr(v string) (string, error) {
	host, port, err := net.SplitHostPort(v)
	if err != nil || port == "" {
		return "", fmt.Errorf("--control %q: want host:port, such as 127.0.0.1:8474", v)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// splitFaults sorts the --fault clauses: the timeline's (down, drop,
// latency D, slow, flap, cap, retry-after), parsed by parseFaults, and the
// run-time ones (labkit.ParseFault), which a TCP proxy alone accepts.
// "latency" is a timeline clause of the HTTP proxy and a fault of the TCP
// one.
func splitFaults(values []string, tcp bool) (schedule []string, runtime []labkit.Fault, err error) {
	set := faultproxy.NewSet(tcp, nil) // checks the kinds and the names
	for _, v := range values {
		if strings.TrimSpace(v) == "" {
			schedule = append(schedule, v) // parseFaults names the rule
			continue
		}
		var rest []string
		for _, clause := range strings.Split(v, ";") {
			word, _, _ := strings.Cut(strings.TrimSpace(clause), " ")
			if word == "" {
				continue
			}
			if tcp || (labkit.IsRuntimeFault(word) && !strings.EqualFold(word, "latency")) {
				f, err := set.Parse(clause)
				if err != nil {
					return nil, nil, fmt.Errorf("--fault %q: %v", strings.TrimSpace(clause), err)
				}
				if _, err := set.Add(f); err != nil {
					return nil, nil, fmt.Errorf("--fault %q: %v", strings.TrimSpace(clause), err)
				}
				continue
			}
			rest = append(rest, clause)
		}
		if len(rest) > 0 {
			schedule = append(schedule, strings.Join(rest, ";"))
		}
	}
	for _, a := range set.Snapshot() {
		runtime = append(runtime, a.Fault)
	}
	return schedule, runtime, nil
}
