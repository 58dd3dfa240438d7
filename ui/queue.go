package ui

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/staggerhq/stagger/queue"
)

// NewQueues adapts a durable queue to the dashboard: every named queue of
// q's store (counts, pauses, job search, cancel, requeue), and its dead
// jobs as a dead-letter source (the Queues it returns has a DeadLetters
// method the dashboard finds). The operator's actions need a store that
// is a queue.AdminStore (every store of this repository); on another, they
// answer 501.
func NewQueues(q *queue.Queue) Queues {
	return &queues{q: q, named: map[string]*queue.Queue{}}
}

type queues struct {
	q     *queue.Queue
	mu    sync.Mutex
	named map[string]*queue.Queue // per queue name, for searches and redrives
	// seen are the queues' names as the last Overview read them, at
	// seenAt: a search of every queue takes them while they are fresher
	// than namesFresh rather than count the whole store again.
	seen   []string
	seenAt time.Time
}

// namesFresh is how old the names a search of every queue takes from the
// last Overview (which the dashboard reads every Config.Interval) may be;
// older, the search reads them from the store's counts itself.
const namesFresh = time.Minute

// Bounds of the jobs one search reads: queues searched × page size. A
// job search reads no payloads (queue.Filter.NoPayload), so a row is at
// most an ID, a queue name and an error of queue.MaxLastErrorLen bytes;
// the dead-letters list reads payloads for their sizes.
const (
	maxRowsListed = 20000
	maxRowsRead   = 5000
)

// opError keeps a source's message and says which kind of refusal it is.
type opError struct {
	kind error
	err  error
}

func (e *opError) Error() string        { return e.err.Error() }
func (e *opError) Is(target error) bool { return target == e.kind }
func (e *opError) Unwrap() error        { return e.err }

// mapErr sorts the queue's errors into the dashboard's kinds.
func mapErr(err error) error {
	var kind error
	switch {
	case err == nil:
		return nil
	case errors.Is(err, queue.ErrNotFound):
		kind = ErrNotFound
	case errors.Is(err, queue.ErrLeased), errors.Is(err, queue.ErrNotPending), errors.Is(err, queue.ErrNotDead):
		kind = ErrConflict
	case errors.Is(err, queue.ErrNoAdmin), errors.Is(err, queue.ErrNoStatsByQueue):
		kind = ErrUnsupported
	case errors.Is(err, queue.ErrInvalid):
		kind = ErrInvalid
	default:
		return err
	}
	return &opError{kind, err}
}

func (s *queues) named1(name string) (*queue.Queue, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if q := s.named[name]; q != nil {
		return q, nil
	}
	if name == s.q.Config().Queue {
		s.named[name] = s.q
		return s.q, nil
	}
	if len(s.named) >= maxQueuesShown {
		return nil, fmt.Errorf("ui: more than %d queues", maxQueuesShown)
	}
	cfg := s.q.Config()
	cfg.Queue = name
	q, err := queue.New(s.q.Store(), cfg)
	if err != nil {
		return nil, err
	}
	s.named[name] = q
	return q, nil
}

// fresh are the names the last Overview read, if it was less than
// namesFresh ago (a queue whose first job came after it is searched from
// the next one on); else nil.
func (s *queues) fresh() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil || time.Since(s.seenAt) > namesFresh {
		return nil
	}
	return s.seen
}

// names are the store's queues (its own among them), in name order.
func (s *queues) names(ctx context.Context) ([]string, map[string]queue.Stats, error) {
	by, err := s.q.StatsByQueue(ctx)
	if err != nil {
		return nil, nil, mapErr(err)
	}
	if _, ok := by[s.q.Config().Queue]; !ok {
		st, err := s.q.Stats(ctx)
		if err != nil {
			return nil, nil, err
		}
		by[s.q.Config().Queue] = st
	}
	names := make([]string, 0, len(by))
	for n := range by {
		names = append(names, n)
	}
	slices.Sort(names)
	return names, by, nil
}

func (s *queues) Overview(ctx context.Context) ([]QueueInfo, error) {
	names, by, err := s.names(ctx)
	if err != nil {
		return nil, err
	}
	paused := map[string]bool{}
	if ps, err := s.q.Pauses(ctx); err == nil {
		for _, p := range ps {
			paused[p.Queue] = true
		}
	} else if !errors.Is(err, queue.ErrNoAdmin) {
		return nil, err
	}
	s.mu.Lock()
	s.seen, s.seenAt = names, time.Now()
	s.mu.Unlock()
	out := make([]QueueInfo, 0, len(names))
	for _, n := range names {
		st := by[n]
		out = append(out, QueueInfo{Name: n, Due: st.PendingDue, Scheduled: st.PendingScheduled, Leased: st.Leased,
			Dying: st.DueToDie, Done: st.Done, Dead: st.Dead(), Canceled: st.DeadCanceled,
			LagMs: st.OldestPendingAge(), Paused: paused[n]})
	}
	return out, nil
}

