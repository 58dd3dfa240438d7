package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/staggerhq/stagger/internal/faultproxy"
	"github.com/staggerhq/stagger/internal/labkit"
	"github.com/staggerhq/stagger/internal/redact"
	"github.com/staggerhq/stagger/internal/report"
	"github.com/staggerhq/stagger/retryhttp"
)

func init() {
	register(command{
		Name:    "proxy",
		Summary: "reverse proxy that injects faults and counts every attempt that arrives",
		Run:     runProxy,
	})
}

// Defaults of `stagger proxy`.
const (
	defaultProxyListen = "127.0.0.1:8081"
	defaultProxyReport = "stagger-proxy.html"
	// statsPath is answered by the proxy itself and never counted.
	statsPath = "/_stagger/stats"
	// defaultMaxBody bounds a forwarded request body.
	defaultMaxBody = faultproxy.DefaultMaxBody
	// Defaults of the limits on clients: a request's headers, the whole
	// request with its body, an idle keep-alive connection, and the
	// connections open at once.
	defaultReadHeaderTimeout = 10 * time.Second
	defaultReadTimeout       = 60 * time.Second
	defaultIdleTimeout       = 60 * time.Second
	defaultMaxConns          = 1024
)

// proxyConfig is the parsed command line of `stagger proxy`.
type proxyConfig struct {
	listen   string
	upstream *url.URL
	faults   *faultSchedule
	window   time.Duration
	horizon  time.Duration
	maxReqs  int
	report   string // "" for none
	record   string // timeline file (--record); "" for none
	duration time.Duration
	group    grouping
	maxBody  int64
	// Limits on clients (http.Server's timeouts and the connection cap).
	readHeaderTimeout, readTimeout, idleTimeout time.Duration
	maxConns                                    int
	quiet                                       bool
	args                                        []string

	// name is the proxy's name in the control API; control its address
	// ("" for none); runtime the run-time fault clauses of --fault; tcp
	// relays TCP (--upstream tcp://host:port) instead of HTTP.
	name    string
	control string
	runtime []labkit.Fault
	tcp     bool
	// CI: thresholds checked at exit (0: none) and the JSON summary file.
	maxAmplification float64
	maxPeak          int
	maxAttempts      int
	summary          string
}

// parseProxy parses and validates every flag; it returns exit code -1 when
// the proxy should run.
func parseProxy(args []string, stdout, stderr io.Writer) (*proxyConfig, int) {
	f := newProxyFlags()
	if code, ok := parseFlags(f.fs, args, stdout, stderr, func(w io.Writer) { proxyUsage(w, f.fs) }); !ok {
		return nil, code
	}
	cfg, err := f.config(args)
	if err != nil {
		return nil, usageError(stderr, f.fs.Name(), "%v", err)
	}
	return cfg, -1
}

// proxyFlags holds stagger proxy's flags as given, until config checks
// them and builds the proxyConfig.
type proxyFlags struct {
	fs                         *flag.FlagSet
	listen, upstream           string
	faults                     []string
	window, horizon, duration  time.Duration
	maxReqs, maxBody, maxConns int
	rep, record                string
	idHeader, groupBy          string
	quiet                      bool
	rht, rt, it                time.Duration
	name, control, summary     string
	maxAmp                     float64
	maxPeak, maxAtt            int
}

