package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/internal/redact"
	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/retry"
)

func init() {
	register(command{name: "queue", summary: "durable retry queue: enqueue, run-once, work, stats, dead, requeue, show, purge, jobs, cancel, delete, pause, resume", run: runQueue})
}

var queueSubcommands = map[string]struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}{
	"enqueue":  {"add jobs (flags, or one JSON object per line on stdin)", queueEnqueue},
	"run-once": {"process one due job with --http or --exec", queueRunOnce},
	"work":     {"process jobs until interrupted (SIGINT/SIGTERM)", queueWork},
	"stats":    {"count jobs by state", queueStats},
	"dead":     {"list dead jobs with their reason and last error", queueDead},
	"requeue":  {"give a dead job new attempts and a new deadline", queueRequeue},
	"show":     {"print one job", queueShow},
	"purge":    {"delete done or dead jobs older than a period (--dry-run counts them)", queuePurge},
}

func runQueue(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		w := stdout
		if len(args) == 0 {
			w = stderr
		}
		fmt.Fprintln(w, "Usage: stagger queue <subcommand> [flags]   (stagger queue <subcommand> --help for its flags)")
		fmt.Fprintln(w)
		names := make([]string, 0, len(queueSubcommands))
		for n := range queueSubcommands {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Fprintf(w, "  %-9s %s\n", n, queueSubcommands[n].summary)
		}
		fmt.Fprintln(w, "\n--db is an SQLite file, a plain path (default ./stagger.db), or a PostgreSQL server:")
		fmt.Fprintln(w, "a postgres:// URL or a key=value string (host=... dbname=...). A value that looks like a")
		fmt.Fprintln(w, "URL or a connection string but is not a valid PostgreSQL one is refused (exit 2).")
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	sc, ok := queueSubcommands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "stagger queue: unknown subcommand %q\n", redact.String(args[0]))
		return exitUsage
	}
	return sc.run(ctx, args[1:], stdout, stderr)
}

// queueFlags are the flags every subcommand shares.
type queueFlags struct {
	fs         *flag.FlagSet
	db         string
	queues     queueNames // --queue: one name, or several for work and stats
	sqliteSync string
	jsonOut    bool
	// queue settings
	base, cap, lease, timeout time.Duration
	maxPayload                int
	limits                    queue.Limits // --max-in-flight, --rate, --burst
	// work's --db-wait, and its log of each wait
	startWait time.Duration
	onWait    func(err error, wait time.Duration)
}

// The shared flags a subcommand has follow from what it does: every one
// has --db and --json; one that writes has --sqlite-sync; enqueue has
// --max-payload; one that runs handlers has the retry settings.
const (
	queueReads    = 0
	queueWrites   = 1 << iota // --sqlite-sync
	queueEnqueues             // --max-payload
	queueRuns                 // --base, --cap, --lease, --timeout
)

func newQueueFlags(name string, does int) *queueFlags {
	f := &queueFlags{fs: flag.NewFlagSet("stagger queue "+name, flag.ContinueOnError),
		sqliteSync: "FULL", maxPayload: queue.DefaultMaxPayload,
		base: defaultRatio.Base, cap: defaultRatio.Cap, lease: queue.DefaultLease, timeout: queue.DefaultAttemptTimeout}
	f.fs.StringVar(&f.db, "db", "./stagger.db", "the store: an SQLite file (a plain path), or a postgres:// URL or key=value connection string")
	f.fs.Var(&f.queues, "queue", "the named queue (default \"default\"); work and stats take several: a,b or the flag repeated")
	f.fs.BoolVar(&f.jsonOut, "json", false, "print JSON")
	if does&queueWrites != 0 {
		f.fs.StringVar(&f.sqliteSync, "sqlite-sync", "FULL", "SQLite synchronous mode: FULL (fsync per commit) or NORMAL (survives a killed process, not a power loss)")
	}
	if does&queueEnqueues != 0 {
		f.fs.IntVar(&f.maxPayload, "max-payload", queue.DefaultMaxPayload, "largest payload in bytes")
	}
	if does&queueRuns != 0 {
		f.fs.DurationVar(&f.base, "base", defaultRatio.Base, "retry delay base: the window after the first failure")
		f.fs.DurationVar(&f.cap, "cap", defaultRatio.Cap, "retry delay cap: the largest window")
		f.fs.DurationVar(&f.lease, "lease", queue.DefaultLease, "how long a claim holds a job (extended while the handler runs)")
		f.fs.DurationVar(&f.timeout, "timeout", 30*time.Second, "per-attempt handler timeout")
		f.fs.IntVar(&f.limits.MaxInFlight, "max-in-flight", 0, "most jobs of the queue leased at once across every worker process and host, enforced by the store (0: no limit)")
		f.fs.Float64Var(&f.limits.Rate, "rate", 0, "most claims (attempt starts) per second of the queue across every worker, enforced by the store (0: no limit)")
		f.fs.IntVar(&f.limits.Burst, "burst", 0, "claims --rate allows at once (0: the rate rounded up)")
	}
	return f
}

