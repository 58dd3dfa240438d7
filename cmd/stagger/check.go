package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/staggerhq/stagger/check"
)

func init() {
	register(command{Name: "check", Summary: "put your retry policy through an outage; fail a CI job on the load it sends", Run: runCheck})
}

func checkUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintln(w, "Usage: stagger check --policy FILE [--policy FILE]... [--fault CLAUSE]... [thresholds] [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Runs each policy through an experiment (by default the lab's outage: 4 callers,")
	fmt.Fprintln(w, "a dependency down for 700 ms) in virtual time, or in real time with --real, and")
	fmt.Fprintln(w, "checks what the dependency received against the thresholds. Exit 0: every")
	fmt.Fprintln(w, "threshold holds; 1: one fails; 2: bad usage or input.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "A policy file is JSON with retry.Policy's fields (docs/check.md), or a gRPC")
	fmt.Fprintln(w, "service config (methodConfig.retryPolicy, retryThrottling).")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Flags:")
	printFlags(w, fs, map[string]string{"policy": "FILE", "fault": "CLAUSE", "report": "FILE", "junit": "FILE", "refusal": "KIND", "baseline": "NAME", "experiment": "FILE", "replay": "FILE",
		"rate": "X", "dep-rate": "X", "max-amplification": "X", "max-load": "X", "tolerance": "X"})
}

// floatValue is a finite number >= min (> min when open) and, when max
// is not 0, <= max.
type floatValue struct {
	p    *float64
	min  float64
	open bool
	max  float64
}

func (v floatValue) String() string {
	if v.p == nil {
		return ""
	}
	return strconv.FormatFloat(*v.p, 'g', -1, 64)
}

func (v floatValue) Set(s string) error {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	switch {
	case err != nil || math.IsNaN(f) || math.IsInf(f, 0):
		return errors.New("want a finite number")
	case v.open && f <= v.min:
		return fmt.Errorf("must be > %v, got %v", v.min, f)
	case f < v.min:
		return fmt.Errorf("must be >= %v, got %v", v.min, f)
	case v.max != 0 && f > v.max:
		return fmt.Errorf("must be <= %v, got %v", v.max, f)
	}
	*v.p = f
	return nil
}

type checkConfig struct {
	policies   []string
	faults     []string
	exp        check.Experiment
	real       bool
	thresholds []check.Threshold
	json       bool
	report     string
	junit      string
}

func parseCheck(args []string, stdout, stderr io.Writer) (*checkConfig, int) {
	const name = "stagger check"
	cfg := &checkConfig{exp: check.LabOutage()}
	f := newCheckFlags(cfg)
	if code, ok := parseFlags(f.fs, args, stdout, stderr, func(w io.Writer) { checkUsage(w, f.fs) }); !ok {
		return nil, code
	}
	if err := f.configure(cfg); err != nil {
		return nil, usageError(stderr, name, "%v", err)
	}
	return cfg, exitOK
}

// checkFlags holds the values of stagger check's flags that do not go
// straight into checkConfig, until configure turns them into the
// experiment.
type checkFlags struct {
	fs                                           *flag.FlagSet
	callers, requests, concurrency, maxPeak      int
	rate, depRate, maxAmp, tolerance, loadFactor float64
	constant, queue, notMetastable               bool
	ramp, think, latency, latencyExp, perFlight  time.Duration
	retryAfter, hang, duration, window, recover  time.Duration
	refusal, baseline, expFile, replay           string
	seed                                         uint64
}