// newProxyFlags defines stagger proxy's flags with their defaults.
func newProxyFlags() *proxyFlags {
	f := &proxyFlags{}
	fs := flag.NewFlagSet("stagger proxy", flag.ContinueOnError)
	f.fs = fs
	f.window, f.horizon, f.maxReqs = labkit.DefaultWindow, labkit.DefaultHorizon, labkit.DefaultMaxRequests
	f.maxBody, f.rht, f.rt, f.it, f.maxConns = defaultMaxBody, defaultReadHeaderTimeout, defaultReadTimeout, defaultIdleTimeout, defaultMaxConns
	fs.StringVar(&f.listen, "listen", defaultProxyListen, "address to listen on (host:port; port 0 picks a free one); loopback unless you say otherwise")
	fs.StringVar(&f.upstream, "upstream", "", "URL of the service to forward to (http or https), required")
	fs.Var(&faultList{p: &f.faults}, "fault", "fault schedule clause(s), repeatable, ';'-separated: "+faultGrammar+
		" (times since the proxy started, durations with a unit); or run-time faults: "+labkit.RuntimeFaultGrammar)
	fs.Var(durationValue{P: &f.window, Positive: true, Max: time.Hour}, "window", "width of the window the peak is counted in (sliding) and of the report's bars")
	fs.Var(durationValue{P: &f.horizon, Positive: true, Max: 30 * 24 * time.Hour}, "horizon",
		fmt.Sprintf("how far back the timeline (stats and report) reaches; older windows are folded into the totals (at most %d windows)", labkit.MaxWindows))
	fs.Var(intValue{P: &f.maxReqs, Min: 1, Max: 1 << 26}, "max-requests", "request IDs tracked at once; a new one beyond this forgets the oldest (counted as evicted)")
	fs.StringVar(&f.rep, "report", defaultProxyReport, "write the HTML report to this file on exit (empty for none)")
	fs.StringVar(&f.record, "record", "", "write what the upstream did per --window to this timeline file (JSON lines, written on exit; see docs/proxy.md)")
	fs.Var(durationValue{P: &f.duration, Max: 7 * 24 * time.Hour}, "duration", "stop by itself after this long; 0 runs until SIGINT or SIGTERM")
	fs.StringVar(&f.idHeader, "id-header", labkit.HeaderRequestID, "request header naming the logical request an attempt belongs to (the same as --group-by header:NAME)")
	fs.StringVar(&f.groupBy, "group-by", "header:"+labkit.HeaderRequestID, "what makes attempts one logical request: idempotency-key (the Idempotency-Key header), header:NAME (any header), "+
		"or method+path+client (method, request target and client IP: for a run with one client that sends each request once)")
	fs.Var(intValue{P: &f.maxBody, Min: 0, Max: 1 << 30}, "max-body", "largest request body forwarded, in bytes (larger: 413)")
	fs.Var(durationValue{P: &f.rht, Positive: true, Max: time.Hour}, "read-header-timeout", "longest a client may take to send a request's headers; then the connection is closed")
	fs.Var(durationValue{P: &f.rt, Positive: true, Max: 24 * time.Hour}, "read-timeout", "longest a client may take to send a whole request, body included (a slower sender is cut off; its attempt counts as abandoned)")
	fs.Var(durationValue{P: &f.it, Positive: true, Max: 24 * time.Hour}, "idle-timeout", "longest a keep-alive connection may sit idle between requests; then the proxy closes it")
	fs.Var(intValue{P: &f.maxConns, Min: 1, Max: 1 << 20}, "max-conns", "most client connections open at once; more wait to be accepted (keep it below the open-file limit, ulimit -n)")
	fs.BoolVar(&f.quiet, "quiet", false, "print only the final summary line")
	fs.StringVar(&f.name, "name", "main", "the proxy's name in the control API")
	fs.StringVar(&f.control, "control", "", "serve the control API (HTTP+JSON: faults, proxies, stats) on this host:port, such as 127.0.0.1:8474; an empty host is 127.0.0.1")
	fs.Var(floatValue{p: &f.maxAmp, max: 1e6}, "max-amplification", "at exit, fail (exit 1) when attempts per logical request exceed this (0: no check)")
	fs.Var(intValue{P: &f.maxPeak, Min: 0, Max: 1 << 30}, "max-peak", "at exit, fail (exit 1) when the peak attempts (connections for TCP) in one --window exceed this (0: no check)")
	fs.Var(intValue{P: &f.maxAtt, Min: 0, Max: 1 << 20}, "max-attempts", "at exit, fail (exit 1) when one logical request made more attempts than this (0: no check)")
	fs.StringVar(&f.summary, "summary", "", "write a JSON summary on exit, meant to be diffed between runs (counts, peak, amplification, faults, thresholds; no times)")
	return f
}

