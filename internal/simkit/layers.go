package simkit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/retry"
)

// LayersConfig stacks retry layers (browser → API → SDK → the
// service): each layer calls the one below with its own retry policy, and
// a failure that survives one layer's retries is an error, retryable, for
// the layer above. Without an owner every layer retries, so one click can
// reach the service n^L times when it is down; with a single owner only
// the layer next to the service (the service adapter) retries, and the
// others pass failures up — n attempts at most.
type LayersConfig struct {
	Shapes   []string      // "LxN": L layers × N attempts each
	Failure  float64       // probability that one service call fails
	Clicks   int           // user requests, each through the whole stack
	Hop      time.Duration // one hop between layers (each way)
	Service  time.Duration // the service's time per call
	Base     time.Duration // each layer's backoff: full jitter from Base, doubling
	Deadline time.Duration // one deadline for the whole click, passed down (0: none)
}

// DefaultLayers returns the reference 3 × 3 and two variations, with the
// service down (every call fails).
func DefaultLayers() LayersConfig {
	return LayersConfig{Shapes: []string{"3x3", "3x4", "5x3"}, Failure: 1, Clicks: 1000,
		Hop: time.Millisecond, Service: 5 * time.Millisecond, Base: 10 * time.Millisecond}
}

// Params returns the scenario's parameters.
func (c *LayersConfig) Params() []*Param {
	return []*Param{
		shapesParam(&c.Shapes, "shapes", "stacks to compare, LxN = L layers × N attempts each, comma-separated"),
		floatParam(&c.Failure, "failure", "probability that one service call fails (1: the service is down)", 0, 1),
		intParam(&c.Clicks, "clicks", "user requests", 1, 10_000_000),
		durParam(&c.Hop, "hop", "one hop between layers, each way", 0, time.Minute),
		durParam(&c.Service, "service", "service time per call", 0, time.Minute),
		durParam(&c.Base, "base", "each layer's backoff: full jitter, doubling from this, capped at 1s", time.Millisecond, time.Second),
		durParam(&c.Deadline, "deadline", "one deadline for the whole click, shared by every layer (0: none)", 0, 24*time.Hour),
	}
}

// shape is one parsed stack.
type shape struct{ layers, attempts int }

func parseShape(s string) (shape, error) {
	l, n, ok := strings.Cut(strings.TrimSpace(s), "x")
	li, err1 := strconv.Atoi(l)
	ni, err2 := strconv.Atoi(n)
	if !ok || err1 != nil || err2 != nil || li < 1 || li > 8 || ni < 1 || ni > 10 {
		return shape{}, fmt.Errorf("want LxN with 1 <= L <= 8 layers and 1 <= N <= 10 attempts, got %q", s)
	}
	if pow(ni, li) > 1_000_000 {
		return shape{}, fmt.Errorf("%q reaches the service up to %d times per click; keep N^L <= 1,000,000", s, pow(ni, li))
	}
	return shape{li, ni}, nil
}

func pow(n, l int) int {
	p := 1
	for range l {
		p *= n
	}
	return p
}