// defaultRatio is the queue's default schedule, whose Base and Cap are the
// defaults of --base and --cap.
var defaultRatio = queue.DefaultSchedule.(backoff.Ratio)

// queuePlaceholders name the values of the queue subcommands' flags in
// --help.
var queuePlaceholders = map[string]string{
	"db": "FILE|URL", "queue": "NAME", "sqlite-sync": "FULL|NORMAL", "http": "URL", "exec": "COMMAND", "retry-status": "LIST",
	"content-type": "TYPE", "id": "ID", "payload": "TEXT", "payload-file": "FILE", "deadline": "D|TIME", "after": "ID",
}

// parse parses args; it returns a usage exit code when they are bad.
func (f *queueFlags) parse(args []string, stdout, stderr io.Writer) (int, bool) {
	help := func(w io.Writer) {
		fmt.Fprintf(w, "Usage: %s [flags]\n\nFlags:\n", f.fs.Name())
		printFlags(w, f.fs, queuePlaceholders)
	}
	if code, ok := parseFlags(f.fs, args, stdout, stderr, help); !ok {
		return code, false
	}
	if err := f.check(); err != nil {
		return usageError(stderr, f.fs.Name(), "%v", err), false
	}
	return 0, true
}

// check validates --db and the numeric settings, naming the flag, so that
// bad usage is refused before a store is opened (or an SQLite file
// created).
func (f *queueFlags) check() error {
	if _, err := classifyDB(f.db); err != nil {
		return err
	}
	if err := f.limits.Validate(); err != nil {
		return fmt.Errorf("--max-in-flight, --rate, --burst: %w", err)
	}
	if err := durationFlag("--base", f.base, time.Millisecond); err != nil {
		return err
	}
	if err := durationFlag("--cap", f.cap, time.Millisecond); err != nil {
		return err
	}
	if f.cap < f.base {
		return fmt.Errorf("--cap (%v) must be >= --base (%v)", f.cap, f.base)
	}
	if err := durationFlag("--lease", f.lease, queue.MinLease); err != nil {
		return err
	}
	if err := durationFlag("--timeout", f.timeout, queue.MinLease); err != nil {
		return err
	}
	if err := intFlag("--max-payload", f.maxPayload, 1, queue.MaxPayloadLimit); err != nil {
		return err
	}
	for _, name := range f.queues.names {
		if err := queue.ValidateQueue(name); err != nil {
			return fmt.Errorf("--queue: %w", err)
		}
	}
	if seen := map[string]bool{}; len(f.queues.names) > 1 {
		if n := f.fs.Name(); n != "stagger queue work" && n != "stagger queue stats" {
			return fmt.Errorf("--queue: one queue name (only work and stats take several), got %q", strings.Join(f.queues.names, ","))
		}
		for _, name := range f.queues.names {
			if seen[name] {
				return fmt.Errorf("--queue: %q is given twice", name)
			}
			seen[name] = true
		}
	}
	if s := strings.ToUpper(f.sqliteSync); s != "FULL" && s != "NORMAL" {
		return fmt.Errorf("--sqlite-sync must be FULL or NORMAL, got %q", f.sqliteSync)
	}
	return nil
}

// queueNames is the --queue flag: names separated by commas, the flag
// given once or more (--queue a,b or --queue a --queue b).
type queueNames struct{ names []string }

func (q *queueNames) String() string { return strings.Join(q.names, ",") }

func (q *queueNames) Set(v string) error {
	q.names = append(q.names, strings.Split(v, ",")...)
	return nil
}

// first is the first name given, or the default queue.
func (q *queueNames) first() string {
	if len(q.names) == 0 {
		return queue.DefaultQueue
	}
	return q.names[0]
}

// list is the names given, or the default queue.
func (q *queueNames) list() []string {
	if len(q.names) == 0 {
		return []string{queue.DefaultQueue}
	}
	return q.names
}

func durationFlag(name string, v, min time.Duration) error {
	if v < min || v > queue.MaxDuration {
		return fmt.Errorf("%s must be in [%v, %v], got %v", name, min, queue.MaxDuration, v)
	}
	return nil
}

func intFlag(name string, v, lo, hi int) error {
	if v < lo || v > hi {
		return fmt.Errorf("%s must be in [%d, %d], got %d", name, lo, hi, v)
	}
	return nil
}

