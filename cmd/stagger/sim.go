package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/staggerhq/stagger/internal/simkit"
)

func init() {
	register(command{Name: "sim", Summary: "simulate retry storms in virtual time (stagger sim list)", Run: runSim})
}

func simUsage(w io.Writer) {
	fmt.Fprintln(w, "Usage: stagger sim list")
	fmt.Fprintln(w, "       stagger sim NAME [flags]      (stagger sim NAME --help for its flags)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Runs the shipped retry, backoff, budget and limit code in a discrete-event")
	fmt.Fprintln(w, "simulator with a virtual clock: deterministic for a --seed, no sleeping.")
	fmt.Fprintln(w)
	simList(w)
}

func simList(w io.Writer) {
	for _, s := range simkit.Scenarios() {
		fmt.Fprintf(w, "  %-12s %s\n", s.Name, s.Summary)
	}
}

func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		simUsage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "--help", "help":
		simUsage(stdout)
		return exitOK
	case "list":
		if len(args) == 2 && (args[1] == "-h" || args[1] == "--help") {
			simUsage(stdout)
			return exitOK
		}
		if len(args) > 1 {
			fmt.Fprintf(stderr, "stagger sim list: unexpected argument %q\n", args[1])
			return exitUsage
		}
		simList(stdout)
		return exitOK
	}
	sc, ok := simkit.Lookup(args[0])
	if !ok {
		fmt.Fprintf(stderr, "stagger sim: unknown scenario %q\n\n", args[0])
		simUsage(stderr)
		return exitUsage
	}
	return runScenario(ctx, sc, args[1:], stdout, stderr)
}

// simFlags are the flags every scenario has.
type simFlags struct {
	seed     uint64
	parallel int
	json     bool
	csv      bool
	report   string
	quiet    bool
}

func runScenario(ctx context.Context, sc simkit.Scenario, args []string, stdout, stderr io.Writer) int {
	cfg := sc.New()
	fs := flag.NewFlagSet("stagger sim "+sc.Name, flag.ContinueOnError)
	var f simFlags
	fs.Uint64Var(&f.seed, "seed", 1, "random seed: the same seed and flags give the same output, byte for byte")
	fs.IntVar(&f.parallel, "parallel", 0, "goroutines for independent runs (0: one per CPU); never changes results")
	fs.BoolVar(&f.json, "json", false, "print the rows as one JSON object")
	fs.BoolVar(&f.csv, "csv", false, "print the rows as CSV")
	fs.StringVar(&f.report, "report", "", "also write a self-contained HTML report (charts and table) to this file")
	fs.BoolVar(&f.quiet, "quiet", false, "no progress on stderr")
	params := cfg.Params()
	for _, p := range params {
		fs.Var(p, p.Name, p.Usage)
	}
	help := func(w io.Writer) {
		fmt.Fprintf(w, "Usage: stagger sim %s [flags]\n\n%s\n\nFlags:\n", sc.Name, sc.Summary)
		printFlags(w, fs, map[string]string{"report": "FILE", "strategy": "NAME"})
	}
	if code, ok := parseFlags(fs, args, stdout, stderr, help); !ok {
		return code
	}
	if f.json && f.csv {
		return usageError(stderr, fs.Name(), "--json and --csv: choose one")
	}
	if f.parallel < 0 || f.parallel > 1024 {
		return usageError(stderr, fs.Name(), "--parallel must be in [0, 1024], got %d", f.parallel)
	}
	if f.report != "" {
		if err := checkReportPath(f.report); err != nil {
			return usageError(stderr, fs.Name(), "--report: %v", err)
		}
	}

	opts := simkit.Options{Seed: f.seed, Parallel: f.parallel}
	var prog *progress
	if !f.quiet && isTerminal(stderr) {
		prog = &progress{w: stderr, name: sc.Name, start: time.Now()}
		opts.Progress = prog.update
	}
	start := time.Now()
	res, err := cfg.Run(ctx, opts)
	prog.finish()
	if err != nil {
		if errors.Is(err, simkit.ErrInvalid) { // flags that are fine alone but not together
			return usageError(stderr, fs.Name(), "%v", err)
		}
		fmt.Fprintf(stderr, "stagger sim %s: %v\n", sc.Name, err)
		return exitFail
	}
	elapsed := time.Since(start)

	// Render everything before writing anything, so a failure leaves no
	// half-written output.
	var out bytes.Buffer
	switch {
	case f.json:
		err = res.WriteJSON(&out)
	case f.csv:
		err = res.WriteCSV(&out)
	default:
		err = res.WriteText(&out)
	}
	if err != nil {
		fmt.Fprintf(stderr, "stagger sim %s: %v\n", sc.Name, err)
		return exitFail
	}
	if f.report != "" {
		cmdline := "stagger sim " + sc.Name
		if len(args) > 0 {
			cmdline += " " + strings.Join(args, " ")
		}
		if err := simkit.WriteReportFile(f.report, res, cmdline); err != nil {
			fmt.Fprintf(stderr, "stagger sim %s: --report: %v\n", sc.Name, err)
			return exitFail
		}
	}
	if _, err := stdout.Write(out.Bytes()); err != nil {
		return exitFail
	}
	if !f.quiet && !f.json && !f.csv {
		// wall-clock facts go to stderr so stdout stays a pure function of the seed
		fmt.Fprintf(stderr, "(%d events in %v)\n", res.Events, elapsed.Round(time.Millisecond))
	}
	if f.report != "" && !f.quiet && !f.json && !f.csv {
		fmt.Fprintf(stderr, "report: %s\n", f.report)
	}
	return exitOK
}

// progress prints "name: done/total runs" on one terminal line, but only
// once a sweep has run for more than two seconds.
type progress struct {
	w     io.Writer
	name  string
	start time.Time
	mu    sync.Mutex
	last  time.Time
	shown bool
}

func (p *progress) update(done, total int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if now.Sub(p.start) < 2*time.Second || (now.Sub(p.last) < 100*time.Millisecond && done < total) {
		return
	}
	p.last, p.shown = now, true
	fmt.Fprintf(p.w, "\r%s: %d/%d runs (%d%%)  ", p.name, done, total, done*100/total)
}

func (p *progress) finish() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shown {
		fmt.Fprint(p.w, "\r\033[K")
	}
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