// config checks the flags in turn (the upstream, where to listen and how
// far back to count, the faults, the control API, how attempts are
// grouped, the output files) and builds the proxy's configuration.
func (f *proxyFlags) config(args []string) (*proxyConfig, error) {
	u, tcp, err := parseUpstream(f.upstream)
	if err != nil {
		return nil, err
	}
	if _, _, err := net.SplitHostPort(f.listen); err != nil {
		return nil, fmt.Errorf("--listen %q: want host:port, such as %s", f.listen, defaultProxyListen)
	}
	if f.horizon < f.window || f.horizon/f.window > labkit.MaxWindows {
		return nil, fmt.Errorf("--horizon %v: want between the --window (%v) and %d windows (%v)", f.horizon, f.window, labkit.MaxWindows, f.window*labkit.MaxWindows)
	}
	schedValues, runtime, err := splitFaults(f.faults, tcp)
	if err != nil {
		return nil, err
	}
	sched, err := parseFaults(schedValues)
	if err != nil {
		return nil, err
	}
	if err := f.checkControl(); err != nil {
		return nil, err
	}
	group, err := f.grouping()
	if err != nil {
		return nil, err
	}
	if err := f.checkOutputs(); err != nil {
		return nil, err
	}
	return &proxyConfig{listen: f.listen, upstream: u, faults: sched, window: f.window, horizon: f.horizon, maxReqs: f.maxReqs, report: f.rep, record: f.record,
		duration: f.duration, group: group, maxBody: int64(f.maxBody),
		readHeaderTimeout: min(f.rht, f.rt), readTimeout: f.rt, idleTimeout: f.it, maxConns: f.maxConns, quiet: f.quiet, args: args,
		name: f.name, control: f.control, runtime: runtime, tcp: tcp, maxAmplification: f.maxAmp, maxPeak: f.maxPeak, maxAttempts: f.maxAtt, summary: f.summary}, nil
}

// parseUpstream reads --upstream: tcp://host:port for a TCP proxy, else an
// http or https URL. Errors never show a password or a token.
func parseUpstream(upstream string) (u *url.URL, tcp bool, err error) {
	if upstream == "" {
		return nil, false, errors.New("--upstream is required: the URL of the service to forward to")
	}
	u, err = url.Parse(upstream)
	tcp = err == nil && u.Scheme == "tcp"
	if tcp && (u.Host == "" || u.Port() == "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "") {
		return nil, false, fmt.Errorf("--upstream %s: want tcp://host:port for a TCP proxy, such as tcp://127.0.0.1:6379", redact.String(upstream))
	}
	if !tcp && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "") {
		shown := "(unparseable)"
		if err == nil {
			shown = redact.String(upstream) // never print a password or a token
		}
		return nil, false, fmt.Errorf("--upstream %s: want an http or https URL with a host and no user, query or fragment, such as http://127.0.0.1:9000 (or tcp://host:port for any protocol)", shown)
	}
	return u, tcp, nil
}

// checkControl checks the proxy's name, the control API's address (made
// whole) and the --summary file.
func (f *proxyFlags) checkControl() (err error) {
	if !labkit.ValidFaultName(f.name) {
		return fmt.Errorf("--name %q: want 1 to %d letters, digits, '-', '_' or '.'", f.name, labkit.MaxFaultName)
	}
	if f.control != "" {
		if f.control, err = controlAddr(f.control); err != nil {
			return err
		}
	}
	if f.summary != "" {
		if err := checkReportPath(f.summary); err != nil {
			return fmt.Errorf("--summary: %v", err)
		}
	}
	return nil
}