// open opens the store (as mode allows) and the queue; on failure it
// prints the error and returns the exit code: 2 for a bad --db value, 1 for
// a store that cannot be opened (missing, unreachable, not a queue).
func (f *queueFlags) open(ctx context.Context, stderr io.Writer, mode openMode) (*queue.Queue, func() error, int) {
	s, closeFn, err := openStore(ctx, f.db, storeOptions{sqliteSync: f.sqliteSync, mode: mode, startWait: f.startWait, onWait: f.onWait})
	if err != nil && ctx.Err() != nil {
		// Stopped (SIGINT, SIGTERM) before anything was done: not bad
		// usage; main turns the signal into the exit code.
		return nil, nil, exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", f.fs.Name(), redact.Error(err, f.db))
		if errors.Is(err, queue.ErrInvalid) {
			return nil, nil, exitUsage
		}
		return nil, nil, exitFail
	}
	q, err := f.newQueue(s, f.queues.first())
	if err != nil {
		closeFn()
		fmt.Fprintf(stderr, "%s: %v\n", f.fs.Name(), err)
		return nil, nil, exitUsage
	}
	return q, closeFn, 0
}

// newQueue is the Queue of the named queue on s with the flags' settings.
func (f *queueFlags) newQueue(s queue.Store, name string) (*queue.Queue, error) {
	if err := f.limits.Validate(); err != nil {
		return nil, fmt.Errorf("--max-in-flight, --rate, --burst: %w", err)
	}
	return queue.New(s, queue.Config{
		Policy: &retry.Policy{Schedule: backoff.Ratio{Base: f.base, Cap: f.cap}, AttemptTimeout: f.timeout},
		Lease:  f.lease, MaxPayload: f.maxPayload, Queue: name, Limits: f.limits,
	})
}

func (f *queueFlags) fail(stderr io.Writer, err error) int {
	fmt.Fprintf(stderr, "%s: %v\n", f.fs.Name(), redact.Error(err, f.db))
	return exitFail
}

// ---- enqueue ----

func queueEnqueue(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return queueEnqueueFrom(ctx, args, os.Stdin, stdout, stderr)
}

func queueEnqueueFrom(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	f := newQueueFlags("enqueue", queueWrites|queueEnqueues)
	var id, payload, payloadFile, deadline string
	var maxAttempts int
	f.fs.StringVar(&id, "id", "", "job ID (without it, jobs are read from stdin: one JSON object per line\n"+
		`with "id", "payload", "max_attempts", "deadline")`)
	f.fs.StringVar(&payload, "payload", "", "payload")
	f.fs.StringVar(&payloadFile, "payload-file", "", "read the payload from this file")
	f.fs.IntVar(&maxAttempts, "max-attempts", queue.DefaultJobMaxAttempts, "attempt budget (the first attempt included)")
	f.fs.StringVar(&deadline, "deadline", "24h", "last time an attempt may start: a duration from now (1h) or an RFC 3339 time")
	if code, ok := f.parse(args, stdout, stderr); !ok {
		return code
	}
	now := time.Now().UnixMilli()
	var jobs []queue.NewJob
	var lines []int
	usage := func(err error) int {
		fmt.Fprintf(stderr, "%s: %v; nothing was written\n", f.fs.Name(), err)
		return exitUsage
	}
	if err := intFlag("--max-attempts", maxAttempts, 1, queue.MaxMaxAttempts); err != nil {
		return usage(err)
	}
	dl, err := parseDeadline("--deadline", deadline, now)
	if err != nil {
		return usage(err)
	}
	if id == "" {
		if payload != "" || payloadFile != "" {
			return usage(errors.New("--payload and --payload-file need --id"))
		}
		jobs, lines, err = readJobLines(stdin, now, f.maxPayload)
		if err != nil {
			return usage(err)
		}
		// Flags give the defaults of lines that leave a field out.
		for i := range jobs {
			if jobs[i].MaxAttempts == 0 {
				jobs[i].MaxAttempts = maxAttempts
			}
			if jobs[i].Deadline == 0 {
				jobs[i].Deadline = dl
			}
		}
	} else {
		j := queue.NewJob{ID: id, MaxAttempts: maxAttempts, Deadline: dl, Payload: []byte(payload)}
		if payloadFile != "" {
			if payload != "" {
				return usage(errors.New("give --payload or --payload-file, not both"))
			}
			if j.Payload, err = readCapped(payloadFile, f.maxPayload); err != nil {
				return usage(err)
			}
		}
		jobs = []queue.NewJob{j}
	}
	// Every job is checked before the store is opened: bad input creates
	// no SQLite file.
	vq, err := f.newQueue(queue.NewMemoryStore(), f.queues.first())
	if err != nil {
		return usage(err)
	}
	for i, j := range jobs {
		if err := vq.ValidateNewJob(j, now); err != nil {
			if lines != nil {
				err = fmt.Errorf("line %d: %w", lines[i], err)
			}
			return usage(err)
		}
	}
	q, closeFn, code := f.open(ctx, stderr, openCreate)
	if q == nil {
		return code
	}
	defer closeFn()
	res, err := q.EnqueueMany(ctx, jobs)
	if err != nil {
		if errors.Is(err, queue.ErrInvalid) {
			return usage(err)
		}
		return f.fail(stderr, err)
	}
	for i, r := range res {
		// An existing job is kept as it is, payload included: say so when
		// the payload given now is another one.
		differs := !r.Created && !bytes.Equal(r.Job.Payload, jobs[i].Payload)
		if f.jsonOut {
			writeJSON(stdout, struct {
				Created        bool    `json:"created"`
				PayloadDiffers bool    `json:"payload_differs"`
				Job            jobJSON `json:"job"`
			}{r.Created, differs, toJobJSON(r.Job, false)})
			continue
		}
		verb := "created"
		switch {
		case differs:
			verb = "exists, payload differs (the stored one is kept):"
		case !r.Created:
			verb = "exists "
		}
		fmt.Fprintf(stdout, "%s %s (attempts %d/%d, deadline %s)\n", verb, r.Job.ID, r.Job.Attempts, r.Job.MaxAttempts, fmtMs(r.Job.Deadline))
	}
	return exitOK
}

