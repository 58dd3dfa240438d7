package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/staggerhq/stagger/budget"
	"github.com/staggerhq/stagger/internal/labkit"
)

func init() {
	register(command{
		Name:    "lab",
		Summary: "count what a retry policy does to the service that receives it",
		Run:     runLab,
	})
}

// defaultReport is where the HTML report goes when --report is not given
// (and --json is not set).
const defaultReport = "stagger-lab.html"

// labConfig is the parsed command line of `stagger lab`.
type labConfig struct {
	scenario   labkit.Scenario
	strategies []labkit.Strategy
	json       bool
	quiet      bool
	report     string // "" for none
	reportOpts labkit.ReportOptions
	args       []string
}

// parseLab parses and validates every flag; it returns exit code -1 when the
// run should go ahead.
func parseLab(args []string, stdout, stderr io.Writer) (*labConfig, int) {
	var (
		callers        = 4
		maxAttempts    = labkit.DefaultCallerAttempts
		bulkhead       = labkit.DefaultBulkhead
		capacity       = 0
		budgetInitial  = int(labkit.DefaultBudgetInitial)
		outage         = labkit.FourCallerDown
		latency        time.Duration
		autoLatency    = true
		window         = labkit.DefaultWindow
		ramp           = labkit.FourCallerRamp
		base           = labkit.DefaultBase
		capDelay       time.Duration
		attemptTimeout time.Duration
		hedge                 = labkit.DefaultHedge
		seed           uint64 = 1
		names                 = []string{"immediate", "expo-full"}
		asJSON, quiet  bool
		report         = defaultReport
		reportAxes     = "shared"
	)
	fs := flag.NewFlagSet("stagger lab", flag.ContinueOnError)
	fs.Var(intValue{P: &callers, Min: 1, Max: labkit.MaxCallers}, "callers", "number of callers, each one logical request retried until accepted")
	fs.Var(durationValue{P: &outage, Max: 10 * time.Minute}, "outage", "how long the gateway is down (503) from the start; 0 for no outage")
	fs.Var(latencyValue{D: &latency, Auto: &autoLatency, Max: time.Minute}, "latency",
		"how long the gateway takes to answer; auto: measure what this machine adds to a cycle and make up a 26.2ms round trip, so that immediate makes 64 attempts with a peak of 18")
	fs.Var(durationValue{P: &window, Positive: true, Max: time.Hour}, "window", "width of the window the peak is counted in (sliding) and of the timeline's buckets")
	fs.Var(&listValue{P: &names, Check: checkStrategyName}, "strategy",
		"strategy to run; repeat the flag or separate names with commas: "+strings.Join(labkit.StrategyNames, ", ")+
			", each optionally followed by any of +budget, +bulkhead, +breaker, +rate and +hedge")
	fs.Var(uintValue{P: &seed}, "seed", "seed of the jitter: the same seed draws the same waits")
	fs.Var(intValue{P: &maxAttempts, Min: 1, Max: 1_000_000}, "max-attempts", "attempts per caller at most (the first included): callers retry until accepted, this is the safety net")
	fs.BoolVar(&asJSON, "json", false, "print one JSON object instead of the log and the table")
	fs.StringVar(&report, "report", defaultReport, "write the HTML report to this file (default "+defaultReport+" unless --json; empty for none)")
	fs.StringVar(&reportAxes, "report-axes", "shared", "Y axes of the report's charts: shared (heights compare across strategies) or per-chart (each up to its own peak)")
	fs.BoolVar(&quiet, "quiet", false, "leave out the per-attempt lines (and the attempt log in --json)")
	fs.Var(durationValue{P: &ramp, Max: time.Minute}, "ramp", "callers start evenly over this span: caller i of N sends its first attempt at i·ramp/N")
	fs.Var(durationValue{P: &base, Positive: true, Max: time.Minute}, "base", "wait of constant, first window of expo, expo-full, expo-equal and decorrelated (waits are whole ms)")
	fs.Var(durationValue{P: &capDelay, Max: time.Hour}, "cap", "largest window of expo* and decorrelated; 0 for none")
	fs.Var(intValue{P: &budgetInitial, Min: 0, Max: budget.DefaultMax}, "budget-initial", "credits the +budget token bucket holds at the start (+1 per request, a retry costs 10, at most 200; 0 starts empty)")
	fs.Var(intValue{P: &bulkhead, Min: 1, Max: labkit.MaxCallers}, "bulkhead", "attempts in flight allowed by +bulkhead (shared by all callers)")
	fs.Var(intValue{P: &capacity, Min: 0, Max: labkit.MaxCallers}, "capacity", "the gateway refuses (503 at once) attempts beyond this many in flight; 0 for no cap")
	fs.Var(durationValue{P: &attemptTimeout, Max: time.Hour}, "attempt-timeout", "callers give up on an attempt after this long and retry; 0 for none")
	fs.Var(durationValue{P: &hedge, Positive: true, Max: time.Hour}, "hedge", "+hedge: how long an attempt runs without an answer before a second one is sent")

	if code, ok := parseFlags(fs, args, stdout, stderr, func(w io.Writer) { labUsage(w, fs) }); !ok {
		return nil, code
	}
	usageErr := func(format string, a ...any) (*labConfig, int) {
		return nil, usageError(stderr, fs.Name(), format, a...)
	}
	if len(names) == 0 {
		return usageErr("--strategy: give at least one strategy")
	}
	if capDelay != 0 && capDelay < base {
		return usageErr("--cap (%v) must be >= --base (%v), or 0 for no cap", capDelay, base)
	}
	if !flagWasSet(fs, "report") && asJSON {
		report = ""
	}
	if report != "" && strings.ContainsRune(report, 0) {
		return usageErr("--report: the file name contains a NUL byte")
	}
	if report != "" {
		if err := checkReportPath(report); err != nil {
			return usageErr("--report: %v", err)
		}
	}

	opt := labkit.StrategyOptions{
		Base: base, Cap: capDelay, Bulkhead: bulkhead, Hedge: hedge,
		NewBudget: func() budget.Budget {
			return &budget.TokenBucket{Initial: int64(budgetInitial), Empty: budgetInitial == 0}
		},
	}
	if reportAxes != "shared" && reportAxes != "per-chart" {
		return usageErr("--report-axes %q: want shared or per-chart", reportAxes)
	}
	cfg := &labConfig{json: asJSON, quiet: quiet, report: report, args: args,
		reportOpts: labkit.ReportOptions{PerChartAxes: reportAxes == "per-chart"}}
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] {
			return usageErr("--strategy: %q is given twice", n)
		}
		seen[n] = true
		st, err := labkit.ParseStrategy(n, opt)
		if err != nil {
			return usageErr("--strategy %s: %v", n, err)
		}
		cfg.strategies = append(cfg.strategies, st)
	}
	f := labkit.Outage(outage, latency)
	f.Capacity = capacity
	cfg.scenario = labkit.Scenario{
		Callers:        callers,
		Faults:         f,
		Window:         window,
		Ramp:           ramp,
		MaxAttempts:    maxAttempts,
		AttemptTimeout: attemptTimeout,
		Seed:           seed,
	}
	if autoLatency {
		cfg.scenario.RoundTrip = labkit.FourCallerRoundTrip
	}
	if err := cfg.scenario.Validate(); err != nil { // the flags' own checks make this unreachable
		return usageErr("%v", err)
	}
	return cfg, -1
}

