package check

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Threshold is a limit on a measure of what a policy did. Make one with
// [MaxAmplification], [MaxPeakPerWindow], [RecoversWithin],
// [NotMetastable] or [AtMost].
type Threshold struct {
	// Measure names what is limited ("amplification", "peak per window",
	// "recovery", "metastable", "load vs <baseline>").
	Measure string
	// Limit is the limit as text ("1.3", "40 attempts", "5s").
	Limit string
	eval  func(r *Result, p *PolicyResult) Verdict
	err   error
}

// Verdict is one threshold applied to one policy's result.
type Verdict struct {
	Policy  string
	Measure string
	Limit   string
	Value   string
	// Window is the window in which the limit was exceeded (or came
	// closest), "" when the measure is not per window.
	Window string
	OK     bool
}

// String says what the verdict is, in one line.
func (v Verdict) String() string {
	s := fmt.Sprintf("%s: %s %s", v.Policy, v.Measure, v.Value)
	if v.OK {
		s += " within " + v.Limit
	} else {
		s += " exceeds " + v.Limit
	}
	if v.Window != "" {
		s += " (window " + v.Window + ")"
	}
	return s
}

// span names the window [from, from+width), to the 0.1 ms.
func span(from, width time.Duration) string {
	return fmt.Sprintf("[%v, %v)", from.Round(100*time.Microsecond), (from + width).Round(100*time.Microsecond))
}

func badThreshold(measure, format string, a ...any) Threshold {
	return Threshold{Measure: measure, err: fmt.Errorf("%w: %s: %s", ErrInvalid, measure, fmt.Sprintf(format, a...))}
}

// MaxAmplification limits attempts per logical request over the whole
// run; a failure names the first window by whose end the attempts so far
// per request so far passed the limit.
func MaxAmplification(x float64) Threshold {
	if !finite(x) || x < 1 {
		return badThreshold("amplification", "the limit must be a finite number >= 1, got %v", x)
	}
	lim := fmt.Sprintf("%.3g", x)
	return Threshold{Measure: "amplification", Limit: lim, eval: func(r *Result, p *PolicyResult) Verdict {
		v := Verdict{Measure: "amplification", Limit: lim, Value: fmt.Sprintf("%.3f", p.Amplification), OK: p.Amplification <= x}
		if !v.OK {
			var att, req int64
			for _, w := range p.Windows {
				att, req = att+w.Attempts, req+w.Requests
				if req > 0 && float64(att) > x*float64(req) {
					v.Window = fmt.Sprintf("%s: %d attempts for %d requests so far", span(w.Start, r.Window), att, req)
					break
				}
			}
		}
		return v
	}}
}

// MaxPeakPerWindow limits the most attempts the dependency receives in
// any window of the experiment's width.
func MaxPeakPerWindow(n int) Threshold {
	if n < 1 {
		return badThreshold("peak per window", "the limit must be >= 1 attempt, got %d", n)
	}
	lim := fmt.Sprintf("%d attempts", n)
	return Threshold{Measure: "peak per window", Limit: lim, eval: func(r *Result, p *PolicyResult) Verdict {
		return Verdict{Measure: "peak per window", Limit: lim, Value: fmt.Sprintf("%d attempts", p.Peak),
			Window: span(max(0, p.PeakAt-r.Window), r.Window), OK: p.Peak <= n}
	}}
}

// RecoversWithin limits the time from the fault's end until goodput is
// back (see PolicyResult.Recovered); a policy that never recovered fails.
func RecoversWithin(d time.Duration) Threshold {
	if d < 0 {
		return badThreshold("recovery", "the limit must be >= 0, got %v", d)
	}
	lim := d.String()
	return Threshold{Measure: "recovery", Limit: lim, eval: func(r *Result, p *PolicyResult) Verdict {
		v := Verdict{Measure: "recovery", Limit: lim, OK: p.Recovered && p.Recovery <= d}
		if p.Recovered {
			v.Value = p.Recovery.String()
			if p.Recovery > 0 {
				v.Window = span(r.FaultEnd, p.Recovery)
			}
		} else {
			v.Value = "never"
			v.Window = span(r.FaultEnd, r.Duration-r.FaultEnd)
		}
		return v
	}}
}

// NotMetastable fails a policy whose run ended still failing: goodput not
// back by the end (open loop), or callers still unfinished (closed loop).
func NotMetastable() Threshold {
	return Threshold{Measure: "metastable", Limit: "recovered by the end", eval: func(r *Result, p *PolicyResult) Verdict {
		v := Verdict{Measure: "metastable", Limit: "recovered by the end", Value: "recovered", OK: !p.Metastable}
		if p.Metastable {
			v.Value = fmt.Sprintf("still failing at the end (%d unfinished)", p.Unfinished)
			last := len(p.Windows) - 1
			if last >= 0 {
				v.Window = span(p.Windows[last].Start, r.Window)
			}
		}
		return v
	}}
}