// readCapped reads a file of at most max bytes.
func readCapped(path string, max int) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--payload-file: %w", err)
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, int64(max)+1))
	if err != nil {
		return nil, fmt.Errorf("--payload-file: %w", err)
	}
	if len(b) > max {
		return nil, fmt.Errorf("--payload-file: payload must be at most %d bytes (--max-payload)", max)
	}
	return b, nil
}

// ---- handlers ----

type handlerFlags struct {
	httpURL, execCmd, retryStatus, contentType string
}

func (h *handlerFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&h.httpURL, "http", "", "handler: POST the payload to this URL; 2xx done, the rest classed as retryhttp does: 408, 429, 502-504,\n"+
		"refused or reset connections and timeouts retryable (honouring Retry-After); 501, other 4xx, 1xx, 3xx and\n"+
		"unknown hosts permanent; 500 and other 5xx of no class (the job comes back when its lease runs out)")
	fs.StringVar(&h.execCmd, "exec", "", "handler: run this shell command with the payload on stdin (exit 0 done, 75 retryable, 65 permanent, else unknown)")
	fs.StringVar(&h.retryStatus, "retry-status", "", "with --http: the statuses (400-599) retryable at this endpoint, such as 503,500; the ones\n"+
		"not listed of 408, 429, 502, 503, 504 become permanent")
	fs.StringVar(&h.contentType, "content-type", "application/octet-stream", "with --http: the Content-Type of the request")
}

func (h *handlerFlags) build() (retry.Handler, error) {
	switch {
	case (h.httpURL == "") == (h.execCmd == ""):
		return nil, errors.New("give exactly one handler: --http URL or --exec CMD")
	case h.execCmd != "":
		return (&execHandler{cmd: h.execCmd}).handle, nil
	}
	if !strings.HasPrefix(h.httpURL, "http://") && !strings.HasPrefix(h.httpURL, "https://") {
		return nil, fmt.Errorf("--http must be an http:// or https:// URL, got %q", redact.String(h.httpURL))
	}
	var set *statusSet
	if h.retryStatus != "" {
		var err error
		if set, err = parseStatusSet(h.retryStatus); err != nil {
			return nil, err
		}
	}
	return (&httpHandler{
		client: &http.Client{}, url: h.httpURL, contentType: h.contentType, classify: statusClassifier(set), now: time.Now,
	}).handle, nil
}

// ---- run-once ----

func queueRunOnce(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f := newQueueFlags("run-once", queueWrites|queueRuns)
	var hf handlerFlags
	hf.register(f.fs)
	if code, ok := f.parse(args, stdout, stderr); !ok {
		return code
	}
	h, err := hf.build()
	if err != nil {
		return usageError(stderr, f.fs.Name(), "%v", err)
	}
	q, closeFn, code := f.open(ctx, stderr, openCreate)
	if q == nil {
		return code
	}
	defer closeFn()
	j, err := q.RunOnce(ctx, h)
	if j == nil && err == nil {
		if f.jsonOut {
			writeJSON(stdout, nil)
		} else {
			fmt.Fprintln(stdout, "nothing due")
		}
		return exitOK
	}
	if j != nil {
		if f.jsonOut {
			writeJSON(stdout, toJobJSON(*j, false))
		} else {
			fmt.Fprintln(stdout, describe(*j, q.Now()))
		}
	}
	if err != nil {
		return f.fail(stderr, err)
	}
	return exitOK
}

// describe is a one-line summary of a job after an attempt.
func describe(j queue.Job, now int64) string {
	s := fmt.Sprintf("%s: attempt %d/%d → %s", j.ID, j.Attempts, j.MaxAttempts, j.State)
	switch j.State {
	case queue.Pending:
		s += fmt.Sprintf(" (retry in %v)", time.Duration(max(j.AvailableAt-now, 0))*time.Millisecond)
	case queue.Dead:
		s += " (" + string(j.DeadReason) + ")"
	case queue.Leased:
		s += " until " + fmtMs(j.LeaseUntil)
	}
	if j.LastError != "" && j.State != queue.Done {
		s += ": " + redact.Text(j.LastError)
	}
	return s
}

// ---- work ----

