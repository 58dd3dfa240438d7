package check

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/staggerhq/stagger/internal/labkit"
	"github.com/staggerhq/stagger/retry"
)

// ErrInvalid is wrapped by every validation error of an Experiment; the
// message names the field and the rule it broke.
var ErrInvalid = errors.New("check: invalid experiment")

// Defaults of an Experiment.
const (
	// DefaultWindow is the width of a window: the peak is the most attempts
	// received in any window of this width, and the series are counted per
	// window (as the lab counts).
	DefaultWindow = 200 * time.Millisecond
	// DefaultTolerance is how far below its level before the fault
	// goodput may stay and still count as recovered.
	DefaultTolerance = 0.2
	// DefaultHang is how long a dependency that refuses by timing out
	// holds an attempt before it drops the connection.
	DefaultHang = 30 * time.Second
	// MaxRequests bounds the logical requests of one virtual run.
	MaxRequests = 50_000_000
	// MaxRealRequests bounds the logical requests of one real-time run:
	// each is a goroutine and a loopback exchange.
	MaxRealRequests = 20_000
)

// Policy is one policy under test, named. Make one with [Retry],
// [RetryFunc], [Hedged], [HedgedFunc] or [Transport].
type Policy struct {
	// Name names the policy in results, reports and failures.
	Name string

	newRetry func() (*retry.Policy, *retry.Hedge)
	wrap     func(base http.RoundTripper) http.RoundTripper
}

// Retry is p under name. p is used as given by every run: a Budget or a
// Limiter in it keeps its state from one run to the next (use [RetryFunc]
// for a fresh one per run). nil is the zero Policy (retry's defaults).
func Retry(name string, p *retry.Policy) Policy {
	return Policy{Name: name, newRetry: func() (*retry.Policy, *retry.Hedge) { return p, nil }}
}

// RetryFunc is the policy newPolicy returns, called once per run, so that
// its Budget and Limiter start fresh in every run and every seed.
func RetryFunc(name string, newPolicy func() *retry.Policy) Policy {
	return Policy{Name: name, newRetry: func() (*retry.Policy, *retry.Hedge) { return newPolicy(), nil }}
}

// Hedged is hedged calls: h.Do under p (nil: the zero Policy). h is
// shared by every run (what it learned carries over; see [HedgedFunc]).
func Hedged(name string, h *retry.Hedge, p *retry.Policy) Policy {
	return Policy{Name: name, newRetry: func() (*retry.Policy, *retry.Hedge) { return p, h }}
}

// HedgedFunc is Hedged with a fresh Hedge and Policy per run.
func HedgedFunc(name string, newHedge func() (*retry.Hedge, *retry.Policy)) Policy {
	return Policy{Name: name, newRetry: func() (*retry.Policy, *retry.Hedge) {
		h, p := newHedge()
		return p, h
	}}
}

// Transport is an http.RoundTripper under test (a retryhttp.Transport,
// or anything that wraps one): wrap is given the loopback transport to the
// gateway and returns the transport the callers send through. A transport
// runs in real time only ([RunReal]); [Run] lists it in
// Result.Skipped, since its decisions happen inside its RoundTrip, on real
// responses and real timers.
func Transport(name string, wrap func(base http.RoundTripper) http.RoundTripper) Policy {
	return Policy{Name: name, wrap: wrap}
}

// Virtual reports whether the policy can run in virtual time.
func (p Policy) Virtual() bool { return p.newRetry != nil }

// Callers is who sends the logical requests. Rate > 0 selects an open
// loop (arrivals at a rate, whatever happened to earlier requests);
// otherwise N callers run a closed loop (each makes Requests logical
// requests one after another, thinking Think between them).
type Callers struct {
	// N is the number of closed-loop callers.
	N int
	// Requests is each closed-loop caller's logical requests; 0 means 1.
	Requests int
	// Think is the pause of a closed-loop caller between its requests.
	Think time.Duration
	// Rate is the open loop's logical requests per second.
	Rate float64
	// Poisson makes the open loop's gaps exponential (a Poisson process);
	// otherwise they are constant, 1/Rate. Brooker (2022) shows why the
	// difference matters.
	Poisson bool
	// Ramp spreads the start: closed-loop caller i (1..N) starts at
	// i·Ramp/N; the open loop's rate climbs linearly from 0 to Rate over
	// Ramp.
	Ramp time.Duration
}