// newCheckFlags defines stagger check's flags; their defaults are the
// lab's outage in cfg.
func newCheckFlags(cfg *checkConfig) *checkFlags {
	fs := flag.NewFlagSet("stagger check", flag.ContinueOnError)
	f := &checkFlags{fs: fs, seed: cfg.exp.Seed}
	const maxDur = 24 * time.Hour
	fs.Var(&faultList{p: &cfg.policies}, "policy", "a policy file (JSON: retry.Policy's fields, or a gRPC service config); repeat to compare policies side by side")
	fs.Var(&faultList{p: &cfg.faults}, "fault", "fault clause(s), repeatable, ';'-separated: "+faultGrammar+" (default: down 700ms at 0s)")
	fs.Var(intValue{P: &f.callers, Min: 1, Max: 1_000_000}, "callers", "closed loop: this many callers (default 4, the lab's)")
	fs.Var(intValue{P: &f.requests, Min: 1, Max: 1_000_000}, "requests", "closed loop: logical requests per caller (default 1)")
	fs.Var(durationValue{P: &f.think, Max: maxDur}, "think", "closed loop: pause between a caller's requests")
	fs.Var(floatValue{p: &f.rate, min: 0, open: true}, "rate", "open loop: logical requests per second (replaces --callers)")
	fs.BoolVar(&f.constant, "constant", false, "open loop: constant gaps instead of Poisson arrivals")
	fs.Var(durationValue{P: &f.ramp, Max: maxDur}, "ramp", "spread the start over this long (default 48ms, the lab's)")
	fs.Var(durationValue{P: &f.latency, Max: maxDur}, "latency", "the dependency's latency (default 26.2ms, the lab's round trip)")
	fs.Var(durationValue{P: &f.latencyExp, Max: maxDur}, "latency-exp", "mean of an exponential extra latency (a distribution)")
	fs.Var(durationValue{P: &f.perFlight, Max: maxDur}, "per-in-flight", "latency added per attempt in flight (the collapse model: 10ms with --latency 1s)")
	fs.Var(intValue{P: &f.concurrency, Min: 0, Max: 1 << 30}, "concurrency", "attempts in flight the dependency serves; more are refused, or wait with --queue (0: no cap)")
	fs.Var(floatValue{p: &f.depRate, min: 0}, "dep-rate", "attempts per second the dependency serves (0: no cap)")
	fs.BoolVar(&f.queue, "queue", false, "over --concurrency or --dep-rate, attempts wait their turn instead of being refused")
	fs.StringVar(&f.refusal, "refusal", "503", "how the dependency refuses: 503, retry-after, timeout or drop")
	fs.Var(durationValue{P: &f.retryAfter, Max: maxDur}, "retry-after", "the Retry-After of --refusal retry-after (default 1s)")
	fs.Var(durationValue{P: &f.hang, Max: maxDur}, "hang", "how long --refusal timeout holds an attempt (default 30s)")
	fs.Var(durationValue{P: &f.duration, Max: maxDur}, "duration", "how long the run lasts (default: until the callers are done, or for an open loop twice the fault's end + 2s)")
	fs.Var(durationValue{P: &f.window, Positive: true, Max: time.Hour}, "window", "width of a window (default 200ms)")
	fs.Var(uintValue{P: &f.seed}, "seed", "seed of the run")
	fs.Var(floatValue{p: &f.tolerance, min: 0}, "tolerance", "goodput within this fraction of its level before the fault counts as recovered (default 0.2)")
	fs.StringVar(&f.replay, "replay", "", "replay a recorded outage instead of --fault, --rate and --callers: stagger proxy --record's JSON lines, or a CSV export (a name ending in .csv); virtual time")
	fs.BoolVar(&cfg.real, "real", false, "run in real time on a loopback gateway instead of the simulator")
	fs.Var(floatValue{p: &f.maxAmp, min: 1}, "max-amplification", "threshold: attempts per logical request")
	fs.Var(intValue{P: &f.maxPeak, Min: 1, Max: math.MaxInt32}, "max-peak", "threshold: attempts received in any window")
	fs.Var(durationValue{P: &f.recover, Max: maxDur}, "recover-within", "threshold: time from the fault's end until goodput is back")
	fs.BoolVar(&f.notMetastable, "not-metastable", false, "threshold: the run must not end still failing")
	fs.StringVar(&f.baseline, "baseline", "", "threshold with --max-load: the policy (by name) the others are compared with")
	fs.Var(floatValue{p: &f.loadFactor, min: 0, open: true}, "max-load", "threshold: attempts and peak at most this times --baseline's")
	fs.BoolVar(&cfg.json, "json", false, "print the result as JSON")
	fs.StringVar(&cfg.report, "report", "", "write the HTML report to this file")
	fs.StringVar(&cfg.junit, "junit", "", "write a JUnit XML file: one test case per policy × threshold")
	fs.StringVar(&f.expFile, "experiment", "", "a JSON object of these flags' settings, keyed by flag name (\"rate\": 200, \"fault\": [\"down 5s at 5s\"], \"max-peak\": 80); the command line wins")
	return f
}

func (f *checkFlags) set(name string) bool { return flagWasSet(f.fs, name) }