func queueWork(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f := newQueueFlags("work", queueWrites|queueRuns)
	var hf handlerFlags
	hf.register(f.fs)
	var concurrency, batch int
	var poll, sweep, grace, progress time.Duration
	var logFormat, retainDone, retainDead string
	f.fs.StringVar(&retainDone, "retain-done", "7d", "how long done jobs are kept after they finished (a duration, Nd for days, or forever)")
	f.fs.StringVar(&retainDead, "retain-dead", "30d", "how long dead jobs are kept after they died (a duration, Nd for days, or forever)")
	f.fs.StringVar(&logFormat, "log-format", "text", "log lines on stderr: text or json (--json means json)")
	f.fs.DurationVar(&progress, "progress", 30*time.Second, "interval of the progress line (0: none)")
	f.fs.IntVar(&concurrency, "concurrency", 4, "handlers running at once")
	f.fs.IntVar(&batch, "batch", 0, "most jobs one claim takes (0: 4×--concurrency, at least 64, at most 1000); more than the idle handlers only when handlers are short next to a commit")
	f.fs.DurationVar(&poll, "poll", queue.DefaultPollInterval, "mean idle polling interval (jittered ±50%)")
	f.fs.DurationVar(&sweep, "sweep", queue.DefaultSweepInterval, "mean interval of the sweep that buries jobs that can never run again")
	f.fs.DurationVar(&grace, "grace", queue.DefaultGrace, "on SIGINT/SIGTERM, how long in-flight handlers may finish")
	f.fs.DurationVar(&f.startWait, "db-wait", 5*time.Minute, "how long to wait for a PostgreSQL server that is down or starting up at start (0: fail at once)")
	if code, ok := f.parse(args, stdout, stderr); !ok {
		return code
	}
	if f.startWait < 0 || f.startWait > maxDBWait {
		return usageError(stderr, f.fs.Name(), "--db-wait must be in [0, %v], got %v", maxDBWait, f.startWait)
	}
	for _, err := range []error{
		intFlag("--concurrency", concurrency, 1, queue.MaxConcurrency),
		intFlag("--batch", batch, 0, queue.MaxBatchSize),
		durationFlag("--poll", poll, time.Millisecond),
		durationFlag("--sweep", sweep, time.Millisecond),
		durationFlag("--grace", grace, time.Millisecond),
	} {
		if err != nil {
			return usageError(stderr, f.fs.Name(), "%v", err)
		}
	}
	if progress != 0 {
		if err := durationFlag("--progress", progress, time.Millisecond); err != nil {
			return usageError(stderr, f.fs.Name(), "%v (0 turns it off)", err)
		}
	}
	keepDone, err := parseRetention("--retain-done", retainDone)
	if err != nil {
		return usageError(stderr, f.fs.Name(), "%v", err)
	}
	keepDead, err := parseRetention("--retain-dead", retainDead)
	if err != nil {
		return usageError(stderr, f.fs.Name(), "%v", err)
	}
	if f.jsonOut {
		logFormat = "json"
	}
	logger, err := newLogger(stderr, logFormat)
	if err != nil {
		return usageError(stderr, f.fs.Name(), "%v", err)
	}
	f.onWait = func(err error, wait time.Duration) {
		logger.Warn("database not ready, waiting", "db", redact.String(f.db), "error", redact.Error(err, f.db).Error(), "retry_in", wait.String())
	}
	h, err := hf.build()
	if err != nil {
		return usageError(stderr, f.fs.Name(), "%v", err)
	}
	q, closeFn, code := f.open(ctx, stderr, openCreate)
	if q == nil {
		return code
	}
	defer closeFn()
	wl := &workLog{log: logger, db: f.db, start: time.Now()}
	// One Worker for every named queue, each with --concurrency handlers.
	names := f.queues.list()
	serves := make([]queue.Serve, len(names))
	for i, name := range names {
		qi := q
		if i > 0 {
			if qi, err = f.newQueue(q.Store(), name); err != nil {
				return usageError(stderr, f.fs.Name(), "%v", err)
			}
		}
		serves[i] = queue.Serve{Queue: qi, Handler: h}
	}
	w, err := queue.NewMultiWorker(queue.WorkerConfig{
		Concurrency: concurrency, BatchSize: batch, PollInterval: poll, SweepInterval: sweep, Grace: grace,
		RetainDone: keepDone, RetainDead: keepDead,
		OnError: wl.failure, OnResult: wl.result, OnMaintenance: wl.maintenance,
	}, serves...)
	if err != nil {
		return usageError(stderr, f.fs.Name(), "%v", err)
	}
	logger.Info("working on", "db", redact.String(f.db), "queues", strings.Join(names, ","), "handlers", concurrency)
	if progress > 0 {
		pctx, stop := context.WithCancel(ctx)
		defer stop()
		go wl.progress(pctx, progress)
	}
	err = w.Run(ctx)
	wl.summary(err)
	if err != nil {
		return exitFail
	}
	return exitOK
}

// ---- stats ----

