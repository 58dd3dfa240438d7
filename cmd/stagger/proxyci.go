package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/staggerhq/stagger/internal/faultproxy"
)

// threshold is one --max-… check at exit.
type threshold struct {
	Flag  string   `json:"flag"`
	Limit float64  `json:"limit"`
	Value *float64 `json:"value"` // null: not measurable (no attempt carried the grouping key)
	OK    bool     `json:"ok"`
}

// checkThresholds checks the --max-… flags against s; failures say what
// was seen.
func checkThresholds(cfg *proxyConfig, s faultproxy.Stats) ([]threshold, []string) {
	var out []threshold
	var failed []string
	check := func(flag string, limit float64, value *float64, what string) {
		if limit <= 0 {
			return
		}
		t := threshold{Flag: flag, Limit: limit, Value: value, OK: value != nil && *value <= limit}
		out = append(out, t)
		switch {
		case value == nil:
			failed = append(failed, fmt.Sprintf("%s %g: %s is not available (no attempt carried %s)", flag, limit, what, cfg.group))
		case !t.OK:
			failed = append(failed, fmt.Sprintf("%s %g: %s was %g", flag, limit, what, *value))
		}
	}
	peak := float64(s.Peak)
	check("--max-peak", float64(cfg.maxPeak), &peak, fmt.Sprintf("the peak in one %v window", cfg.window))
	if !cfg.tcp {
		var amp, most *float64
		if s.AttemptsPerRequest != nil {
			a, m := math.Round(*s.AttemptsPerRequest*10000)/10000, float64(*s.MaxAttempts)
			amp, most = &a, &m
		}
		check("--max-amplification", cfg.maxAmplification, amp, "attempts per request")
		check("--max-attempts", float64(cfg.maxAttempts), most, "the most attempts by one request")
	}
	return out, failed
}

// proxySummary is the --summary file: the stats in the shape of GET
// /stats (faultproxy.Stats), less what changes from run to run (the
// address, times, what is in flight, the windows), so two runs diff; plus
// each threshold and whether the run passed.
type proxySummary struct {
	faultproxy.Stats
	// These hide the Stats fields of the same JSON names: always nil, they
	// are left out.
	Listen        *struct{} `json:"listen,omitempty"`
	UptimeMS      *struct{} `json:"uptime_ms,omitempty"`
	PeakAtMS      *struct{} `json:"peak_at_ms,omitempty"`
	InFlight      *struct{} `json:"in_flight,omitempty"`
	PeakBytesAtMS *struct{} `json:"peak_bytes_at_ms,omitempty"`
	Timeline      *struct{} `json:"timeline,omitempty"`

	Thresholds []threshold `json:"thresholds"`
	Passed     bool        `json:"passed"`
}

func summarize(s faultproxy.Stats, ths []threshold, passed bool) proxySummary {
	out := proxySummary{Stats: s, Thresholds: ths, Passed: passed}
	if out.Thresholds == nil {
		out.Thresholds = []threshold{}
	}
	if s.AttemptsPerRequest != nil { // to 4 decimals: the same on every machine
		a := math.Round(*s.AttemptsPerRequest*10000) / 10000
		out.AttemptsPerRequest = &a
	}
	if s.Kind == "tcp" {
		out.ByAttempt = nil // connections carry no attempt numbers
	}
	return out
}

// finishCI checks the thresholds, writes --summary and prints each
// threshold exceeded; it reports whether the run passed and whether the
// summary was written.
func finishCI(cfg *proxyConfig, s faultproxy.Stats, stdout, stderr io.Writer) (passed, ok bool) {
	ths, failed := checkThresholds(cfg, s)
	for _, f := range failed {
		fmt.Fprintf(stderr, "stagger proxy: threshold exceeded: %s\n", f)
	}
	passed = len(failed) == 0
	if cfg.summary == "" {
		return passed, true
	}
	b, _ := json.MarshalIndent(summarize(s, ths, passed), "", "  ")
	if err := writeFileAtomic(cfg.summary, append(b, '\n')); err != nil {
		fmt.Fprintf(stderr, "stagger proxy: --summary %s: %v\n", cfg.summary, err)
		return passed, false
	}
	if !cfg.quiet {
		fmt.Fprintf(stdout, "summary: %s\n", cfg.summary)
	}
	return passed, true
}

// writeFileAtomic writes b to a temporary file next to path and renames
// it into place: path never holds half a summary.
func writeFileAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".stagger-summary-*")
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// runTCPProxy is `stagger proxy --upstream tcp://host:port`: a TCP relay
// with run-time faults, counting connections and bytes.
func runTCPProxy(ctx context.Context, cfg *proxyConfig, stdout, stderr io.Writer) int {
	p, err := faultproxy.StartTCP(faultproxy.Config{Name: cfg.name, Listen: cfg.listen, Upstream: cfg.upstream.Host, Kind: "tcp", Window: cfg.window})
	if err != nil {
		fmt.Fprintf(stderr, "stagger proxy: --listen %s: %v\n", cfg.listen, strings.TrimPrefix(err.Error(), faultproxy.ErrBadRequest.Error()+": "))
		return exitUsage
	}
	defer p.Close()
	for _, f := range cfg.runtime {
		p.Faults().Add(f) // parseProxy added them to a set of its own: they fit
	}
	ctlAddr := ""
	if cfg.control != "" {
		stop, bound, err := startControl(cfg.control, p, cfg.window)
		if err != nil {
			fmt.Fprintf(stderr, "stagger proxy: --control %s: %v\n", cfg.control, err)
			return exitUsage
		}
		defer stop()
		ctlAddr = bound
	}
	if !cfg.quiet {
		fmt.Fprintf(stdout, "stagger proxy: relaying tcp://%s -> %s\n", p.Addr(), cfg.upstream.Host)
		if ctlAddr != "" {
			fmt.Fprintln(stdout, controlLine(ctlAddr))
		}
		if len(cfg.runtime) > 0 {
			fmt.Fprintf(stdout, "faults: %s\n", strings.Join(p.Faults().Clauses(), "; "))
		}
	}
	var stop <-chan time.Time
	if cfg.duration > 0 {
		t := time.NewTimer(cfg.duration)
		defer t.Stop()
		stop = t.C
	}
	select {
	case <-ctx.Done():
	case <-stop:
	}
	p.Close() // every connection closed and counted
	s := p.Stats(false)
	fmt.Fprintf(stdout, "stagger proxy: %d connections, %d accepted, %d dropped, %d failed, peak %d in %v; %d bytes up, %d down, peak %d bytes in one window\n",
		s.Total, s.Accepted, s.Dropped, s.Failed, s.Peak, cfg.window, s.BytesUp, s.BytesDown, s.PeakBytes)
	passed, ok := finishCI(cfg, s, stdout, stderr)
	if !passed || !ok {
		return exitFail
	}
	return exitOK
}