// configure turns the parsed flags into cfg's experiment and thresholds:
// the --experiment file's settings first, then the rules between flags,
// the load, the dependency, the thresholds, the output files and the
// policies; the experiment's own checks last.
func (f *checkFlags) configure(cfg *checkConfig) error {
	if f.expFile != "" {
		if err := applyExperimentFile(f.fs, f.expFile); err != nil {
			return fmt.Errorf("--experiment %s: %v", f.expFile, err)
		}
	}
	if len(cfg.policies) == 0 {
		return errors.New("--policy FILE is required")
	}
	if err := f.checkCombinations(); err != nil {
		return err
	}
	e := &cfg.exp
	if err := f.setLoad(cfg); err != nil {
		return err
	}
	if err := f.setDependency(&e.Dependency); err != nil {
		return err
	}
	e.Duration, e.Seed, e.Tolerance = f.duration, f.seed, f.tolerance
	if f.set("window") {
		e.Window = f.window
	}
	f.addThresholds(cfg)
	if err := checkOutputPaths(cfg); err != nil {
		return err
	}
	if err := f.loadPolicies(cfg); err != nil {
		return err
	}
	return e.Validate()
}

// checkCombinations checks the flags that need or exclude one another.
func (f *checkFlags) checkCombinations() error {
	set := f.set
	switch {
	case set("baseline") != set("max-load"):
		return errors.New("--baseline and --max-load go together")
	case set("rate") && set("callers"):
		return errors.New("--rate (open loop) and --callers (closed loop) exclude each other")
	case set("constant") && !set("rate"):
		return errors.New("--constant needs --rate")
	case set("replay") && (set("fault") || set("rate") || set("callers")):
		return errors.New("--replay excludes --fault, --rate and --callers: a replay's callers and faults are the recording's")
	case set("queue") && !set("dep-rate") && !set("concurrency"):
		return errors.New("--queue needs --concurrency or --dep-rate")
	}
	return nil
}

// setLoad sets the faults and the callers, or the recording a replay
// takes both from.
func (f *checkFlags) setLoad(cfg *checkConfig) error {
	e := &cfg.exp
	if len(cfg.faults) > 0 {
		if _, err := parseFaults(cfg.faults); err != nil {
			return err
		}
		e.Faults = cfg.faults
		e.Name = "stagger check"
	}
	if f.set("rate") {
		e.Callers = check.Callers{Rate: f.rate, Poisson: !f.constant}
		e.Name = "stagger check"
	}
	if f.set("callers") {
		e.Callers = check.Callers{N: f.callers}
		e.Name = "stagger check"
	}
	if f.set("ramp") {
		e.Callers.Ramp = f.ramp
	}
	e.Callers.Requests, e.Callers.Think = f.requests, f.think
	if f.replay != "" {
		rec, err := readRecording(f.replay)
		if err != nil {
			return fmt.Errorf("--replay %s: %v", f.replay, err)
		}
		e.Name, e.Replay, e.Faults, e.Callers = "replay of "+filepath.Base(f.replay), rec, nil, check.Callers{}
	}
	return nil
}

// checkRefusals maps --refusal's names to the dependency's refusals.
var checkRefusals = map[string]check.Refusal{"503": check.Status503, "retry-after": check.RetryAfter, "timeout": check.Timeout, "drop": check.Drop}

// setDependency sets the dependency's model.
func (f *checkFlags) setDependency(d *check.Dependency) error {
	if f.set("latency") {
		d.Latency = f.latency
	}
	d.LatencyExp, d.PerInFlight, d.Concurrency, d.Rate, d.RetryAfter, d.Hang = f.latencyExp, f.perFlight, f.concurrency, f.depRate, f.retryAfter, f.hang
	if f.queue {
		d.Overload = check.Queue
	}
	refusal, ok := checkRefusals[f.refusal]
	if !ok {
		return fmt.Errorf("--refusal: want 503, retry-after, timeout or drop, got %q", f.refusal)
	}
	if refusal != check.Status503 { // 503, the default, keeps the experiment's own
		d.Refusal = refusal
	}
	return nil
}

// addThresholds adds a threshold for each threshold flag given.
func (f *checkFlags) addThresholds(cfg *checkConfig) {
	if f.set("max-amplification") {
		cfg.thresholds = append(cfg.thresholds, check.MaxAmplification(f.maxAmp))
	}
	if f.set("max-peak") {
		cfg.thresholds = append(cfg.thresholds, check.MaxPeakPerWindow(f.maxPeak))
	}
	if f.set("recover-within") {
		cfg.thresholds = append(cfg.thresholds, check.RecoversWithin(f.recover))
	}
	if f.notMetastable {
		cfg.thresholds = append(cfg.thresholds, check.NotMetastable())
	}
	if f.set("max-load") {
		cfg.thresholds = append(cfg.thresholds, check.AtMost(f.loadFactor, f.baseline))
	}
}