// grouping is how attempts make one logical request: --group-by, or
// --id-header's header, not both.
func (f *proxyFlags) grouping() (grouping, error) {
	if !validHeaderName(f.idHeader) {
		return grouping{}, fmt.Errorf("--id-header %q: want a header name such as %s", f.idHeader, labkit.HeaderRequestID)
	}
	byGroup := flagWasSet(f.fs, "group-by")
	if byGroup && flagWasSet(f.fs, "id-header") {
		return grouping{}, errors.New("--group-by and --id-header both say how to group attempts: give one")
	}
	if byGroup {
		return parseGrouping(f.groupBy)
	}
	return grouping{header: http.CanonicalHeaderKey(f.idHeader)}, nil
}

// checkOutputs checks the files --report and --record would write.
func (f *proxyFlags) checkOutputs() error {
	if f.rep != "" && strings.ContainsRune(f.rep, 0) {
		return errors.New("--report: the file name contains a NUL byte")
	}
	if f.rep != "" {
		if err := checkReportPath(f.rep); err != nil {
			return fmt.Errorf("--report: %v", err)
		}
	}
	return checkRecord(f.record, f.window)
}

// faultList collects --fault values; they are parsed together afterwards.
type faultList struct{ p *[]string }

func (f *faultList) String() string {
	if f.p == nil {
		return ""
	}
	return strings.Join(*f.p, "; ")
}

func (f *faultList) Set(s string) error {
	*f.p = append(*f.p, s)
	return nil
}

func proxyUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintln(w, "Usage: stagger proxy --upstream URL [--listen 127.0.0.1:8081] [--fault 'down 700ms at 2s'] ...")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "A reverse proxy in front of a real service that injects faults on a schedule and counts")
	fmt.Fprintln(w, "every attempt that arrives, as the lab's gateway does: totals, the peak inside one window,")
	fmt.Fprintln(w, "attempts per logical request (by --id-header) and per attempt number (Stagger-Attempt).")
	fmt.Fprintf(w, "Live JSON at %s; an HTML report is written on exit (SIGINT, SIGTERM or --duration).\n", statsPath)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Fault clauses (times since the proxy started):")
	fmt.Fprintln(w, "  down D at T             503 for attempts arriving in [T, T+D)")
	fmt.Fprintln(w, "  drop D at T             close the connection without an answer in [T, T+D)")
	fmt.Fprintln(w, "  latency D               add D before every answer")
	fmt.Fprintln(w, "  slow D at T for W       latency grows linearly by up to D over [T, T+W)")
	fmt.Fprintln(w, "  flap D/U at T for W     inside [T, T+W): down for D, up for U, down again, ...")
	fmt.Fprintln(w, "  cap N                   at most N attempts in flight; more get 503 at once")
	fmt.Fprintln(w, "  retry-after D           send Retry-After with the 503s (whole seconds, rounded up)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run-time faults (also through --control), each with p=F (probability), name=NAME and,")
	fmt.Fprintln(w, "for HTTP, method=M path=/PREFIX header=NAME[:VALUE]:")
	fmt.Fprintln(w, "  status CODE [retry-after=D|retry-after=date:D] [body=TEXT]   answer CODE (400-599)")
	fmt.Fprintln(w, "  delay D [jitter=J]      wait D±J before forwarding")
	fmt.Fprintln(w, "  cut N                   close the connection after N bytes of the answer's body")
	fmt.Fprintln(w, "  reset                   reset the connection (TCP RST), no answer")
	fmt.Fprintln(w, "With --upstream tcp://host:port (any protocol), each with dir=down|up|both:")
	fmt.Fprintln(w, "  latency D [jitter=J]; bandwidth RATE; slow-close D; timeout D; slicer N [delay=D];")
	fmt.Fprintln(w, "  limit-data N; reset-peer [D]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Flags:")
	printFlags(w, fs, map[string]string{"listen": "HOST:PORT", "upstream": "URL", "fault": "CLAUSE", "report": "FILE", "id-header": "NAME"})
}