func checkStrategyName(name string) error {
	_, err := labkit.ParseStrategy(name, labkit.StrategyOptions{})
	if err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), labkit.ErrInvalid.Error()+": "))
	}
	return nil
}

func labUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, `Usage: stagger lab [flags]

Runs callers against a real HTTP gateway on 127.0.0.1 that is down for a
while, once per strategy, and counts on the receiving side: attempts,
accepted, and the peak number of attempts inside one window. With no flags it
runs four callers against a gateway down for 700 ms, "retry immediately"
against exponential backoff with full jitter (base 60 ms).

Exit status: 0 ok; 1 a check failed (a jittered strategy whose waits were all
identical, or callers and gateway disagreeing on the count); 2 bad flags;
130 interrupted (Ctrl-C).

Flags:
`)
	printFlags(w, fs, map[string]string{"strategy": "NAME", "report": "FILE", "report-axes": "shared|per-chart"})
}

func runLab(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, code := parseLab(args, stdout, stderr)
	if code >= 0 {
		return code
	}
	results := make([]*labkit.Result, 0, len(cfg.strategies))
	for _, st := range cfg.strategies {
		r, err := cfg.scenario.Run(ctx, st)
		if err != nil {
			fmt.Fprintf(stderr, "stagger lab: %s: %v\n", st.Name, err)
			return exitFail
		}
		results = append(results, r)
	}

	if cfg.json {
		if err := writeLabJSON(stdout, cfg, results); err != nil {
			fmt.Fprintf(stderr, "stagger lab: %v\n", err)
			return exitFail
		}
	} else {
		writeLabText(stdout, cfg, results)
	}
	if cfg.report != "" {
		if err := writeLabReport(cfg, results); err != nil {
			fmt.Fprintf(stderr, "stagger lab: --report %s: %v\n", cfg.report, err)
			return exitFail
		}
		if !cfg.json {
			fmt.Fprintf(stdout, "\nreport: %s\n", cfg.report)
		}
	}
	return labVerdict(stderr, results)
}