func (s *queues) Jobs(ctx context.Context, f JobFilter) ([]JobInfo, string, error) {
	return s.search(ctx, f, false)
}

// search is Jobs, reading the payloads when payloads is true.
func (s *queues) search(ctx context.Context, f JobFilter, payloads bool) ([]JobInfo, string, error) {
	var names []string
	if f.Queue != "" {
		names = []string{f.Queue}
	} else if names = s.fresh(); names == nil {
		var err error
		if names, _, err = s.names(ctx); err != nil {
			return nil, "", err
		}
	}
	bound, what := maxRowsListed, "jobs"
	if payloads {
		bound, what = maxRowsRead, "jobs with their payloads"
	}
	if len(names)*f.Limit > bound {
		return nil, "", &opError{ErrInvalid, fmt.Errorf("searching %d queues for %d jobs each reads up to %d %s, more than %d: choose a queue or a smaller limit",
			len(names), f.Limit, len(names)*f.Limit, what, bound)}
	}
	// IDs are unique across the queues of a store and every page is in
	// ID order, so the first Limit of the queues' pages merged is the
	// page of them all.
	var all []queue.Job
	for _, n := range names {
		q, err := s.named1(n)
		if err != nil {
			return nil, "", err
		}
		p, err := q.Jobs(ctx, queue.Filter{Queue: n, State: queue.State(f.State), Reason: queue.DeadReason(f.Reason),
			IDPrefix: f.Prefix, OlderThan: f.OlderThan, After: f.After, Limit: f.Limit, NoPayload: !payloads})
		if errors.Is(err, queue.ErrNoAdmin) {
			p.Jobs, err = s.list(ctx, n, f)
		}
		if err != nil {
			return nil, "", mapErr(err)
		}
		all = append(all, p.Jobs...)
	}
	slices.SortFunc(all, func(a, b queue.Job) int { return cmp.Compare(a.ID, b.ID) })
	next := ""
	if len(all) > f.Limit {
		all = all[:f.Limit]
	}
	if len(all) == f.Limit {
		next = all[len(all)-1].ID
	}
	out := make([]JobInfo, len(all))
	for i, j := range all {
		out[i] = jobInfo(j)
		if !payloads {
			out[i].PayloadSize = -1
		}
	}
	return out, next, nil
}

// list is a search on a store without the operator API: it lists each
// state's jobs (Store.List) and keeps those f selects, reading at most 20
// of its pages per state.
func (s *queues) list(ctx context.Context, name string, f JobFilter) ([]queue.Job, error) {
	states := queue.AllStates
	if f.State != "" {
		states = []queue.State{queue.State(f.State)}
	} else if f.Reason != "" {
		states = []queue.State{queue.Dead}
	}
	now := s.q.Now()
	var out []queue.Job
	for _, st := range states {
		after, kept := f.After, 0
		for range 20 {
			raw, err := s.q.Store().List(ctx, name, st, after, f.Limit)
			if err != nil {
				return nil, err
			}
			for _, j := range raw {
				if strings.HasPrefix(j.ID, f.Prefix) && (f.Reason == "" || string(j.DeadReason) == f.Reason) &&
					(f.OlderThan == 0 || j.Since() < now-f.OlderThan.Milliseconds()) && kept < f.Limit {
					out = append(out, j)
					kept++
				}
			}
			if len(raw) < f.Limit || kept == f.Limit {
				break
			}
			after = raw[len(raw)-1].ID
		}
	}
	return out, nil
}

func jobInfo(j queue.Job) JobInfo {
	return JobInfo{ID: j.ID, Queue: j.Queue, State: string(j.State), Reason: string(j.DeadReason),
		Attempts: j.Attempts, MaxAttempts: j.MaxAttempts, LastError: j.LastError, PayloadSize: len(j.Payload),
		CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt, AvailableAt: j.AvailableAt, Deadline: j.Deadline, FinishedAt: j.FinishedAt}
}

