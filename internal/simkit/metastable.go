package simkit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/budget"
	"github.com/staggerhq/stagger/retry"
)

// MetastableConfig is the retry case of Huang et al., "Metastable Failures
// in the Wild" (OSDI '22; lexiangh/Metastability, Retry_Metastability): a
// client sends Rate requests per second, open loop, each with a Timeout
// and up to Resends immediate resends after a timeout; a trigger cuts the
// server's capacity to Cut of normal for a set length. A short cut is
// absorbed; a long enough one fills the queue past the timeout, every
// request then times out and is resent, the resends keep the queue full,
// and the server stays overloaded after its capacity is back: a
// metastable failure, sustained by the retries alone.
//
// The defaults are the paper's experiment: 13,333 req/s (one request
// every 75 µs), a 3 s timeout, 4 resends, and the server's CPU cut to
// 0.40 of its 2 vCPUs (Cut 0.2) 10 s into the run. The paper's cases: a
// 10 s cut at 0.40 CPU fails metastably; 9 s at 0.40, 10 s at 0.45 CPU
// (Cut 0.225) and 10 s at 10,000 req/s recover. The server here is one
// FIFO queue that serves Capacity requests per second (Capacity × Cut
// during the cut) and, as the database did, finishes the work of a
// request whose client has already timed out. Capacity is not in the
// paper; the default 34,000 req/s puts all four of its cases on the side
// it reports (with 25,000 the 0.40 cut tips at 7 s, with 38,000 at 11 s). The sweep runs each cut length in CutLens with and without
// a retry budget (budget.TokenBucket's defaults: one retry per ten
// requests, shared by the client).
type MetastableConfig struct {
	Rate       float64         // requests per second, Poisson
	Capacity   float64         // requests per second the server serves at full capacity
	Cut        float64         // the server's capacity during the cut, as a fraction of Capacity
	CutAt      time.Duration   // when the cut starts
	CutLens    []time.Duration // cut lengths swept
	Timeout    time.Duration   // client timeout per attempt
	Resends    int             // resends after timeouts (attempts = Resends + 1)
	Duration   time.Duration   // simulated time
	Strategies []string        // of "retries", "budget"
}

var metastableStrategies = []string{"retries", "budget"}

// DefaultMetastable returns the paper's experiment (see [MetastableConfig])
// with cut lengths 8, 9, 10 and 11 s.
func DefaultMetastable() MetastableConfig {
	return MetastableConfig{Rate: 1e9 / 75_000, Capacity: 34_000, Cut: 0.2, CutAt: 10 * time.Second,
		CutLens: []time.Duration{8 * time.Second, 9 * time.Second, 10 * time.Second, 11 * time.Second},
		Timeout: 3 * time.Second, Resends: 4, Duration: 50 * time.Second, Strategies: metastableStrategies}
}

// Params returns the scenario's parameters.
func (c *MetastableConfig) Params() []*Param {
	return []*Param{
		floatParam(&c.Rate, "rate", "requests per second (Poisson)", 0.001, 1e6),
		floatParam(&c.Capacity, "capacity", "requests per second the server serves at full capacity", 0.001, 1e7),
		floatParam(&c.Cut, "cut", "server capacity during the cut, as a fraction of capacity", 0, 1),
		durParam(&c.CutAt, "cut-at", "when the cut starts", 0, 24*time.Hour),
		dursParam(&c.CutLens, "cut-len", "cut lengths to compare, comma-separated"),
		durParam(&c.Timeout, "timeout", "client timeout per attempt (the server still does the work)", time.Millisecond, time.Hour),
		intParam(&c.Resends, "resends", "immediate resends after timeouts", 0, 100),
		durParam(&c.Duration, "duration", "simulated time (the last 10 s are judged)", 11*time.Second, 24*time.Hour),
		listParam(&c.Strategies, "strategy", "strategies", metastableStrategies),
	}
}

func (c *MetastableConfig) validate() error {
	if err := checkParams(c.Params()); err != nil {
		return err
	}
	if n := c.Rate * float64(c.Resends+1) * c.Duration.Seconds() * float64(len(c.CutLens)*len(c.Strategies)); n > 1e9 {
		return invalid("duration", "rate × attempts × duration × cut lengths × strategies must be <= 1e9 attempts, got %.3g", n)
	}
	return nil
}