// ClosedLoop returns n callers, one logical request each, started
// together.
func ClosedLoop(n int) Callers { return Callers{N: n} }

// OpenLoop returns arrivals at rate per second, Poisson or constant.
func OpenLoop(rate float64, poisson bool) Callers { return Callers{Rate: rate, Poisson: poisson} }

// Open reports whether the callers are an open loop.
func (c Callers) Open() bool { return c.Rate > 0 }

func (c Callers) requests() int {
	if c.Requests == 0 {
		return 1
	}
	return c.Requests
}

// Overload is what a dependency does with an attempt above its
// Concurrency or its Rate.
type Overload uint8

const (
	// Refuse refuses it at once, as Refusal says.
	Refuse Overload = iota
	// Queue makes it wait its turn, first come first served: over
	// Concurrency until an attempt in flight ends, over Rate so that
	// served attempts are spaced 1/Rate apart. The wait adds to the
	// latency; an attempt whose caller gives up while it waits leaves the
	// queue.
	Queue
)

// Refusal is how a dependency refuses an attempt (down, or over its
// capacity).
type Refusal uint8

const (
	// Status503 answers 503 Service Unavailable.
	Status503 Refusal = iota
	// RetryAfter answers 503 with a Retry-After header of
	// Dependency.RetryAfter (whole seconds, rounded up).
	RetryAfter
	// Timeout never answers: the attempt hangs for Dependency.Hang, then
	// the connection is dropped (unless the caller's own timeout fires
	// first).
	Timeout
	// Drop closes the connection without an answer.
	Drop
)

var refusalNames = [...]string{Status503: "503", RetryAfter: "503+retry-after", Timeout: "timeout", Drop: "drop"}

func (r Refusal) String() string {
	if int(r) < len(refusalNames) {
		return refusalNames[r]
	}
	return fmt.Sprintf("Refusal(%d)", uint8(r))
}

// Dependency is the receiving side. An attempt's latency is fixed when it
// arrives: Latency, plus an exponential extra of mean LatencyExp, plus
// PerInFlight × the attempts in flight (itself included), plus the fault
// clauses' latency and slow phases. Concurrency and Rate cap what it
// accepts; a down or capped dependency refuses as Refusal says (a 503
// after the latency, as the lab gateway answers; over capacity at once).
type Dependency struct {
	Latency     time.Duration // the latency of an attempt with nothing else in flight
	LatencyExp  time.Duration // mean of an exponential extra latency; 0: none (a constant latency)
	PerInFlight time.Duration // latency added per attempt in flight: the collapse model's 0.01 s
	// Concurrency, when > 0, caps the attempts in flight; Overload says
	// what happens to one more (the clause "cap N" is a cap that always
	// refuses at once, as the lab's gateway does).
	Concurrency int
	// Rate, when > 0, caps the attempts served per second; Overload says
	// what happens to one above it.
	Rate     float64
	Overload Overload
	// Refusal is how refusals look; the clause "retry-after D" makes them
	// RetryAfter.
	Refusal    Refusal
	RetryAfter time.Duration // the Retry-After of a RetryAfter refusal; 0: 1s
	Hang       time.Duration // how long a Timeout refusal holds the attempt; 0: DefaultHang
}

// Collapse returns the collapse model's dependency (Brooker 2023,
// simple_collapse_sim): latency 1.0 s + 0.01 s × attempts in flight.
func Collapse() Dependency {
	return Dependency{Latency: time.Second, PerInFlight: 10 * time.Millisecond}
}

// Experiment is one experiment: policies under test, callers, the
// dependency and its fault timeline, measured in windows.
type Experiment struct {
	// Name names the experiment in reports; "" means "experiment".
	Name string
	// Policies are run side by side, each in a run of its own with the
	// same callers, dependency, faults and seed.
	Policies []Policy
	Callers  Callers
	// Dependency is the receiving side.
	Dependency Dependency
	// Faults is the timeline, in the clauses of `stagger proxy --fault`
	// (labkit's grammar: down, drop, latency, slow, flap, cap,
	// retry-after); each element may hold several, ';'-separated.
	Faults []string
	// Duration is how long the run lasts: open-loop arrivals stop then,
	// and what is still in flight counts as unfinished. 0 means: a closed
	// loop runs until every caller is done (at most the fault's end plus a
	// minute); an open loop runs twice the fault's end plus 2 s.
	Duration time.Duration
	// Window is the width of a window; 0 means DefaultWindow.
	Window time.Duration
	// Seed makes the run reproducible: jitter (for a policy without its
	// own Rand), arrivals and latencies are drawn from it.
	Seed uint64
	// Tolerance is how far below its level before the fault goodput may
	// be and count as recovered (0.2: within 20%); 0 means
	// DefaultTolerance.
	Tolerance float64
	// Replay, when set, replays a recorded outage instead of Callers,
	// Dependency and Faults: the callers follow the recorded first
	// attempts, the dependency its recorded capacity, errors and latency
	// (see ReadRecording), and each policy decides the retries. Run
	// replays retry policies (a hedge or a transport is skipped); RunReal
	// replays every policy on its gateway by the same per-window rules.
	// Dependency.Hang still bounds an attempt the recording never
	// answered.
	Replay *Recording
}