// labVerdict applies the built-in checks (labkit.Result.Check).
func labVerdict(stderr io.Writer, results []*labkit.Result) int {
	code := exitOK
	for _, r := range results {
		if err := r.Check(); err != nil {
			fmt.Fprintln(stderr, err)
			code = exitFail
		}
	}
	return code
}

func describeScenario(s labkit.Scenario) string {
	down := "never down"
	if len(s.Faults.Down) > 0 {
		down = fmt.Sprintf("down for the first %v", s.Faults.Down[0].To)
	}
	extra := ""
	if s.Faults.Capacity > 0 {
		extra = fmt.Sprintf(", at most %d in flight", s.Faults.Capacity)
	}
	lat := s.Faults.Latency.String()
	if s.RoundTrip > 0 {
		lat = fmt.Sprintf("auto (round trip %v)", s.RoundTrip)
	}
	return fmt.Sprintf("%d callers (starting over %v), gateway %s, latency %s%s, peaks in %v windows, seed %d",
		s.Callers, s.Ramp, down, lat, extra, s.Window, s.Seed)
}

func writeLabText(w io.Writer, cfg *labConfig, results []*labkit.Result) {
	fmt.Fprintf(w, "stagger lab: %s\n\n", describeScenario(cfg.scenario))
	for _, r := range results {
		_ = r.WriteLog(w, !cfg.quiet)
		fmt.Fprintln(w)
	}
	writeLabTable(w, cfg.scenario, results)
}