func shapesParam(v *[]string, name, usage string) *Param {
	return &Param{
		Name: name, Usage: usage,
		get: func() string { return strings.Join(*v, ",") },
		set: func(s string) error {
			*v = nil
			for _, f := range strings.Split(s, ",") {
				*v = append(*v, strings.TrimSpace(f))
			}
			return nil
		},
		check: func() error {
			if len(*v) == 0 {
				return fmt.Errorf("needs at least one LxN")
			}
			for _, s := range *v {
				if _, err := parseShape(s); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

func (c *LayersConfig) validate() ([]shape, error) {
	if err := checkParams(c.Params()); err != nil {
		return nil, err
	}
	var out []shape
	var work int64
	for _, s := range c.Shapes {
		sh, _ := parseShape(s)
		out = append(out, sh)
		work += int64(pow(sh.attempts, sh.layers)) * int64(c.Clicks)
	}
	if work > 1e9 {
		return nil, invalid("clicks", "clicks × N^L summed over shapes must be <= 1e9, got %d", work)
	}
	return out, nil
}

// expectedCalls returns the mean service calls per click and the success
// probability for L layers of n attempts over a service failing with
// probability f: the bottom layer makes 1 + f + … + f^(n−1) calls and
// fails with probability f^n; each layer above repeats the layer below's
// work for as long as that fails.
func expectedCalls(layers, n int, owner bool, f float64) (calls, success float64) {
	calls, fail := 1.0, f
	for l := range layers {
		k := n
		if owner && l > 0 {
			k = 1
		}
		calls *= expectedLoad(fail, k-1)
		fail = 1 - expectedSuccess(fail, k-1)
	}
	return calls, 1 - fail
}

type frame struct {
	attempt int32
	l       ledger // carries the click's deadline down
}

type click struct {
	active int32 // the layer whose call is under way
	failed bool  // the answer travelling up
	start  time.Duration
	frames []frame
}

const (
	evDown   int32 = iota // a call reaches the layer below the active one (or the service)
	evUp                  // an answer reaches the active layer
	evRetryL              // the active layer's wait ended
)

type layersRun struct {
	calls, successes int64
	maxCalls         int64
	latency          time.Duration // summed over clicks
	events           uint64
}

func (c *LayersConfig) runOne(sh shape, owner bool, seed uint64) layersRun {
	drivers := make([]driver, sh.layers)
	jitter := pcg(seed, 1)
	for l := range drivers {
		n := sh.attempts
		if owner && l < sh.layers-1 {
			n = 1 // only the service adapter (the bottom layer) retries
		}
		drivers[l] = driver{&retry.Policy{MaxAttempts: n, Rand: jitter,
			Schedule: backoff.Exponential{Base: c.Base, Cap: time.Second, Jitter: backoff.Full}}}
	}
	rng := rand.New(pcg(seed, 2))
	e := NewEngine(c.Clicks)
	clicks := make([]click, c.Clicks)
	frames := make([]frame, c.Clicks*sh.layers)
	perClick := make([]int64, c.Clicks)
	var out layersRun
	deadline := func(k *click) time.Time {
		if c.Deadline == 0 {
			return time.Time{}
		}
		return Epoch.Add(k.start + c.Deadline)
	}
	for i := range clicks {
		k := &clicks[i]
		k.frames = frames[i*sh.layers : (i+1)*sh.layers]
		k.start = time.Duration(i) * time.Millisecond
		k.frames[0] = frame{attempt: 1, l: withDeadline(deadline(k))}
		e.At(k.start+c.Hop, evDown, int32(i))
	}
	for {
		ev, ok := e.Next()
		if !ok {
			break
		}
		k := &clicks[ev.ID]
		now := e.Now()
		switch ev.Kind {
		case evDown:
			if int(k.active) == sh.layers-1 { // the service
				out.calls++
				perClick[ev.ID]++
				k.failed = rng.Float64() < c.Failure
				e.At(now+c.Service+c.Hop, evUp, ev.ID)
				continue
			}
			k.active++
			f := &k.frames[k.active]
			*f = frame{attempt: 1, l: withDeadline(deadline(k))}
			if drivers[k.active].begin(&f.l, e.Time()) != retry.NoReason {
				k.failed = true
				k.active--
				e.At(now+c.Hop, evUp, ev.ID)
				continue
			}
			e.At(now+c.Hop, evDown, ev.ID)
		case evUp:
			f := &k.frames[k.active]
			var err error
			if k.failed {
				err = ErrFailed
			}
			d := drivers[k.active]
			dec := d.end(&f.l, e.Time(), int(f.attempt), err)
			if err != nil && dec.Retry {
				e.At(now+dec.Delay, evRetryL, ev.ID)
				continue
			}
			if k.active == 0 { // the answer reached the user
				if err == nil {
					out.successes++
				}
				out.latency += now - k.start
				continue
			}
			k.active--
			e.At(now+c.Hop, evUp, ev.ID)
		case evRetryL:
			f := &k.frames[k.active]
			f.attempt++
			if drivers[k.active].again(&f.l, e.Time()) != retry.NoReason {
				k.failed = true
				e.At(now, evUp, ev.ID)
				continue
			}
			e.At(now+c.Hop, evDown, ev.ID)
		}
	}
	for _, n := range perClick {
		out.maxCalls = max(out.maxCalls, n)
	}
	out.events = e.Processed()
	return out
}

// Run simulates every shape with and without a single retry owner.
func (c *LayersConfig) Run(ctx context.Context, o Options) (*Result, error) {
	shapes, err := c.validate()
	if err != nil {
		return nil, err
	}
	runs := make([]layersRun, 2*len(shapes))
	err = parallel(ctx, o, len(runs), func(i int) {
		runs[i] = c.runOne(shapes[i/2], i%2 == 1, mix(o.Seed, uint64(i)))
	})
	if err != nil {
		return nil, err
	}
	res := &Result{
		Scenario: "layers",
		Title:    fmt.Sprintf("%d clicks through stacked retry layers; each service call fails with probability %g", c.Clicks, c.Failure),
		Settings: settings(c.Params(), o),
		Table: Table{Columns: []Column{
			{Key: "shape", Title: "layers × attempts"},
			{Key: "owner", Title: "retry owner"},
			{Key: "calls_per_click", Title: "service calls/click", Prec: 3},
			{Key: "expected", Title: "expected", Prec: 3},
			{Key: "max_calls", Title: "max/click"},
			{Key: "success", Title: "success", Prec: 3},
			{Key: "latency_ms", Title: "mean latency ms", Prec: 1},
		}},
	}
	lines := Chart{Title: "service calls per click vs N^L", XLabel: "N^L (attempts per layer to the power of layers)", YLabel: "service calls per click"}
	every, single := Series{Name: "every layer retries"}, Series{Name: "single owner"}
	for i, run := range runs {
		sh, owner := shapes[i/2], i%2 == 1
		who := "every layer"
		if owner {
			who = "adapter only"
		}
		exp, _ := expectedCalls(sh.layers, sh.attempts, owner, c.Failure)
		per := float64(run.calls) / float64(c.Clicks)
		res.Table.Rows = append(res.Table.Rows, []any{fmt.Sprintf("%d × %d", sh.layers, sh.attempts), who, per, exp,
			run.maxCalls, float64(run.successes) / float64(c.Clicks),
			float64(run.latency) / float64(c.Clicks) / float64(time.Millisecond)})
		res.Events += run.events
		x := float64(pow(sh.attempts, sh.layers))
		if owner {
			single.Points = append(single.Points, Point{X: x, Y: per})
		} else {
			every.Points = append(every.Points, Point{X: x, Y: per})
		}
	}
	lines.Series = []Series{every, single}
	res.Charts = []Chart{lines}
	res.Notes = append(res.Notes,
		"Without an owner each layer repeats all the work below it: up to N^L service calls per click. With one owner (the service adapter) the others pass failures up: at most N.",
		"\"expected\" is the exact mean: per layer, calls × (1 + F + … + F^(k−1)) where F is the failure probability of the layer below and k its attempts.")
	return res, nil
}