type statsJSON struct {
	Queue            string `json:"queue"`
	Pending          int64  `json:"pending"`
	PendingDue       int64  `json:"pending_due"`
	PendingScheduled int64  `json:"pending_scheduled"`
	Leased           int64  `json:"leased"`
	LeasedExpired    int64  `json:"leased_expired"`
	Done             int64  `json:"done"`
	Dead             struct {
		Exhausted int64 `json:"exhausted"`
		Deadline  int64 `json:"deadline"`
		Permanent int64 `json:"permanent"`
		Canceled  int64 `json:"canceled"`
	} `json:"dead"`
	DueToDie           int64 `json:"due_to_die"`
	OldestPendingAgeMs int64 `json:"oldest_pending_age_ms"`
}

// queueStats prints the counts of every queue of the store (the default
// queue always among them), or of the queues --queue names: one row (one
// JSON line) per queue, in name order.
func queueStats(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f := newQueueFlags("stats", queueReads)
	if code, ok := f.parse(args, stdout, stderr); !ok {
		return code
	}
	q, closeFn, code := f.open(ctx, stderr, openReadOnly)
	if q == nil {
		return code
	}
	defer closeFn()
	names := f.queues.names
	var all map[string]queue.Stats
	if len(names) == 0 {
		var err error
		if all, err = q.StatsByQueue(ctx); err != nil {
			return f.fail(stderr, err)
		}
		if _, ok := all[queue.DefaultQueue]; !ok {
			all[queue.DefaultQueue] = queue.Stats{Now: q.Now()}
		}
		for name := range all {
			names = append(names, name)
		}
	} else {
		// Only the named queues: each count reads that queue's index
		// entries, not every queue's jobs.
		all = make(map[string]queue.Stats, len(names))
		now := q.Now()
		for _, name := range names {
			st, err := q.Store().Stats(ctx, name, now)
			if err != nil {
				return f.fail(stderr, err)
			}
			all[name] = st
		}
	}
	names = slices.Sorted(slices.Values(names))
	rows := make([]statsJSON, len(names))
	for i, name := range names {
		rows[i] = toStatsJSON(name, all[name])
	}
	if f.jsonOut {
		for _, r := range rows {
			writeJSON(stdout, r)
		}
		return exitOK
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "queue\tpending\tdue\tscheduled\tleased\texpired\tdying\tdone\tdead\toldest due waiting")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%v\n", r.Queue, r.Pending, r.PendingDue, r.PendingScheduled,
			r.Leased, r.LeasedExpired, r.DueToDie, r.Done, r.Dead.Exhausted+r.Dead.Deadline+r.Dead.Permanent+r.Dead.Canceled,
			time.Duration(r.OldestPendingAgeMs)*time.Millisecond)
	}
	tw.Flush()
	return exitOK
}

// toStatsJSON is the row of one queue.
func toStatsJSON(name string, st queue.Stats) statsJSON {
	out := statsJSON{Queue: name}
	out.Pending, out.PendingDue, out.PendingScheduled = st.Pending(), st.PendingDue, st.PendingScheduled
	out.Leased, out.LeasedExpired, out.Done = st.Leased, st.LeasedExpired, st.Done
	out.Dead.Exhausted, out.Dead.Deadline, out.Dead.Permanent, out.Dead.Canceled = st.DeadExhausted, st.DeadDeadline, st.DeadPermanent, st.DeadCanceled
	out.DueToDie, out.OldestPendingAgeMs = st.DueToDie, st.OldestPendingAge()
	return out
}

// ---- dead ----

func queueDead(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f := newQueueFlags("dead", queueReads)
	var limit int
	var after string
	f.fs.IntVar(&limit, "limit", 100, "list at most this many jobs (1-10000)")
	f.fs.StringVar(&after, "after", "", "list jobs whose ID sorts after this one (paging)")
	if code, ok := f.parse(args, stdout, stderr); !ok {
		return code
	}
	if err := intFlag("--limit", limit, 1, 10000); err != nil {
		return usageError(stderr, f.fs.Name(), "%v", err)
	}
	q, closeFn, code := f.open(ctx, stderr, openReadOnly)
	if q == nil {
		return code
	}
	defer closeFn()
	jobs, err := q.Dead(ctx, after, limit)
	if err != nil {
		return f.fail(stderr, err)
	}
	for _, j := range jobs {
		if f.jsonOut {
			writeJSON(stdout, toJobJSON(j, false))
			continue
		}
		fmt.Fprintf(stdout, "%s\t%s\tattempts %d/%d\t%s\n", j.ID, j.DeadReason, j.Attempts, j.MaxAttempts, redact.Text(j.LastError))
	}
	return exitOK
}

// ---- requeue ----