func runProxy(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, code := parseProxy(args, stdout, stderr)
	if cfg == nil {
		return code
	}
	if cfg.tcp {
		return runTCPProxy(ctx, cfg, stdout, stderr)
	}
	l, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		fmt.Fprintf(stderr, "stagger proxy: --listen %s: %v\n", cfg.listen, err)
		return exitUsage
	}
	p := newProxy(cfg, time.Now())
	ctlAddr := ""
	if cfg.control != "" {
		stop, bound, err := startControl(cfg.control, p, cfg.window)
		if err != nil {
			l.Close()
			fmt.Fprintf(stderr, "stagger proxy: --control %s: %v\n", cfg.control, err)
			return exitUsage
		}
		defer stop()
		ctlAddr = bound
	}
	if err := p.startRecord(); err != nil {
		l.Close()
		fmt.Fprintf(stderr, "stagger proxy: --record %s: %v\n", cfg.record, err)
		return exitFail
	}
	serveErr := p.Serve(l, p.serverConfig())
	if !cfg.quiet {
		fmt.Fprintf(stdout, "stagger proxy: listening on http://%s -> %s; stats at http://%s%s\n",
			l.Addr(), cfg.upstream.Redacted(), l.Addr(), statsPath)
		if ctlAddr != "" {
			fmt.Fprintln(stdout, controlLine(ctlAddr))
		}
		if all := p.clauses(); len(all) > 0 {
			fmt.Fprintf(stdout, "faults: %s\n", strings.Join(all, "; "))
		}
	}
	var stop <-chan time.Time
	if cfg.duration > 0 {
		t := time.NewTimer(cfg.duration)
		defer t.Stop()
		stop = t.C
	}
	failed := false
	select {
	case <-ctx.Done():
	case <-stop:
	case err := <-serveErr:
		fmt.Fprintf(stderr, "stagger proxy: %v\n", err)
		failed = true
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = p.Shutdown(shutdown)
	if err := p.stopRecord(stdout); err != nil {
		fmt.Fprintf(stderr, "stagger proxy: --record %s: %v\n", cfg.record, err)
		failed = true
	}

	s := p.Recorder().Stats(true)
	fmt.Fprintln(stdout, p.summaryLine(s))
	if cfg.report != "" {
		sub := fmt.Sprintf("stagger proxy %s — %s", strings.Join(quoteArgs(cfg.args), " "), time.Now().UTC().Format(time.RFC3339))
		if err := report.WriteFile(cfg.report, p.reportPage(sub, s)); err != nil {
			fmt.Fprintf(stderr, "stagger proxy: --report %s: %v\n", cfg.report, err)
			return exitFail
		}
		fmt.Fprintf(stdout, "report: %s\n", cfg.report)
	}
	if passed, ok := finishCI(cfg, p.Stats(false), stdout, stderr); !passed || !ok {
		failed = true
	}
	if failed {
		return exitFail
	}
	return exitOK
}

func quoteArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t'\";") {
			a = strconv.Quote(a)
		}
		out[i] = a
	}
	return out
}

// proxy is `stagger proxy`'s HTTP proxy (faultproxy.HTTPProxy: faults,
// forwarding, counting) with the command's config, summary line and
// report.
type proxy struct {
	*faultproxy.HTTPProxy
	cfg *proxyConfig
}