// fifo is a single server queue whose speed is 1 except during [from, to),
// where it is cut: finish returns when a request needing work (seconds at
// full speed) that arrives at t completes, after all work accepted before.
type fifo struct {
	from, to time.Duration
	cut      float64
	free     time.Duration // when the server finishes what it holds
}

func (q *fifo) finish(t time.Duration, work float64) time.Duration {
	s := max(t, q.free)
	if s < q.from {
		if end := s + time.Duration(work*1e9); end <= q.from {
			q.free = end
			return end
		}
		work -= (q.from - s).Seconds()
		s = q.from
	}
	if s < q.to {
		if q.cut > 0 && work <= (q.to-s).Seconds()*q.cut {
			q.free = s + time.Duration(work/q.cut*1e9)
			return q.free
		}
		work -= (q.to - s).Seconds() * q.cut
		s = q.to
	}
	q.free = s + time.Duration(work*1e9)
	return q.free
}

type metaRun struct {
	requests, attempts, successes, timeouts, wasted int64
	goodput, load                                   []int64 // per second
	maxWait                                         time.Duration
	events                                          uint64
}

const (
	evMetaNew     int32 = iota // an original request is sent
	evMetaOK                   // an attempt's answer reaches the client in time (ID: request)
	evMetaTimeout              // an attempt times out (ID: request)
)

func (c *MetastableConfig) runOne(strategy string, cutLen time.Duration, seed uint64) metaRun {
	p := &retry.Policy{MaxAttempts: c.Resends + 1, Schedule: backoff.Constant(0), Rand: pcg(seed, 1)}
	if strategy == "budget" {
		p.Budget = &budget.TokenBucket{}
	}
	d := driver{p}
	rng := rand.New(pcg(seed, 2))
	secs := int(c.Duration / time.Second)
	out := metaRun{goodput: make([]int64, secs), load: make([]int64, secs)}
	q := &fifo{from: c.CutAt, to: c.CutAt + cutLen, cut: c.Cut}
	work := 1 / c.Capacity
	e := NewEngine(1 << 16)
	attempt := make([]int32, 0, int(c.Rate*c.Duration.Seconds())+16)
	ls := make([]ledger, 0, cap(attempt)) // each request's, beside its attempt
	count := func(xs []int64, t time.Duration) {
		if i := int(t / time.Second); i < len(xs) {
			xs[i]++
		}
	}
	send := func(id int32, now time.Duration) {
		attempt[id]++
		out.attempts++
		count(out.load, now)
		done := q.finish(now, work)
		out.maxWait = max(out.maxWait, done-now)
		if done-now <= c.Timeout {
			e.At(done, evMetaOK, id)
			return
		}
		out.wasted++ // the server does it after its client stopped waiting
		e.At(now+c.Timeout, evMetaTimeout, id)
	}
	e.At(poissonGap(rng, c.Rate), evMetaNew, 0)
	for {
		ev, ok := e.Next()
		if !ok || ev.At >= c.Duration {
			break
		}
		now := e.Now()
		switch ev.Kind {
		case evMetaNew:
			e.After(poissonGap(rng, c.Rate), evMetaNew, 0)
			out.requests++
			var l ledger
			if d.begin(&l, e.Time()) != retry.NoReason {
				continue
			}
			attempt, ls = append(attempt, 0), append(ls, l)
			send(int32(len(attempt)-1), now)
		case evMetaOK:
			d.end(&ls[ev.ID], e.Time(), int(attempt[ev.ID]), nil)
			out.successes++
			count(out.goodput, now)
		case evMetaTimeout:
			out.timeouts++
			if dec := d.end(&ls[ev.ID], e.Time(), int(attempt[ev.ID]), ErrTimeout); dec.Retry {
				send(ev.ID, now) // an immediate resend: Constant(0) and no limiter
			}
		}
	}
	out.events = e.Processed()
	return out
}