func queueRequeue(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f := newQueueFlags("requeue", queueWrites)
	var id, deadline string
	var attempts int
	var bulk redriveFlags
	f.fs.StringVar(&id, "id", "", "the dead job's ID (or --all)")
	f.fs.IntVar(&attempts, "attempts", 0, "new attempts granted on top of those spent (required, 1-1000000)")
	actor := actorFlag(f.fs)
	f.fs.StringVar(&deadline, "deadline", "", "the new deadline: a duration from now (1h) or an RFC 3339 time (required; with --all a duration from each job's requeue)")
	bulk.register(f.fs)
	if code, ok := f.parse(args, stdout, stderr); !ok {
		return code
	}
	now := time.Now().UnixMilli()
	bad := func(err error) int {
		return usageError(stderr, f.fs.Name(), "%v", err)
	}
	if err := bulk.check(id); err != nil {
		return bad(err)
	}
	if err := intFlag("--attempts", attempts, 1, queue.MaxMaxAttempts); err != nil {
		return bad(err)
	}
	if deadline == "" {
		return bad(errors.New("--deadline is required: requeue grants a new deadline explicitly"))
	}
	who, err := actorOf(*actor)
	if err != nil {
		return bad(err)
	}
	if bulk.all {
		return bulk.run(ctx, f, attempts, deadline, who, stdout, stderr)
	}
	dl, err := parseDeadline("--deadline", deadline, now)
	if err != nil {
		return bad(err)
	}
	q, closeFn, code := f.open(ctx, stderr, openExisting)
	if q == nil {
		return code
	}
	defer closeFn()
	j, err := q.RequeueAs(ctx, id, attempts, dl, who)
	switch {
	case errors.Is(err, queue.ErrInvalid):
		return bad(err)
	case errors.Is(err, queue.ErrNotFound):
		fmt.Fprintf(stderr, "%s: no job %q\n", f.fs.Name(), id)
		return exitFail
	case errors.Is(err, queue.ErrNotDead):
		fmt.Fprintf(stderr, "%s: job %q is not dead (state %s): nothing was changed\n", f.fs.Name(), id, jobState(ctx, q, id))
		return exitFail
	case err != nil:
		return f.fail(stderr, err)
	}
	if f.jsonOut {
		writeJSON(stdout, toJobJSON(j, false))
	} else {
		fmt.Fprintf(stdout, "requeued %s: attempts %d/%d, deadline %s\n", j.ID, j.Attempts, j.MaxAttempts, fmtMs(j.Deadline))
	}
	return exitOK
}

// ---- purge ----

func queuePurge(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f := newQueueFlags("purge", queueWrites)
	var state, olderThan string
	var batch int
	var dryRun bool
	f.fs.StringVar(&state, "state", "", "done or dead (required)")
	f.fs.StringVar(&olderThan, "older-than", "", "delete jobs that finished longer ago than this: a duration or Nd for days (required)")
	f.fs.IntVar(&batch, "batch", queue.DefaultPurgeBatch, "jobs deleted per transaction")
	f.fs.BoolVar(&dryRun, "dry-run", false, "count the jobs that would be deleted; delete nothing")
	if code, ok := f.parse(args, stdout, stderr); !ok {
		return code
	}
	bad := func(err error) int { return usageError(stderr, f.fs.Name(), "%v", err) }
	if state != string(queue.Done) && state != string(queue.Dead) {
		return bad(fmt.Errorf("--state must be done or dead, got %q", state))
	}
	if olderThan == "" {
		return bad(errors.New("--older-than is required"))
	}
	age, err := parseDays("--older-than", olderThan)
	if err != nil {
		return bad(err)
	}
	if err := intFlag("--batch", batch, 1, queue.MaxPurgeBatch); err != nil {
		return bad(err)
	}
	q, closeFn, code := f.open(ctx, stderr, openExisting)
	if q == nil {
		return code
	}
	defer closeFn()
	var n int64
	if dryRun {
		n, err = q.Purgeable(ctx, queue.State(state), age)
	} else {
		n, err = q.Purge(ctx, queue.State(state), age, batch)
	}
	if err != nil {
		if n > 0 {
			fmt.Fprintf(stderr, "%s: %d %s jobs were deleted before the error\n", f.fs.Name(), n, state)
		}
		return f.fail(stderr, err)
	}
	if f.jsonOut {
		writeJSON(stdout, struct {
			State       string `json:"state"`
			OlderThanMs int64  `json:"older_than_ms"`
			DryRun      bool   `json:"dry_run"`
			Jobs        int64  `json:"jobs"`
		}{state, age.Milliseconds(), dryRun, n})
		return exitOK
	}
	verb := "purged"
	if dryRun {
		verb = "would purge"
	}
	fmt.Fprintf(stdout, "%s %d %s jobs that finished more than %v ago\n", verb, n, state, age)
	return exitOK
}

