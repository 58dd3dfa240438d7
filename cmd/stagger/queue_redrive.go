package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/staggerhq/stagger/internal/redact"
	"github.com/staggerhq/stagger/queue"
)

// redriveFlags are the flags of `queue requeue --all`: many dead jobs at
// once, selected by reason and age, paced at a rate.
type redriveFlags struct {
	all                  bool
	reason, idPrefix     string
	olderThan, newerThan string
	limit                int
	rate                 float64
	dryRun               bool
}

func (r *redriveFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&r.all, "all", false, "requeue every dead job the filters select (instead of --id), paced at --rate")
	fs.StringVar(&r.reason, "reason", "", "with --all: only jobs dead for this reason (exhausted, deadline, permanent)")
	fs.StringVar(&r.idPrefix, "id-prefix", "", "with --all: only jobs whose ID starts with this")
	fs.StringVar(&r.olderThan, "older-than", "", "with --all: only jobs that died longer ago than this (a duration or Nd)")
	fs.StringVar(&r.newerThan, "newer-than", "", "with --all: only jobs that died less long ago than this (a duration or Nd)")
	fs.IntVar(&r.limit, "limit", 0, "with --all: requeue at most this many jobs (0: all)")
	fs.Float64Var(&r.rate, "rate", 10, "with --all: jobs requeued per second, so that a dependency that just recovered is not handed every dead job at once")
	fs.BoolVar(&r.dryRun, "dry-run", false, "with --all: list the jobs that would be requeued; change nothing")
}

// check validates the choice between --id and --all.
func (r *redriveFlags) check(id string) error {
	switch {
	case id != "" && r.all:
		return errors.New("give --id or --all, not both")
	case id == "" && !r.all:
		return errors.New("--id is required (or --all, to requeue many dead jobs)")
	case !r.all && (r.reason != "" || r.idPrefix != "" || r.olderThan != "" || r.newerThan != "" || r.limit != 0 || r.dryRun):
		return errors.New("--reason, --id-prefix, --older-than, --newer-than, --limit and --dry-run select jobs for --all")
	case math.IsNaN(r.rate) || r.rate <= 0 || r.rate > queue.MaxRedriveRate:
		return fmt.Errorf("--rate must be in (0, %d] jobs per second, got %v", queue.MaxRedriveRate, r.rate)
	case r.limit < 0:
		return fmt.Errorf("--limit must be >= 0, got %d", r.limit)
	}
	return nil
}

// run requeues the selected dead jobs; deadline is a duration from each
// job's requeue.
func (r *redriveFlags) run(ctx context.Context, f *queueFlags, grant int, deadline, actor string, stdout, stderr io.Writer) int {
	bad := func(err error) int { return usageError(stderr, f.fs.Name(), "%v", err) }
	dl, err := time.ParseDuration(deadline)
	if err != nil {
		return bad(fmt.Errorf("--deadline: with --all it is a duration from each job's requeue (such as 1h), got %q", deadline))
	}
	rd := queue.Redrive{Reason: queue.DeadReason(r.reason), Limit: r.limit, Grant: grant, Deadline: dl, Rate: r.rate, DryRun: r.dryRun,
		IDPrefix: r.idPrefix, Actor: actor}
	for _, a := range []struct {
		name string
		s    string
		dst  *time.Duration
	}{{"--older-than", r.olderThan, &rd.OlderThan}, {"--newer-than", r.newerThan, &rd.NewerThan}} {
		if a.s != "" {
			if *a.dst, err = parseDays(a.name, a.s); err != nil {
				return bad(err)
			}
		}
	}
	q, closeFn, code := f.open(ctx, stderr, openExisting)
	if q == nil {
		return code
	}
	defer closeFn()
	verb := "requeued"
	if r.dryRun {
		verb = "would requeue"
	}
	rd.OnJob = func(j queue.Job) {
		if f.jsonOut {
			writeJSON(stdout, toJobJSON(j, false))
			return
		}
		if r.dryRun {
			fmt.Fprintf(stdout, "would requeue %s (%s, died %s): %s\n", j.ID, j.DeadReason, fmtMs(j.FinishedAt), redact.Text(j.LastError))
			return
		}
		fmt.Fprintf(stdout, "requeued %s: attempts %d/%d, deadline %s\n", j.ID, j.Attempts, j.MaxAttempts, fmtMs(j.Deadline))
	}
	res, err := q.Redrive(ctx, rd)
	if errors.Is(err, queue.ErrInvalid) {
		return bad(err)
	}
	if !f.jsonOut {
		fmt.Fprintf(stdout, "%s %d dead jobs (%d skipped: no longer dead)\n", verb, res.Requeued, res.Skipped)
	}
	if err != nil {
		return f.fail(stderr, err)
	}
	return exitOK
}