// LabOutage returns the lab's default outage (`stagger lab`) for the given
// policies: 4 closed-loop callers over a 48 ms ramp, a dependency that
// answers in 26.2 ms and is down for the first 700 ms, 200 ms windows,
// seed 1.
func LabOutage(policies ...Policy) Experiment {
	return Experiment{
		Name:       "lab outage: 4 callers, down 700ms",
		Policies:   policies,
		Callers:    Callers{N: 4, Ramp: labkit.FourCallerRamp},
		Dependency: Dependency{Latency: labkit.FourCallerRoundTrip},
		Faults:     []string{"down 700ms at 0s"},
		Window:     DefaultWindow,
		Seed:       1,
	}
}

func (e *Experiment) window() time.Duration {
	if e.Window == 0 {
		return DefaultWindow
	}
	return e.Window
}

func (e *Experiment) tolerance() float64 {
	if e.Tolerance == 0 {
		return DefaultTolerance
	}
	return e.Tolerance
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// plan is a validated experiment: the parsed faults and the run's span.
type plan struct {
	e        *Experiment
	faults   *labkit.FaultClauses
	duration time.Duration // 0: a closed loop that runs until done (capped by limit)
	limit    time.Duration // the hard end of the run
	window   time.Duration
}

// Validate checks every field and names the first one that is wrong.
func (e *Experiment) Validate() error {
	_, err := e.plan()
	return err
}

// plan checks the experiment one group of fields at a time, naming the
// first field that is wrong, and works out the run's span.
func (e *Experiment) plan() (*plan, error) {
	if err := e.checkPolicies(); err != nil {
		return nil, err
	}
	if e.Replay != nil {
		return e.replayPlan()
	}
	if err := e.Callers.check(); err != nil {
		return nil, err
	}
	if err := e.Dependency.check(); err != nil {
		return nil, err
	}
	if err := e.checkRun(); err != nil {
		return nil, err
	}
	fc, err := labkit.ParseFaultClauses("Faults", e.Faults)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	p := &plan{e: e, faults: fc, window: e.window(), duration: e.Duration}
	p.setLimit(fc.End())
	if err := p.checkSize(); err != nil {
		return nil, err
	}
	return p, nil
}

// invalid is an ErrInvalid with the message formatted.
func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, a...))
}

// checkPolicies checks that there are policies, each named, once, and made
// by one of the package's constructors.
func (e *Experiment) checkPolicies() error {
	if len(e.Policies) == 0 {
		return invalid("Policies: want at least one policy")
	}
	seen := map[string]bool{}
	for i, p := range e.Policies {
		switch {
		case p.Name == "":
			return invalid("Policies[%d].Name: must not be empty", i)
		case seen[p.Name]:
			return invalid("Policies[%d].Name: %q is used twice", i, p.Name)
		case p.newRetry == nil && p.wrap == nil:
			return invalid("Policies[%d] (%s): make it with check.Retry, RetryFunc, Hedged, HedgedFunc or Transport", i, p.Name)
		}
		seen[p.Name] = true
	}
	return nil
}

// replayPlan checks a replay's few fields of its own (the recording brings
// the faults and the callers) and plans it.
func (e *Experiment) replayPlan() (*plan, error) {
	switch {
	case len(e.Faults) > 0:
		return nil, invalid("Faults and Replay exclude each other: a replay's faults are the recording's")
	case e.Callers != Callers{}:
		return nil, invalid("Callers and Replay exclude each other: a replay's callers are the recording's")
	case e.Window < 0:
		return nil, invalid("Window must be > 0 (0 means %v), got %v", DefaultWindow, e.Window)
	case e.Dependency.Hang < 0:
		return nil, invalid("Dependency.Hang must be >= 0 (0 means %v), got %v", DefaultHang, e.Dependency.Hang)
	}
	fc, _ := labkit.ParseFaultClauses("Faults", nil)
	return &plan{e: e, faults: fc, window: e.window()}, nil
}