// checkOutputPaths checks the files --report and --junit would write.
func checkOutputPaths(cfg *checkConfig) error {
	for _, p := range []struct{ flag, path string }{{"report", cfg.report}, {"junit", cfg.junit}} {
		if p.path == "" {
			continue
		}
		if err := checkReportPath(p.path); err != nil {
			return fmt.Errorf("--%s: %v", p.flag, err)
		}
	}
	return nil
}

// loadPolicies reads every --policy file, and checks that --baseline names
// one of them.
func (f *checkFlags) loadPolicies(cfg *checkConfig) error {
	e := &cfg.exp
	for _, path := range cfg.policies {
		pol, err := loadPolicy(path)
		if err != nil {
			return fmt.Errorf("--policy %s: %v", path, err)
		}
		e.Policies = append(e.Policies, pol)
	}
	if f.set("baseline") && !hasPolicy(e.Policies, f.baseline) {
		return fmt.Errorf("--baseline %q: no policy of that name (names: %s)", f.baseline, policyNames(e.Policies))
	}
	return nil
}

// applyExperimentFile sets the flags an --experiment file names (a JSON
// object keyed by flag name) and the command line did not set, each through
// its flag's own rule: a number flag takes a JSON number, a switch true or
// false, a duration or a name a string, --policy and --fault a string or
// an array of strings (a policy file's path is relative to the
// experiment file's directory).
func applyExperimentFile(fs *flag.FlagSet, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxPolicyFile+1))
	if err != nil {
		return err
	}
	if len(b) > maxPolicyFile {
		return fmt.Errorf("the file is larger than %d bytes", maxPolicyFile)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var m map[string]json.RawMessage
	if err := dec.Decode(&m); err != nil {
		return jsonError(err)
	}
	if m == nil {
		return errors.New("want a JSON object of flag settings")
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fl := fs.Lookup(k)
		if fl == nil || k == "experiment" {
			return fmt.Errorf("unknown field %q (want the name of a stagger check flag, such as \"rate\" or \"max-peak\")", k)
		}
		if flagWasSet(fs, k) {
			continue // the command line wins
		}
		vals, err := experimentValues(fl, m[k])
		if err != nil {
			return fmt.Errorf("%s: %v", k, err)
		}
		for _, v := range vals {
			if k == "policy" && !filepath.IsAbs(v) {
				v = filepath.Join(filepath.Dir(path), v)
			}
			if err := fs.Set(k, v); err != nil {
				return fmt.Errorf("%s: %v", k, err)
			}
		}
	}
	return nil
}

// experimentValues returns the flag values of one --experiment field,
// checking its JSON type against the flag's kind.
func experimentValues(fl *flag.Flag, raw json.RawMessage) ([]string, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, jsonError(err)
	}
	kind := func(v any) string {
		switch v.(type) {
		case bool:
			return "a boolean"
		case json.Number:
			return "a number"
		case string:
			return "a string"
		case []any:
			return "an array"
		case nil:
			return "null"
		}
		return "an object"
	}
	if bf, ok := fl.Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
		b, ok := v.(bool)
		if !ok {
			return nil, fmt.Errorf("want true or false, got %s", kind(v))
		}
		return []string{strconv.FormatBool(b)}, nil
	}
	switch fl.Value.(type) {
	case intValue, uintValue, floatValue:
		n, ok := v.(json.Number)
		if !ok {
			return nil, fmt.Errorf("want a number, got %s", kind(v))
		}
		return []string{n.String()}, nil
	case *faultList:
		if s, ok := v.(string); ok {
			return []string{s}, nil
		}
		arr, ok := v.([]any)
		if !ok {
			return nil, fmt.Errorf("want a string or an array of strings, got %s", kind(v))
		}
		out := make([]string, 0, len(arr))
		for i, e := range arr {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("[%d]: want a string, got %s", i, kind(e))
			}
			out = append(out, s)
		}
		return out, nil
	}
	s, ok := v.(string)
	if !ok {
		return nil, fmt.Errorf("want a string, got %s", kind(v))
	}
	return []string{s}, nil
}