// writeLabTable prints the strategies side by side: labels on the left,
// one right-aligned column per strategy.
func writeLabTable(w io.Writer, s labkit.Scenario, results []*labkit.Result) {
	var rows [][]string
	row := func(label string, cell func(*labkit.Result) string) {
		r := []string{label}
		for _, res := range results {
			r = append(r, cell(res))
		}
		rows = append(rows, r)
	}
	row("", func(r *labkit.Result) string { return r.Strategy.Name })
	row("attempts received", func(r *labkit.Result) string { return fmt.Sprint(r.Gateway.Total) })
	row("accepted", func(r *labkit.Result) string { return fmt.Sprint(r.Gateway.Accepted) })
	row("rejected", func(r *labkit.Result) string { return fmt.Sprint(r.Gateway.Rejected) })
	row(fmt.Sprintf("peak per %v window", s.Window), func(r *labkit.Result) string { return fmt.Sprint(r.Gateway.Peak) })
	row("time to last acceptance", func(r *labkit.Result) string {
		if r.Gateway.Accepted == 0 {
			return "-"
		}
		return fmt.Sprintf("%dms", r.Gateway.LastAccepted/time.Millisecond)
	})
	row("attempts per logical request", func(r *labkit.Result) string {
		return fmt.Sprintf("%.1f", r.Gateway.AttemptsPerRequest())
	})
	row("most attempts by one request", func(r *labkit.Result) string { return fmt.Sprint(r.Gateway.MaxAttempts) })
	row("callers accepted", func(r *labkit.Result) string {
		return fmt.Sprintf("%d/%d", r.CallersAccepted(), len(r.Callers))
	})
	row("callers gave up", func(r *labkit.Result) string {
		gu := r.GaveUp()
		if len(gu) == 0 {
			return "0"
		}
		var parts []string
		for reason, n := range gu {
			parts = append(parts, fmt.Sprintf("%d %s", n, reason))
		}
		slices.Sort(parts)
		return strings.Join(parts, ", ")
	})
	row("distinct waits", func(r *labkit.Result) string { return fmt.Sprint(r.DistinctWaits()) })
	row("gateway latency", func(r *labkit.Result) string {
		return fmt.Sprintf("%.1fms", float64(r.Latency)/float64(time.Millisecond))
	})
	if s.RoundTrip > 0 {
		row("overhead per cycle, measured before", func(r *labkit.Result) string {
			return fmt.Sprintf("%.1fms", float64(r.Overhead)/float64(time.Millisecond))
		})
	}
	row("overhead per cycle, observed", func(r *labkit.Result) string {
		return fmt.Sprintf("%.1fms", float64(r.ObservedOverhead())/float64(time.Millisecond))
	})
	row("caller/gateway counts agree", func(r *labkit.Result) string {
		if r.Agree() {
			return "yes"
		}
		return "NO"
	})
	widths := make([]int, len(rows[0]))
	for _, r := range rows {
		for i, c := range r {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	for _, r := range rows {
		b.Reset()
		for i, c := range r {
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c))
			if i == 0 {
				b.WriteString(c + pad)
			} else {
				b.WriteString("   " + pad + c)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}

// writeLabReport writes the HTML report; the subtitle records how the run
// was made.
func writeLabReport(cfg *labConfig, results []*labkit.Result) error {
	cmdline := strings.TrimSpace("stagger lab " + strings.Join(cfg.args, " "))
	sub := cmdline + " — " + time.Now().Format("2006-01-02 15:04:05 MST")
	return labkit.WriteReportFile(cfg.report, sub, results, cfg.reportOpts)
}

// labJSON is the object `stagger lab --json` prints.
type labJSON struct {
	WindowMS    int64            `json:"window_ms"`
	Callers     int              `json:"callers"`
	OutageMS    int64            `json:"outage_ms"`
	LatencyMS   float64          `json:"latency_ms"`
	RoundTripMS float64          `json:"round_trip_ms"`
	RampMS      int64            `json:"ramp_ms"`
	Capacity    int              `json:"capacity"`
	MaxAttempts int              `json:"max_attempts"`
	Seed        uint64           `json:"seed"`
	Strategies  []labkit.Summary `json:"strategies"`
}

func writeLabJSON(w io.Writer, cfg *labConfig, results []*labkit.Result) error {
	s := cfg.scenario
	out := labJSON{
		WindowMS:    int64(s.Window / time.Millisecond),
		Callers:     s.Callers,
		LatencyMS:   float64(s.Faults.Latency) / float64(time.Millisecond),
		RoundTripMS: float64(s.RoundTrip) / float64(time.Millisecond),
		RampMS:      int64(s.Ramp / time.Millisecond),
		Capacity:    s.Faults.Capacity,
		MaxAttempts: s.MaxAttempts,
		Seed:        s.Seed,
		Strategies:  make([]labkit.Summary, len(results)),
	}
	if len(s.Faults.Down) > 0 {
		out.OutageMS = int64(s.Faults.Down[0].To / time.Millisecond)
	}
	for i, r := range results {
		out.Strategies[i] = r.Summary(!cfg.quiet)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
