package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/staggerhq/stagger/internal/redact"
	"github.com/staggerhq/stagger/queue"
)

// The operator's subcommands: jobs, cancel, delete, pause, resume.
func init() {
	for name, sc := range map[string]struct {
		summary string
		run     func(ctx context.Context, args []string, stdout, stderr io.Writer) int
	}{
		"jobs":   {"list and search jobs by state, reason, age and ID prefix, a page at a time", queueJobs},
		"cancel": {"cancel a pending job, or every pending job the filters select (--all)", queueCancel},
		"delete": {"delete a job that no worker holds, with its history", queueDelete},
		"pause":  {"pause a queue: no worker of any process claims its jobs until resume", queuePause},
		"resume": {"resume a paused queue", queueResume},
	} {
		queueSubcommands[name] = sc
	}
	for name, arg := range map[string]string{"actor": "NAME", "state": "STATE", "reason": "REASON", "id-prefix": "PREFIX"} {
		queuePlaceholders[name] = arg
	}
}

// actorFlag registers --actor: who acts, recorded in the jobs' history.
func actorFlag(fs *flag.FlagSet) *string {
	return fs.String("actor", "", "who acts, recorded in each job's history (default: the OS user)")
}

// actorOf is the --actor given, or the OS user.
func actorOf(given string) (string, error) {
	if given != "" {
		if err := queue.ValidateActor(given); err != nil {
			return "", fmt.Errorf("--actor: %w", err)
		}
		return given, nil
	}
	if u, err := user.Current(); err == nil && queue.ValidateActor(u.Username) == nil {
		return u.Username, nil
	}
	if u := os.Getenv("USER"); queue.ValidateActor(u) == nil {
		return u, nil
	}
	return "unknown", nil
}

// filterFlags select jobs: jobs, and cancel --all.
type filterFlags struct {
	state, reason, idPrefix string
	olderThan, newerThan    string
}

func (f *filterFlags) register(fs *flag.FlagSet, withState bool) {
	if withState {
		fs.StringVar(&f.state, "state", "", "only jobs in this state: pending, leased, done or dead")
		fs.StringVar(&f.reason, "reason", "", "only dead jobs of this reason: exhausted, deadline, permanent or canceled")
	}
	fs.StringVar(&f.idPrefix, "id-prefix", "", "only jobs whose ID starts with this")
	fs.StringVar(&f.olderThan, "older-than", "", "only jobs older than this (a duration or Nd): enqueued, or finished for done and dead jobs, that long ago")
	fs.StringVar(&f.newerThan, "newer-than", "", "only jobs newer than this (a duration or Nd), counted as --older-than")
}

// filter is the queue.Filter of the flags, checked as far as the flags
// go (the Queue checks the rest: ErrInvalid, a usage error).
func (f *filterFlags) filter(name string) (queue.Filter, error) {
	qf := queue.Filter{Queue: name, State: queue.State(f.state), Reason: queue.DeadReason(f.reason), IDPrefix: f.idPrefix}
	if f.state != "" {
		if err := queue.ValidateState(qf.State); err != nil {
			return qf, fmt.Errorf("--state: %w", err)
		}
	}
	if f.reason != "" {
		if err := queue.ValidateReason(qf.Reason); err != nil {
			return qf, fmt.Errorf("--reason: %w", err)
		}
	}
	for _, a := range []struct {
		name string
		s    string
		dst  *time.Duration
	}{{"--older-than", f.olderThan, &qf.OlderThan}, {"--newer-than", f.newerThan, &qf.NewerThan}} {
		if a.s != "" {
			d, err := parseDays(a.name, a.s)
			if err != nil {
				return qf, err
			}
			*a.dst = d
		}
	}
	return qf, nil
}

// ---- jobs ----

func queueJobs(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f := newQueueFlags("jobs", queueReads)
	var ff filterFlags
	var after string
	var limit int
	ff.register(f.fs, true)
	f.fs.StringVar(&after, "after", "", "list jobs whose ID sorts after this one: the next page")
	f.fs.IntVar(&limit, "limit", queue.DefaultPageSize, fmt.Sprintf("list at most this many jobs (1-%d)", queue.MaxPageSize))
	if code, ok := f.parse(args, stdout, stderr); !ok {
		return code
	}
	bad := func(err error) int { return usageError(stderr, f.fs.Name(), "%v", err) }
	filter, err := ff.filter(f.queues.first())
	if err != nil {
		return bad(err)
	}
	if err := intFlag("--limit", limit, 1, queue.MaxPageSize); err != nil {
		return bad(err)
	}
	filter.After, filter.Limit = after, limit
	q, closeFn, code := f.open(ctx, stderr, openReadOnly)
	if q == nil {
		return code
	}
	defer closeFn()
	page, err := q.Jobs(ctx, filter)
	if errors.Is(err, queue.ErrInvalid) {
		return bad(err)
	}
	if err != nil {
		return f.fail(stderr, err)
	}
	now := time.Now().UnixMilli()
	for _, j := range page.Jobs {
		if f.jsonOut {
			writeJSON(stdout, toJobJSON(j, false))
			continue
		}
		fmt.Fprintf(stdout, "%s\t%s\tattempts %d/%d\t%s ago\t%s\n", j.ID, strings.TrimSpace(string(j.State)+" "+string(j.DeadReason)),
			j.Attempts, j.MaxAttempts, age(now, j.Since()), redact.Text(j.LastError))
	}
	if page.Next != "" && !f.jsonOut {
		fmt.Fprintf(stdout, "more: --after %s\n", page.Next)
	}
	return exitOK
}