// AtMost limits each policy's load relative to the policy named baseline
// in the same experiment (the policy on the main branch, say): its
// attempts and its peak per window must each be at most factor times the
// baseline's. The baseline itself passes.
func AtMost(factor float64, baseline string) Threshold {
	measure := "load vs " + baseline
	if !finite(factor) || factor <= 0 {
		return badThreshold(measure, "the factor must be a finite number > 0, got %v", factor)
	}
	lim := fmt.Sprintf("%.3g× %s", factor, baseline)
	return Threshold{Measure: measure, Limit: lim, eval: func(r *Result, p *PolicyResult) Verdict {
		v := Verdict{Measure: measure, Limit: lim}
		b := r.Policy(baseline)
		switch {
		case b == nil:
			v.Value = "no policy named " + baseline
			return v
		case b.Name == p.Name:
			v.Value, v.OK = "the baseline", true
			return v
		}
		ra := ratio(p.Attempts, b.Attempts)
		rp := ratio(int64(p.Peak), int64(b.Peak))
		v.OK = ra <= factor && rp <= factor
		v.Value = fmt.Sprintf("%.2f× attempts (%d vs %d), %.2f× peak (%d vs %d)", ra, p.Attempts, b.Attempts, rp, p.Peak, b.Peak)
		if rp > factor {
			v.Window = span(max(0, p.PeakAt-r.Window), r.Window)
		}
		return v
	}}
}

func ratio(a, b int64) float64 {
	if b == 0 {
		if a == 0 {
			return 1
		}
		return math.Inf(1)
	}
	return float64(a) / float64(b)
}

// Evaluate applies every threshold to every policy's result, policy by
// policy. It returns an error naming a threshold made with a bad limit.
func (r *Result) Evaluate(ths ...Threshold) ([]Verdict, error) {
	var errs []error
	for _, th := range ths {
		if th.err != nil {
			errs = append(errs, th.err)
		} else if th.eval == nil {
			errs = append(errs, fmt.Errorf("%w: a zero Threshold; make one with check.MaxAmplification, …", ErrInvalid))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	var vs []Verdict
	for i := range r.Policies {
		p := &r.Policies[i]
		for _, th := range ths {
			v := th.eval(r, p)
			v.Policy = p.Name
			vs = append(vs, v)
		}
	}
	return vs, nil
}

// ReportDirEnv names the environment variable that, when set, is the
// directory where Check writes its reports.
const ReportDirEnv = "STAGGER_CHECK_DIR"

// ReportDir returns where Check writes the report of tb's test: $STAGGER_CHECK_DIR
// when set; the test's artifact directory when go test runs with
// -artifacts (under -outputdir); otherwise stagger-check in the system's
// temporary directory, which outlives the test.
func ReportDir(tb testing.TB) string {
	if d := os.Getenv(ReportDirEnv); d != "" {
		return d
	}
	if f := flag.Lookup("test.artifacts"); f != nil && f.Value.String() == "true" {
		if a, ok := tb.(interface{ ArtifactDir() string }); ok { // Go 1.26's testing
			return a.ArtifactDir()
		}
	}
	return filepath.Join(os.TempDir(), "stagger-check")
}

// Check applies the thresholds in a test: every verdict that fails is
// reported with tb.Errorf, naming the policy, the measure, the limit, the
// value, the window, the clock and the seed; the HTML report is then
// written to ReportDir(tb) and its path printed. It returns whether every
// threshold held.
func (r *Result) Check(tb testing.TB, ths ...Threshold) bool {
	tb.Helper()
	vs, err := r.Evaluate(ths...)
	if err != nil {
		tb.Fatal(err)
		return false
	}
	ok := true
	for _, v := range vs {
		if v.OK {
			continue
		}
		ok = false
		tb.Errorf("check %s (%s time, seed %d): %s", r.name(), r.Clock, r.Seed, v)
	}
	if !ok {
		dir := ReportDir(tb)
		name := strings.Map(func(c rune) rune {
			if c == '/' || c == '\\' || c == ' ' || c == ':' {
				return '_'
			}
			return c
		}, tb.Name())
		path := filepath.Join(dir, fmt.Sprintf("%s-%s-seed%d.html", name, r.Clock, r.Seed))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			tb.Errorf("check: cannot write the report: %v", err)
		} else if err := r.WriteReport(path, vs); err != nil {
			tb.Errorf("check: cannot write the report: %v", err)
		} else {
			tb.Logf("check: report written to %s", path)
		}
	}
	return ok
}

func (r *Result) name() string {
	if r.Experiment.Name == "" {
		return "experiment"
	}
	return r.Experiment.Name
}