// newProxy returns the proxy for cfg, which parseProxy has checked; it
// does not listen yet.
func newProxy(cfg *proxyConfig, start time.Time) *proxy {
	group := cfg.group.proxy()
	hp, err := faultproxy.NewHTTP(faultproxy.Config{Name: cfg.name, Upstream: cfg.upstream.String(), Window: cfg.window, Group: &group,
		Horizon: cfg.horizon, MaxRequests: cfg.maxReqs, MaxBody: cfg.maxBody, Schedule: cfg.faults.clauses, StatsPath: statsPath,
		NoRequestCounts: cfg.control == "", Start: start})
	if err != nil {
		panic("stagger proxy: " + err.Error()) // parseProxy checked the same rules
	}
	for _, f := range cfg.runtime {
		if _, err := hp.Faults().Add(f); err != nil {
			panic("stagger proxy: " + err.Error()) // parseProxy checked the names
		}
	}
	return &proxy{HTTPProxy: hp, cfg: cfg}
}

// serverConfig is the limits on clients of cfg, for Serve.
func (p *proxy) serverConfig() faultproxy.Config {
	return faultproxy.Config{MaxConns: p.cfg.maxConns, ReadHeaderTimeout: p.cfg.readHeaderTimeout, ReadTimeout: p.cfg.readTimeout, IdleTimeout: p.cfg.idleTimeout}
}

// clauses is every fault as a clause: the schedule's, then the run-time
// ones.
func (p *proxy) clauses() []string { return append(p.Schedule().Clauses(), p.Faults().Clauses()...) }