func (s *queues) Job(ctx context.Context, id string, maxPayload int) (JobDetail, error) {
	j, err := s.q.Get(ctx, id)
	if err != nil {
		if errors.Is(err, queue.ErrNotFound) {
			return JobDetail{}, &opError{ErrNotFound, fmt.Errorf("no job has the ID %q", clip(id))}
		}
		return JobDetail{}, err
	}
	d := JobDetail{JobInfo: jobInfo(j)}
	d.Payload = j.Payload[:min(len(j.Payload), maxPayload)]
	d.History = append(d.History, HistoryEntry{At: j.CreatedAt, What: "enqueued"})
	evs, err := s.q.History(ctx, id)
	if err != nil && !errors.Is(err, queue.ErrNoAdmin) {
		return JobDetail{}, err
	}
	for _, e := range evs {
		what := e.Action
		if e.Actor != "" {
			what += " by " + e.Actor
		}
		d.History = append(d.History, HistoryEntry{At: e.At, What: what, Detail: e.Detail})
	}
	if j.Attempts > 0 {
		last := fmt.Sprintf("attempt %d of %d", j.Attempts, j.MaxAttempts)
		if j.LastError != "" {
			last += " failed"
		}
		d.History = append(d.History, HistoryEntry{At: j.UpdatedAt, What: "last change: " + last, Detail: j.LastError})
	}
	if j.FinishedAt != 0 {
		what := string(j.State)
		if j.DeadReason != "" {
			what += " (" + string(j.DeadReason) + ")"
		}
		d.History = append(d.History, HistoryEntry{At: j.FinishedAt, What: what})
	}
	slices.SortStableFunc(d.History, func(a, b HistoryEntry) int { return cmp.Compare(a.At, b.At) })
	return d, nil
}

func (s *queues) Cancel(ctx context.Context, id, actor string) (JobInfo, error) {
	j, err := s.q.Cancel(ctx, id, actor)
	return jobInfo(j), mapErr(err)
}

func (s *queues) Requeue(ctx context.Context, id string, grant int, deadline time.Duration, actor string) (JobInfo, error) {
	j, err := s.q.RequeueAs(ctx, id, grant, s.q.Now()+deadline.Milliseconds(), actor)
	if errors.Is(err, queue.ErrNotDead) {
		state := "unknown"
		if g, gerr := s.q.Get(ctx, id); gerr == nil {
			state = string(g.State)
		}
		err = fmt.Errorf("%w: cannot requeue %q (state %s): only a dead job is requeued; nothing was changed", err, clip(id), state)
	}
	return jobInfo(j), mapErr(err)
}

func (s *queues) SetPaused(ctx context.Context, name string, paused bool, actor string) error {
	var changed bool
	var err error
	if paused {
		changed, err = s.q.Pause(ctx, name, actor)
	} else {
		changed, err = s.q.Resume(ctx, name, actor)
	}
	if err != nil {
		return mapErr(err)
	}
	if !changed {
		state := "running"
		if paused {
			state = "paused"
		}
		return &opError{ErrConflict, fmt.Errorf("queue %s is already %s; nothing was changed", name, state)}
	}
	return nil
}

// DeadLetters is the queue's dead jobs as a dead-letter source.
func (s *queues) DeadLetters() DeadLetters { return queueDead{s} }

type queueDead struct{ s *queues }

func (d queueDead) Name() string { return "queue" }

func (d queueDead) List(ctx context.Context, limit int) ([]DeadLetter, error) {
	jobs, _, err := d.s.search(ctx, JobFilter{State: "dead", Limit: limit}, true)
	if err != nil {
		return nil, err
	}
	out := make([]DeadLetter, len(jobs))
	for i, j := range jobs {
		out[i] = DeadLetter{ID: j.ID, Reason: j.Reason, Attempts: j.Attempts, Error: j.LastError,
			At: j.FinishedAt, Size: j.PayloadSize, To: "queue " + j.Queue}
	}
	return out, nil
}

// Redrive requeues the dead jobs of every queue, one queue after the
// other, paced at r.Rate, each with r.Grant attempts and r.Deadline.
func (d queueDead) Redrive(ctx context.Context, r Redrive, each func(DeadLetter)) (RedriveResult, error) {
	names, _, err := d.s.names(ctx)
	if err != nil {
		return RedriveResult{}, err
	}
	var res RedriveResult
	for _, n := range names {
		q, err := d.s.named1(n)
		if err != nil {
			return res, err
		}
		left := 0
		if r.Limit > 0 {
			if left = r.Limit - res.Matched; left <= 0 {
				break
			}
		}
		qr, err := q.Redrive(ctx, queue.Redrive{Reason: queue.DeadReason(r.Reason), Limit: left, Grant: r.Grant,
			Deadline: r.Deadline, Rate: r.Rate, DryRun: r.DryRun, Actor: r.Actor,
			OnJob: func(j queue.Job) {
				each(DeadLetter{Source: "queue", ID: j.ID, Reason: string(j.DeadReason), Attempts: j.Attempts,
					Error: j.LastError, At: j.FinishedAt, Size: len(j.Payload), To: "queue " + j.Queue})
			}})
		res.Matched += qr.Requeued + qr.Skipped
		if !r.DryRun {
			res.Moved += qr.Requeued
		}
		res.Skipped += qr.Skipped
		if err != nil {
			return res, mapErr(err)
		}
	}
	return res, nil
}