// readRecording reads a --replay file: CSV when its name ends in .csv
// (windows as wide as the smallest gap between rows), else the JSON lines
// of stagger proxy --record.
func readRecording(path string) (*check.Recording, error) {
	if !strings.EqualFold(filepath.Ext(path), ".csv") {
		return check.ReadRecording(path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return check.ReadRecordingCSV(f, 0)
}

func hasPolicy(ps []check.Policy, name string) bool {
	for _, p := range ps {
		if p.Name == name {
			return true
		}
	}
	return false
}

func policyNames(ps []check.Policy) string {
	var names []string
	for _, p := range ps {
		names = append(names, strconv.Quote(p.Name))
	}
	return strings.Join(names, ", ")
}

func runCheck(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, code := parseCheck(args, stdout, stderr)
	if cfg == nil {
		return code
	}
	run := check.Run
	if cfg.real {
		run = check.RunReal
	}
	res, err := run(ctx, cfg.exp)
	if err != nil {
		if errors.Is(err, check.ErrInvalid) {
			return usageError(stderr, "stagger check", "%v", err)
		}
		fmt.Fprintf(stderr, "stagger check: %v\n", err)
		return exitFail
	}
	if len(res.Policies) == 0 {
		return usageError(stderr, "stagger check", "no policy can run here: %s", strings.Join(res.Skipped, "; "))
	}
	vs, err := res.Evaluate(cfg.thresholds...)
	if err != nil {
		return usageError(stderr, "stagger check", "%v", err)
	}
	ok := true
	for _, v := range vs {
		ok = ok && v.OK
	}
	if cfg.report != "" {
		if err := res.WriteReport(cfg.report, vs); err != nil {
			fmt.Fprintf(stderr, "stagger check: --report: %v\n", err)
			return exitFail
		}
	}
	if cfg.junit != "" {
		if err := writeAtomic(cfg.junit, func(w io.Writer) error { return writeJUnit(w, res, vs) }); err != nil {
			fmt.Fprintf(stderr, "stagger check: --junit: %v\n", err)
			return exitFail
		}
	}
	if cfg.json {
		if err := writeCheckJSON(stdout, res, vs, ok); err != nil {
			fmt.Fprintf(stderr, "stagger check: %v\n", err)
			return exitFail
		}
	} else {
		printCheck(stdout, res, vs, ok)
	}
	if !ok {
		return exitFail
	}
	return exitOK
}

func printCheck(w io.Writer, res *check.Result, vs []check.Verdict, ok bool) {
	fmt.Fprintf(w, "%s: %s time, seed %d", res.Experiment.Name, res.Clock, res.Seed)
	if len(res.Experiment.Faults) > 0 {
		fmt.Fprintf(w, ", faults: %s", strings.Join(res.Experiment.Faults, "; "))
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\trequests\tattempts\tamplification\tpeak\tgoodput/s\trecovery\tunfinished\tp99\t")
	for _, p := range res.Policies {
		rec := "never"
		if p.Recovered {
			rec = p.Recovery.Round(100 * time.Microsecond).String()
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.3f\t%d\t%.1f\t%s\t%d\t%v\t\n", p.Name, p.Requests, p.Attempts, p.Amplification, p.Peak, p.Goodput, rec, p.Unfinished, p.Latency.P99.Round(100*time.Microsecond))
	}
	tw.Flush()
	for _, s := range res.Skipped {
		fmt.Fprintln(w, "skipped:", s)
	}
	for _, v := range vs {
		mark := "ok  "
		if !v.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "%s %s\n", mark, v)
	}
	switch {
	case len(vs) == 0:
		fmt.Fprintln(w, "no thresholds given (--max-amplification, --max-peak, --recover-within, --not-metastable, --max-load)")
	case ok:
		fmt.Fprintf(w, "PASS: %d of %d thresholds hold\n", len(vs), len(vs))
	default:
		n := 0
		for _, v := range vs {
			if !v.OK {
				n++
			}
		}
		fmt.Fprintf(w, "FAIL: %d of %d thresholds fail\n", n, len(vs))
	}
}

// checkJSON is the --json output.
type checkJSON struct {
	Experiment string        `json:"experiment"`
	Clock      string        `json:"clock"`
	Seed       uint64        `json:"seed"`
	Faults     []string      `json:"faults"`
	WindowMS   float64       `json:"window_ms"`
	Policies   []policyJSON  `json:"policies"`
	Skipped    []string      `json:"skipped,omitempty"`
	Verdicts   []verdictJSON `json:"verdicts"`
	OK         bool          `json:"ok"`
}

type verdictJSON struct {
	Policy  string `json:"policy"`
	Measure string `json:"measure"`
	Limit   string `json:"limit"`
	Value   string `json:"value"`
	Window  string `json:"window,omitempty"`
	OK      bool   `json:"ok"`
}

type policyJSON struct {
	Name          string             `json:"name"`
	Requests      int64              `json:"requests"`
	Attempts      int64              `json:"attempts"`
	Accepted      int64              `json:"accepted"`
	Successes     int64              `json:"successes"`
	GaveUp        map[string]int64   `json:"gave_up"`
	Unfinished    int64              `json:"unfinished"`
	Amplification float64            `json:"amplification"`
	Peak          int                `json:"peak"`
	PeakAtMS      float64            `json:"peak_at_ms"`
	Goodput       float64            `json:"goodput_per_s"`
	Recovered     bool               `json:"recovered"`
	RecoveryMS    float64            `json:"recovery_ms"`
	Metastable    bool               `json:"metastable"`
	LatencyMS     map[string]float64 `json:"latency_ms"`
	Windows       [][5]int64         `json:"windows"` // start ms, attempts, accepted, requests, successes
}

func writeCheckJSON(w io.Writer, res *check.Result, vs []check.Verdict, ok bool) error {
	out := checkJSON{Experiment: res.Experiment.Name, Clock: res.Clock, Seed: res.Seed, Faults: res.Experiment.Faults,
		WindowMS: msOf(res.Window), Skipped: res.Skipped, Verdicts: []verdictJSON{}, OK: ok}
	for _, v := range vs {
		out.Verdicts = append(out.Verdicts, verdictJSON{Policy: v.Policy, Measure: v.Measure, Limit: v.Limit, Value: v.Value, Window: v.Window, OK: v.OK})
	}
	for _, p := range res.Policies {
		pj := policyJSON{Name: p.Name, Requests: p.Requests, Attempts: p.Attempts, Accepted: p.Accepted, Successes: p.Successes,
			GaveUp: p.GaveUp, Unfinished: p.Unfinished, Amplification: p.Amplification, Peak: p.Peak, PeakAtMS: msOf(p.PeakAt),
			Goodput: p.Goodput, Recovered: p.Recovered, RecoveryMS: msOf(p.Recovery), Metastable: p.Metastable,
			LatencyMS: map[string]float64{"p50": msOf(p.Latency.P50), "p90": msOf(p.Latency.P90), "p99": msOf(p.Latency.P99), "max": msOf(p.Latency.Max)}}
		for _, win := range p.Windows {
			pj.Windows = append(pj.Windows, [5]int64{int64(win.Start / time.Millisecond), win.Attempts, win.Accepted, win.Requests, win.Successes})
		}
		out.Policies = append(out.Policies, pj)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// JUnit XML: one test suite, one test case per policy × threshold.
type junitSuites struct {
	XMLName xml.Name   `xml:"testsuites"`
	Suites  []junitSet `xml:"testsuite"`
}

type junitSet struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Class   string        `xml:"classname,attr"`
	Name    string        `xml:"name,attr"`
	Time    string        `xml:"time,attr"`
	Failure *junitFailure `xml:"failure,omitempty"`
}

type junitFailure struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

func writeJUnit(w io.Writer, res *check.Result, vs []check.Verdict) error {
	set := junitSet{Name: "stagger check: " + res.Experiment.Name}
	for _, v := range vs {
		c := junitCase{Class: "stagger.check." + v.Policy, Name: v.Measure + " <= " + v.Limit, Time: "0"}
		if !v.OK {
			set.Failures++
			c.Failure = &junitFailure{Message: v.String(), Type: "threshold",
				Text: fmt.Sprintf("%s (%s time, seed %d): %s", res.Experiment.Name, res.Clock, res.Seed, v)}
		}
		set.Cases = append(set.Cases, c)
	}
	set.Tests = len(set.Cases)
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(junitSuites{Suites: []junitSet{set}}); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

// writeAtomic writes path through a temporary file in its directory,
// renamed into place, so a failed write leaves nothing half-written.
func writeAtomic(path string, write func(io.Writer) error) error {
	var buf bytes.Buffer
	if err := write(&buf); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(buf.Bytes())
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}