// schedule is the fault schedule as it is now.
func (p *proxy) schedule() *labkit.FaultClauses {
	s, err := labkit.ParseFaultClauses("schedule", p.Schedule().Clauses())
	if err != nil || len(p.Schedule().Clauses()) == 0 {
		return &labkit.FaultClauses{} // the schedule checked them together
	}
	return s
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// reportPage is the final report: the same page as the lab's, for what
// arrived through the proxy.
func (p *proxy) reportPage(subtitle string, s labkit.Stats) report.Page {
	w := p.cfg.window
	f := p.schedule()
	var shades []report.Shade
	for _, d := range f.Down {
		shades = append(shades, report.Shade{From: msOf(d.From), To: msOf(d.To), Label: "down"})
	}
	for _, d := range f.Drop {
		shades = append(shades, report.Shade{From: msOf(d.From), To: msOf(d.To), Label: "dropping connections"})
	}
	for _, d := range f.Flap {
		shades = append(shades, report.Shade{From: msOf(d.From), To: msOf(d.To), Label: "flapping"})
	}
	for _, d := range f.Slow {
		shades = append(shades, report.Shade{From: msOf(d.From), To: msOf(d.To), Label: "slowing down"})
	}
	chart, chartNotes := p.timelineChart(s, shades)
	g := p.perRequest(s)
	summary := &report.Table{
		Columns: []string{"attempts", "accepted", "down", "busy", "dropped", "failed", "abandoned", "peak",
			"requests", "requests accepted", "ungrouped attempts", "attempts / request", "most by one request"},
		Rows: [][]string{{
			fmt.Sprint(s.Total), fmt.Sprint(s.Accepted), fmt.Sprint(s.Down), fmt.Sprint(s.Busy), fmt.Sprint(s.Dropped),
			fmt.Sprint(s.Failed), fmt.Sprint(s.Abandoned), fmt.Sprint(s.Peak),
			g.requests, g.accepted, fmt.Sprint(s.Unidentified), g.perRequest, g.most,
		}},
	}
	byAttempt := &report.Table{Columns: []string{"Stagger-Attempt", "attempts"}}
	var attemptNotes []string
	if counts := p.Stats(false).ByAttempt; counts != nil {
		for i := range retryhttp.TrackedAttempts + 1 {
			if n := counts[faultproxy.AttemptKey(i)]; n > 0 {
				byAttempt.Rows = append(byAttempt.Rows, []string{faultproxy.AttemptKey(i), fmt.Sprint(n)})
			}
		}
	} else {
		byAttempt = nil
		attemptNotes = []string{fmt.Sprintf("n/a: none of the %d attempts carried %s (stagger's own clients send it; others do not).", s.Total, retryhttp.AttemptHeader)}
	}
	var groupNotes []string
	if !g.ok {
		groupNotes = []string{fmt.Sprintf("Requests n/a: none of the attempts carried a key to group them by (%s); try --group-by idempotency-key, header:NAME or method+path+client.", p.cfg.group)}
	}
	if s.Evicted > 0 {
		groupNotes = append(groupNotes, fmt.Sprintf("%d request keys were forgotten to stay within --max-requests %d; an attempt of a forgotten request counts as a new request.", s.Evicted, p.cfg.maxReqs))
	}
	if n := p.Stats(false).TooLarge; n > 0 {
		groupNotes = append(groupNotes, fmt.Sprintf("%d requests were refused with 413 before reaching the upstream (body over --max-body %d bytes); they are not counted as attempts.", n, p.cfg.maxBody))
	}
	faults := "no faults"
	if all := p.clauses(); len(all) > 0 {
		faults = "faults: " + strings.Join(all, "; ")
	}
	return report.Page{
		Title:    "stagger proxy — what arrived on the way to " + p.cfg.upstream.Redacted(),
		Subtitle: subtitle,
		Notes: []string{
			faults + ".",
			fmt.Sprintf("The chart counts the attempts that reached the proxy in consecutive %v windows, accepted at the bottom and each kind of "+
				"rejection stacked above it in its own colour; shaded spans are the scheduled faults and the mark is the peak: the most attempts inside any %v window, sliding. "+
				"Attempts are grouped into logical requests by %s and numbered by Stagger-Attempt.", w, w, p.cfg.group),
		},
		Sections: []report.Section{
			{Title: "Summary", Notes: append(groupNotes, chartNotes...), Table: summary, Charts: []report.Chart{chart}},
			{Title: "Attempts by attempt number", Notes: attemptNotes, Table: byAttempt},
		},
	}
}

// perRequestCells are the per-request numbers as shown: "n/a" when no
// attempt carried the grouping key.
type perRequestCells struct {
	ok                                   bool
	requests, accepted, perRequest, most string
}

func (p *proxy) perRequest(s labkit.Stats) perRequestCells {
	if s.Total > 0 && s.Unidentified == s.Total {
		return perRequestCells{false, "n/a", "n/a", "n/a", "n/a"}
	}
	return perRequestCells{true, fmt.Sprint(s.Requests), fmt.Sprint(s.RequestsAccepted),
		fmt.Sprintf("%.2f", s.AttemptsPerRequest()), fmt.Sprint(s.MaxAttempts)}
}

// summaryLine is the line printed on exit.
func (p *proxy) summaryLine(s labkit.Stats) string {
	g := p.perRequest(s)
	line := fmt.Sprintf("stagger proxy: %d attempts, %d accepted, %d down, %d busy, %d dropped, %d failed, %d abandoned, peak %d in %v; ",
		s.Total, s.Accepted, s.Down, s.Busy, s.Dropped, s.Failed, s.Abandoned, s.Peak, p.cfg.window)
	if n := p.Stats(false).TooLarge; n > 0 {
		line = fmt.Sprintf("stagger proxy: %d refused with 413 (body over --max-body), ", n) + strings.TrimPrefix(line, "stagger proxy: ")
	}
	if !g.ok {
		return line + fmt.Sprintf("requests n/a (no attempt carried %s)", p.cfg.group)
	}
	return line + fmt.Sprintf("%s requests, %s attempts/request (by %s)", g.requests, g.perRequest, p.cfg.group)
}

// maxChartBars is the most bars per outcome the report's chart draws: a
// longer timeline is shown as the mean of consecutive windows.
const maxChartBars = 600

// outcomeSeries are the series of the report's chart, bottom to top, each
// in a colour of its own.
var outcomeSeries = []struct {
	name  string
	color report.Color
	count func(labkit.Bucket) int
}{
	{"accepted", report.Blue, func(b labkit.Bucket) int { return b.Accepted }},
	{"down", report.Vermillion, func(b labkit.Bucket) int { return b.Down }},
	{"busy", report.Orange, func(b labkit.Bucket) int { return b.Busy }},
	{"dropped", report.Purple, func(b labkit.Bucket) int { return b.Dropped }},
	{"failed", report.Grey, func(b labkit.Bucket) int { return b.Failed }},
	{"abandoned", report.Yellow, func(b labkit.Bucket) int { return b.Abandoned }},
}

// timelineChart is the report's full-width chart of the kept windows: one
// series per outcome that occurred (accepted always), bars of the mean per
// window when there are more than maxChartBars windows, the peak marked.
func (p *proxy) timelineChart(s labkit.Stats, shades []report.Shade) (report.Chart, []string) {
	w := p.cfg.window
	tl := s.Timeline
	k := max(1, (len(tl)+maxChartBars-1)/maxChartBars) // windows per bar
	var xMin, xMax time.Duration
	if len(tl) > 0 {
		xMin, xMax = tl[0].Start, tl[len(tl)-1].Start+w
	}
	xMax = max(xMax, w)
	if xMin == 0 {
		xMax = max(xMax, p.schedule().End())
	}
	unit, unitName := float64(time.Millisecond), "ms"
	if xMax-xMin > 2*time.Minute {
		unit, unitName = float64(time.Second), "s"
	}
	at := func(d time.Duration) float64 { return float64(d) / unit }
	var series []report.Series
	for _, o := range outcomeSeries {
		sr := report.Series{Name: o.name, Color: o.color}
		total := 0
		for i := 0; i < len(tl); i += k {
			n := 0
			for _, b := range tl[i:min(i+k, len(tl))] {
				n += o.count(b)
			}
			total += n
			if n > 0 {
				sr.Points = append(sr.Points, report.Point{X: at(tl[i].Start), Y: float64(n) / float64(k)})
			}
		}
		if total > 0 || o.name == "accepted" {
			series = append(series, sr)
		}
	}
	for i := range shades {
		shades[i].From, shades[i].To = shades[i].From*float64(time.Millisecond)/unit, shades[i].To*float64(time.Millisecond)/unit
	}
	ylabel := fmt.Sprintf("attempts per %v", w)
	var notes []string
	if k > 1 {
		ylabel = fmt.Sprintf("attempts per %v (mean of %d)", w, k)
		notes = append(notes, fmt.Sprintf("Each bar is the mean of %d consecutive %v windows (%v): the run has %d windows.", k, w, time.Duration(k)*w, len(tl)))
	}
	if s.Folded > 0 {
		notes = append(notes, fmt.Sprintf("The chart shows the last --horizon %v; %d earlier attempts are in the totals only.", p.cfg.horizon, s.Folded))
	}
	chart := report.Chart{
		Title: "attempts arriving at the proxy", Kind: report.Bars, Wide: true,
		XLabel: "time since the proxy started (" + unitName + ")", YLabel: ylabel,
		XMin: at(xMin), XMax: at(xMax), BarWidth: at(time.Duration(k) * w),
		Series: series, Shades: shades,
	}
	if s.Total > 0 {
		label := fmt.Sprintf("peak %d in [%d, %d) ms", s.Peak, s.PeakAt.Milliseconds(), (s.PeakAt + w).Milliseconds())
		if unitName == "s" {
			label = fmt.Sprintf("peak %d in [%.2f, %.2f) s", s.Peak, s.PeakAt.Seconds(), (s.PeakAt + w).Seconds())
		}
		if s.PeakAt < xMin {
			notes = append(notes, "The "+label+" came before the windows the chart shows.")
		} else {
			// On bars of k windows, the mark sits on the bar holding the peak.
			x := at(xMin + (s.PeakAt-xMin)/(time.Duration(k)*w)*(time.Duration(k)*w))
			chart.Marks = []report.Mark{{X: x, Y: float64(s.Peak), Label: label}}
		}
	}
	return chart, notes
}