// parseDays reads a positive duration, also written as whole days ("30d").
func parseDays(name, s string) (time.Duration, error) {
	var d time.Duration
	if n, ok := strings.CutSuffix(strings.TrimSpace(s), "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil || days < 1 || days > int(queue.MaxDuration/(24*time.Hour)) {
			return 0, fmt.Errorf("%s: %q is not a whole number of days in [1, %d]", name, s, queue.MaxDuration/(24*time.Hour))
		}
		d = time.Duration(days) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(strings.TrimSpace(s)); err != nil {
			return 0, fmt.Errorf("%s: %q is neither a duration (such as 36h) nor days (such as 7d)", name, s)
		}
	}
	if err := durationFlag(name, d, time.Millisecond); err != nil {
		return 0, err
	}
	return d, nil
}

// parseRetention reads a retention: a duration, days, or "forever".
func parseRetention(name, s string) (time.Duration, error) {
	if strings.TrimSpace(s) == "forever" {
		return queue.KeepForever, nil
	}
	return parseDays(name, s)
}

// jobState is the state of job id, for a message ("unknown" when it
// cannot be read).
func jobState(ctx context.Context, q *queue.Queue, id string) string {
	j, err := q.Get(ctx, id)
	if err != nil {
		return "unknown"
	}
	return string(j.State)
}

// ---- show ----

func queueShow(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f := newQueueFlags("show", queueReads)
	var id string
	f.fs.StringVar(&id, "id", "", "the job's ID (required)")
	if code, ok := f.parse(args, stdout, stderr); !ok {
		return code
	}
	if id == "" {
		fmt.Fprintf(stderr, "%s: --id is required\n", f.fs.Name())
		return exitUsage
	}
	q, closeFn, code := f.open(ctx, stderr, openReadOnly)
	if q == nil {
		return code
	}
	defer closeFn()
	j, err := q.Get(ctx, id)
	if errors.Is(err, queue.ErrNotFound) {
		fmt.Fprintf(stderr, "%s: no job %q\n", f.fs.Name(), id)
		return exitFail
	}
	if err != nil {
		return f.fail(stderr, err)
	}
	jj := toJobJSON(j, true)
	evs, err := history(ctx, q, id)
	if err != nil {
		return f.fail(stderr, err)
	}
	if f.jsonOut {
		writeJSON(stdout, struct {
			jobJSON
			History []eventJSON `json:"history"`
		}{jj, evs})
		return exitOK
	}
	fmt.Fprintf(stdout, "queue         %s\n", j.Queue)
	fmt.Fprintf(stdout, "id            %s\nstate         %s %s\nattempts      %d/%d\navailable_at  %s\ndeadline      %s\nlease_until   %s\nlast_error    %s\ncreated_at    %s\nupdated_at    %s\nfinished_at   %s\npayload       %d bytes\n",
		j.ID, j.State, j.DeadReason, j.Attempts, j.MaxAttempts, fmtMs(j.AvailableAt), fmtMs(j.Deadline), fmtMs(j.LeaseUntil),
		redact.Text(j.LastError), fmtMs(j.CreatedAt), fmtMs(j.UpdatedAt), fmtMs(j.FinishedAt), len(j.Payload))
	printHistory(stdout, evs)
	return exitOK
}

// jobJSON is the JSON form of a job.
type jobJSON struct {
	ID            string  `json:"id"`
	Queue         string  `json:"queue"`
	State         string  `json:"state"`
	DeadReason    string  `json:"dead_reason"`
	Attempts      int     `json:"attempts"`
	MaxAttempts   int     `json:"max_attempts"`
	AvailableAtMs int64   `json:"available_at_ms"`
	DeadlineMs    int64   `json:"deadline_ms"`
	LeaseUntilMs  int64   `json:"lease_until_ms"`
	LastError     string  `json:"last_error"`
	CreatedAtMs   int64   `json:"created_at_ms"`
	UpdatedAtMs   int64   `json:"updated_at_ms"`
	FinishedAtMs  int64   `json:"finished_at_ms"`
	Payload       *string `json:"payload,omitempty"`
	PayloadBase64 []byte  `json:"payload_base64,omitempty"`
}

func toJobJSON(j queue.Job, withPayload bool) jobJSON {
	out := jobJSON{
		ID: j.ID, Queue: j.Queue, State: string(j.State), DeadReason: string(j.DeadReason), Attempts: j.Attempts, MaxAttempts: j.MaxAttempts,
		AvailableAtMs: j.AvailableAt, DeadlineMs: j.Deadline, LeaseUntilMs: j.LeaseUntil, LastError: redact.Text(j.LastError),
		CreatedAtMs: j.CreatedAt, UpdatedAtMs: j.UpdatedAt, FinishedAtMs: j.FinishedAt,
	}
	if withPayload {
		if utf8.Valid(j.Payload) {
			s := string(j.Payload)
			out.Payload = &s
		} else {
			out.PayloadBase64 = j.Payload
		}
	}
	return out
}

func writeJSON(w io.Writer, v any) {
	b, _ := json.Marshal(v)
	w.Write(append(b, '\n'))
}

// fmtMs formats Unix ms as RFC 3339 (UTC), "-" for 0.
func fmtMs(ms int64) string {
	if ms == 0 {
		return "-"
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}
