package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/staggerhq/stagger/internal/redact"
	"github.com/staggerhq/stagger/queue"
)

// newLogger returns the slog logger of `queue work`: format "text" or
// "json", on w.
func newLogger(w io.Writer, format string) (*slog.Logger, error) {
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, nil)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, nil)), nil
	}
	return nil, fmt.Errorf("--log-format must be text or json, got %q", format)
}

// workLog logs every outcome of a Worker, counts them for the progress
// lines and the summary, and logs the worker's errors. Its methods are
// safe for concurrent use.
type workLog struct {
	log   *slog.Logger
	db    string // the --db value, to redact from errors
	start time.Time

	done, retried, dead, snoozed, unknown, released, lost, errs atomic.Int64
	purged, buried                                              atomic.Int64
}

// result logs one attempt's end (WorkerConfig.OnResult).
func (l *workLog) result(r queue.Result) {
	j := r.Job
	attrs := []any{"queue", j.Queue, "id", j.ID, "attempt", j.Attempts, "max_attempts", j.MaxAttempts, "took", r.Took.Round(time.Microsecond)}
	switch {
	case errors.Is(r.Err, queue.ErrLeaseLost):
		l.lost.Add(1)
		l.log.Warn("lease lost: another attempt owns the job", append(attrs, "error", redact.Error(r.Err, l.db))...)
	case !r.Recorded:
		l.errs.Add(1)
		l.log.Error("attempt not recorded", append(attrs, "error", redact.Error(r.Err, l.db))...)
	case errors.Is(r.Err, context.Canceled) && j.State == queue.Pending:
		l.released.Add(1)
		l.log.Info("released at shutdown", attrs...)
	case r.Snoozed && j.State == queue.Pending:
		l.snoozed.Add(1)
		l.log.Info("snoozed", append(attrs, "until", fmtMs(j.AvailableAt))...)
	case j.State == queue.Done:
		l.done.Add(1)
		l.log.Info("done", attrs...)
	case j.State == queue.Pending:
		l.retried.Add(1)
		l.log.Warn("retry", append(attrs, "at", fmtMs(j.AvailableAt), "error", redact.Text(j.LastError, l.db))...)
	case j.State == queue.Dead:
		l.dead.Add(1)
		l.log.Error("dead", append(attrs, "reason", string(j.DeadReason), "error", redact.Text(j.LastError, l.db))...)
	default: // leased: an error of no class, or a clock that went backwards
		l.unknown.Add(1)
		msg := "outcome unknown: the job stays leased until its lease expires"
		l.log.Warn(msg, append(attrs, "lease_until", fmtMs(j.LeaseUntil), "error", redact.Error(r.Err, l.db))...)
	}
}

// failure logs an error of the worker (WorkerConfig.OnError).
func (l *workLog) failure(err error) {
	l.errs.Add(1)
	l.log.Error("worker error", "error", redact.Error(err, l.db))
}

// maintenance logs what a maintenance pass did, when it did something.
func (l *workLog) maintenance(m queue.Maintenance) {
	l.buried.Add(int64(m.Buried))
	l.purged.Add(int64(m.PurgedDone + m.PurgedDead))
	if m.Buried+m.PurgedDone+m.PurgedDead > 0 {
		l.log.Info("maintenance", "buried", m.Buried, "purged_done", m.PurgedDone, "purged_dead", m.PurgedDead)
	}
}

// counts are the totals so far, as slog attributes.
func (l *workLog) counts() []any {
	return []any{"done", l.done.Load(), "retried", l.retried.Load(), "dead", l.dead.Load(),
		"snoozed", l.snoozed.Load(), "unknown", l.unknown.Load(), "released", l.released.Load(),
		"lease_lost", l.lost.Load(), "errors", l.errs.Load(), "buried", l.buried.Load(), "purged", l.purged.Load()}
}

func (l *workLog) finished() int64 {
	return l.done.Load() + l.retried.Load() + l.dead.Load() + l.snoozed.Load() + l.unknown.Load()
}

// progress logs a progress line every interval until ctx is done.
func (l *workLog) progress(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	last, lastAt := l.finished(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			n := l.finished()
			rate := float64(n-last) / now.Sub(lastAt).Seconds()
			last, lastAt = n, now
			l.log.Info("progress", append(l.counts(), "attempts_per_s", fmt.Sprintf("%.1f", rate))...)
		}
	}
}

// summary logs the totals at shutdown.
func (l *workLog) summary(err error) {
	attrs := append(l.counts(), "uptime", time.Since(l.start).Round(time.Millisecond))
	if err != nil {
		l.log.Error("stopped", append(attrs, "error", redact.Error(err, l.db))...)
		return
	}
	l.log.Info("stopped", attrs...)
}