// age is how long before now ms was, rounded for a person.
func age(now, ms int64) time.Duration {
	d := time.Duration(max(now-ms, 0)) * time.Millisecond
	if d >= time.Minute {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}

// ---- cancel ----

func queueCancel(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f := newQueueFlags("cancel", queueWrites)
	var id string
	var all, dryRun bool
	var limit int
	var rate float64
	var ff filterFlags
	f.fs.StringVar(&id, "id", "", "the pending job's ID (or --all)")
	actor := actorFlag(f.fs)
	f.fs.BoolVar(&all, "all", false, "cancel every pending job the filters select (instead of --id), paced at --rate")
	ff.register(f.fs, false)
	f.fs.IntVar(&limit, "limit", 0, "with --all: cancel at most this many jobs (0: all)")
	f.fs.Float64Var(&rate, "rate", 10, "with --all: jobs cancelled per second")
	f.fs.BoolVar(&dryRun, "dry-run", false, "with --all: list the jobs that would be cancelled; change nothing")
	if code, ok := f.parse(args, stdout, stderr); !ok {
		return code
	}
	bad := func(err error) int { return usageError(stderr, f.fs.Name(), "%v", err) }
	switch {
	case id != "" && all:
		return bad(errors.New("give --id or --all, not both"))
	case id == "" && !all:
		return bad(errors.New("--id is required (or --all, to cancel many pending jobs)"))
	case !all && (ff != filterFlags{} || limit != 0 || dryRun):
		return bad(errors.New("--id-prefix, --older-than, --newer-than, --limit and --dry-run select jobs for --all"))
	case math.IsNaN(rate) || rate <= 0 || rate > queue.MaxRedriveRate:
		return bad(fmt.Errorf("--rate must be in (0, %d] jobs per second, got %v", queue.MaxRedriveRate, rate))
	case limit < 0:
		return bad(fmt.Errorf("--limit must be >= 0, got %d", limit))
	}
	who, err := actorOf(*actor)
	if err != nil {
		return bad(err)
	}
	filter, err := ff.filter(f.queues.first())
	if err != nil {
		return bad(err)
	}
	if id != "" {
		if err := queue.ValidateID(id); err != nil {
			return bad(fmt.Errorf("--id: %w", err))
		}
	}
	q, closeFn, code := f.open(ctx, stderr, openExisting)
	if q == nil {
		return code
	}
	defer closeFn()
	if !all {
		j, err := q.Cancel(ctx, id, who)
		if err != nil {
			return actionFailed(f, stderr, err)
		}
		if f.jsonOut {
			writeJSON(stdout, toJobJSON(j, false))
		} else {
			fmt.Fprintf(stdout, "cancelled %s (by %s)\n", j.ID, who)
		}
		return exitOK
	}
	b := queue.Bulk{Filter: filter, Max: limit, Rate: rate, DryRun: dryRun, Actor: who}
	b.OnJob = func(j queue.Job) {
		switch {
		case f.jsonOut:
			writeJSON(stdout, toJobJSON(j, false))
		case dryRun:
			fmt.Fprintf(stdout, "would cancel %s (enqueued %s)\n", j.ID, fmtMs(j.CreatedAt))
		default:
			fmt.Fprintf(stdout, "cancelled %s\n", j.ID)
		}
	}
	res, err := q.CancelAll(ctx, b)
	if errors.Is(err, queue.ErrInvalid) {
		return bad(err)
	}
	if !f.jsonOut {
		verb := "cancelled"
		if dryRun {
			verb = "would cancel"
		}
		fmt.Fprintf(stdout, "%s %d pending jobs (%d skipped: no longer pending)\n", verb, res.Acted, res.Skipped)
	}
	if err != nil {
		return f.fail(stderr, err)
	}
	return exitOK
}

// actionFailed reports an action refused or failed: exit 2 for bad input,
// 1 otherwise (the message names the job and why).
func actionFailed(f *queueFlags, stderr io.Writer, err error) int {
	if errors.Is(err, queue.ErrInvalid) {
		return usageError(stderr, f.fs.Name(), "%v", err)
	}
	return f.fail(stderr, err)
}

// ---- delete ----

func queueDelete(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f := newQueueFlags("delete", queueWrites)
	var id string
	f.fs.StringVar(&id, "id", "", "the job's ID (required): pending, done or dead, not leased")
	actor := actorFlag(f.fs)
	if code, ok := f.parse(args, stdout, stderr); !ok {
		return code
	}
	bad := func(err error) int { return usageError(stderr, f.fs.Name(), "%v", err) }
	if id == "" {
		return bad(errors.New("--id is required"))
	}
	if err := queue.ValidateID(id); err != nil {
		return bad(fmt.Errorf("--id: %w", err))
	}
	who, err := actorOf(*actor)
	if err != nil {
		return bad(err)
	}
	q, closeFn, code := f.open(ctx, stderr, openExisting)
	if q == nil {
		return code
	}
	defer closeFn()
	j, err := q.Delete(ctx, id, who)
	if err != nil {
		return actionFailed(f, stderr, err)
	}
	if f.jsonOut {
		writeJSON(stdout, toJobJSON(j, false))
	} else {
		fmt.Fprintf(stdout, "deleted %s (was %s)\n", j.ID, strings.TrimSpace(string(j.State)+" "+string(j.DeadReason)))
	}
	return exitOK
}

// ---- pause, resume ----

func queuePause(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return queueSetPaused(ctx, "pause", args, stdout, stderr)
}

func queueResume(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return queueSetPaused(ctx, "resume", args, stdout, stderr)
}

func queueSetPaused(ctx context.Context, verb string, args []string, stdout, stderr io.Writer) int {
	f := newQueueFlags(verb, queueWrites)
	actor := actorFlag(f.fs)
	var list bool
	if verb == "pause" {
		f.fs.BoolVar(&list, "list", false, "list the paused queues (changes nothing)")
	}
	if code, ok := f.parse(args, stdout, stderr); !ok {
		return code
	}
	who, err := actorOf(*actor)
	if err != nil {
		return usageError(stderr, f.fs.Name(), "%v", err)
	}
	mode := openExisting
	if list {
		mode = openReadOnly
	}
	q, closeFn, code := f.open(ctx, stderr, mode)
	if q == nil {
		return code
	}
	defer closeFn()
	if list {
		ps, err := q.Pauses(ctx)
		if err != nil {
			return f.fail(stderr, err)
		}
		for _, p := range ps {
			if f.jsonOut {
				writeJSON(stdout, pauseJSON{p.Queue, p.At, p.Actor})
				continue
			}
			fmt.Fprintf(stdout, "%s\tpaused %s by %s\n", p.Queue, fmtMs(p.At), p.Actor)
		}
		return exitOK
	}
	name := f.queues.first()
	var changed bool
	if verb == "pause" {
		changed, err = q.Pause(ctx, name, who)
	} else {
		changed, err = q.Resume(ctx, name, who)
	}
	if err != nil {
		return actionFailed(f, stderr, err)
	}
	if f.jsonOut {
		writeJSON(stdout, struct {
			Queue   string `json:"queue"`
			Action  string `json:"action"`
			Changed bool   `json:"changed"`
		}{name, verb, changed})
		return exitOK
	}
	switch {
	case changed && verb == "pause":
		fmt.Fprintf(stdout, "paused %s: workers claim none of its jobs until resume\n", name)
	case changed:
		fmt.Fprintf(stdout, "resumed %s\n", name)
	case verb == "pause":
		fmt.Fprintf(stdout, "%s was paused already\n", name)
	default:
		fmt.Fprintf(stdout, "%s was not paused\n", name)
	}
	return exitOK
}

type pauseJSON struct {
	Queue string `json:"queue"`
	AtMs  int64  `json:"at_ms"`
	Actor string `json:"actor"`
}

// ---- history, for show ----

type eventJSON struct {
	AtMs   int64  `json:"at_ms"`
	Actor  string `json:"actor"`
	Action string `json:"action"`
	Detail string `json:"detail"`
}

// history reads a job's history for show; a store without one (not an
// AdminStore) has none.
func history(ctx context.Context, q *queue.Queue, id string) ([]eventJSON, error) {
	evs, err := q.History(ctx, id)
	if errors.Is(err, queue.ErrNoAdmin) {
		return nil, nil
	}
	out := make([]eventJSON, len(evs))
	for i, e := range evs {
		out[i] = eventJSON{e.At, e.Actor, e.Action, e.Detail}
	}
	return out, err
}

// printHistory prints the history lines of show.
func printHistory(w io.Writer, evs []eventJSON) {
	if len(evs) == 0 {
		fmt.Fprintf(w, "history       -\n")
		return
	}
	for i, e := range evs {
		label := ""
		if i == 0 {
			label = "history"
		}
		actor := e.Actor
		if actor == "" {
			actor = "(unnamed)"
		}
		fmt.Fprintf(w, "%-13s %s  %s by %s: %s\n", label, fmtMs(e.AtMs), e.Action, actor, e.Detail)
	}
}