// Run sweeps the cut lengths for each strategy.
func (c *MetastableConfig) Run(ctx context.Context, o Options) (*Result, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	strategies := selected(metastableStrategies, c.Strategies)
	n := len(c.CutLens)
	runs, err := sweep(ctx, o, len(strategies)*n, func(i int) (metaRun, error) {
		s, k := strategies[i/n], i%n
		return c.runOne(metastableStrategies[s], c.CutLens[k], mix(o.Seed, uint64(s), uint64(c.CutLens[k]))), nil
	})
	if err != nil {
		return nil, err
	}
	res := &Result{
		Scenario: "metastable",
		Title: fmt.Sprintf("%.0f req/s, timeout %v, %d immediate resends; server %.0f req/s cut to %g of it at %v",
			c.Rate, c.Timeout, c.Resends, c.Capacity, c.Cut, c.CutAt),
		Settings: settings(c.Params(), o),
		Table: Table{Columns: []Column{
			{Key: "strategy", Title: "strategy"},
			{Key: "cut_s", Title: "cut s", Prec: 1},
			{Key: "requests", Title: "requests"},
			{Key: "attempts", Title: "attempts"},
			{Key: "timeouts", Title: "timeouts"},
			{Key: "wasted", Title: "wasted work"},
			{Key: "max_wait_s", Title: "max queue s", Prec: 2},
			{Key: "goodput_end", Title: "goodput last 10 s", Prec: 0},
			{Key: "load_end", Title: "attempts/s last 10 s", Prec: 0},
			{Key: "state", Title: "after the cut"},
		}},
	}
	secs := int(c.Duration / time.Second)
	// One goodput and one load chart per strategy: with every strategy's
	// cuts on one chart, eight lines lay on top of each other.
	var shades []Shade
	for _, l := range c.CutLens {
		shades = append(shades, Shade{From: c.CutAt.Seconds(), To: (c.CutAt + l).Seconds(), Label: "cut " + l.String()})
	}
	good := make([]Chart, len(strategies))
	load := make([]Chart, len(strategies))
	for si, s := range strategies {
		name := metastableStrategies[s]
		good[si] = Chart{Title: "goodput per second: " + name, XLabel: "time (s)", YLabel: "successful requests/s", Shades: shades}
		load[si] = Chart{Title: "attempts per second at the server: " + name, XLabel: "time (s)", YLabel: "attempts/s", Shades: shades}
	}
	tips := map[string]time.Duration{}
	for si, s := range strategies {
		name := metastableStrategies[s]
		for k, l := range c.CutLens {
			run := runs[si*n+k]
			res.Events += run.events
			g, a := meanRange(run.goodput, secs-10, secs), meanRange(run.load, secs-10, secs)
			state := "recovered"
			if g < 0.5*c.Rate {
				state = "metastable"
				if t, ok := tips[name]; !ok || l < t {
					tips[name] = l
				}
			}
			res.Table.Rows = append(res.Table.Rows, []any{name, l.Seconds(), run.requests, run.attempts, run.timeouts,
				run.wasted, run.maxWait.Seconds(), g, a, state})
			label := fmt.Sprintf("cut %v", l)
			good[si].Series = append(good[si].Series, Series{Name: label, Points: bucketPoints(run.goodput, time.Second, 1)})
			load[si].Series = append(load[si].Series, Series{Name: label, Points: bucketPoints(run.load, time.Second, 1)})
		}
	}
	res.Charts = append(good, load...)
	for _, s := range strategies {
		name := metastableStrategies[s]
		if t, ok := tips[name]; ok {
			res.Notes = append(res.Notes, fmt.Sprintf("%s: the shortest cut that leaves the server overloaded after its capacity is back is %v.", name, t))
		} else {
			res.Notes = append(res.Notes, fmt.Sprintf("%s: the server recovers after every cut length.", name))
		}
	}
	res.Notes = append(res.Notes, fmt.Sprintf(
		"A run is metastable when its goodput over the last 10 s is below half the offered %.0f req/s. Stable needs Rate × attempts per request < capacity once the queue is past the timeout: %.0f × %d = %.0f vs %.0f.",
		c.Rate, c.Rate, c.Resends+1, c.Rate*float64(c.Resends+1), c.Capacity))
	return res, nil
}