// check checks the callers of an experiment without a replay.
func (c Callers) check() error {
	switch {
	case !finite(c.Rate) || c.Rate < 0:
		return invalid("Callers.Rate must be a finite number >= 0 (0 means a closed loop), got %v", c.Rate)
	case c.Rate == 0 && c.N < 1:
		return invalid("Callers: want N >= 1 callers (closed loop) or a Rate > 0 (open loop), got N %d", c.N)
	case c.N < 0:
		return invalid("Callers.N must be >= 0, got %d", c.N)
	case c.Requests < 0:
		return invalid("Callers.Requests must be >= 0 (0 means 1), got %d", c.Requests)
	case c.Think < 0:
		return invalid("Callers.Think must be >= 0, got %v", c.Think)
	case c.Ramp < 0:
		return invalid("Callers.Ramp must be >= 0, got %v", c.Ramp)
	}
	return nil
}

// check checks the dependency's model.
func (d Dependency) check() error {
	switch {
	case d.Latency < 0:
		return invalid("Dependency.Latency must be >= 0, got %v", d.Latency)
	case d.LatencyExp < 0:
		return invalid("Dependency.LatencyExp must be >= 0, got %v", d.LatencyExp)
	case d.PerInFlight < 0:
		return invalid("Dependency.PerInFlight must be >= 0, got %v", d.PerInFlight)
	case d.Concurrency < 0:
		return invalid("Dependency.Concurrency must be >= 0 (0 means no cap), got %d", d.Concurrency)
	case !finite(d.Rate) || d.Rate < 0:
		return invalid("Dependency.Rate must be a finite number >= 0 (0 means no cap), got %v", d.Rate)
	case d.Overload > Queue:
		return invalid("Dependency.Overload must be Refuse or Queue, got %d", d.Overload)
	case d.Refusal > Drop:
		return invalid("Dependency.Refusal must be Status503, RetryAfter, Timeout or Drop, got %d", d.Refusal)
	case d.RetryAfter < 0:
		return invalid("Dependency.RetryAfter must be >= 0, got %v", d.RetryAfter)
	case d.Hang < 0:
		return invalid("Dependency.Hang must be >= 0 (0 means %v), got %v", DefaultHang, d.Hang)
	}
	return nil
}

// checkRun checks the run's own settings: its duration, window and
// tolerance.
func (e *Experiment) checkRun() error {
	switch {
	case e.Duration < 0:
		return invalid("Duration must be >= 0, got %v", e.Duration)
	case e.Window < 0:
		return invalid("Window must be > 0 (0 means %v), got %v", DefaultWindow, e.Window)
	case !finite(e.Tolerance) || e.Tolerance < 0 || e.Tolerance >= 1:
		return invalid("Tolerance must be in [0, 1) (0 means %v), got %v", DefaultTolerance, e.Tolerance)
	}
	return nil
}

// setLimit sets the run's hard end, given the end of the faults: the
// Duration if given; an open loop runs twice past the faults; a closed
// loop until done, at most a minute after them.
func (p *plan) setLimit(end time.Duration) {
	switch {
	case p.e.Duration > 0:
		p.limit = p.e.Duration
	case p.e.Callers.Open():
		p.duration = 2*end + 2*time.Second
		p.limit = p.duration
	default:
		p.limit = end + time.Minute
	}
}

// checkSize bounds the requests and the windows a run may take.
func (p *plan) checkSize() error {
	c := p.e.Callers
	if c.Open() {
		if n := c.Rate * p.limit.Seconds(); n > MaxRequests {
			return invalid("Callers.Rate × Duration must be <= %d requests, got %.3g", MaxRequests, n)
		}
	} else if n := float64(c.N) * float64(c.requests()); n > MaxRequests {
		return invalid("Callers.N × Requests must be <= %d requests, got %.3g", MaxRequests, n)
	}
	if p.limit/p.window > 1<<22 {
		return invalid("Window %v is too small for a run of %v (at most %d windows)", p.window, p.limit, 1<<22)
	}
	return nil
}
