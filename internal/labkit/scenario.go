package labkit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/budget"
	"github.com/staggerhq/stagger/limit"
	"github.com/staggerhq/stagger/retry"
)

// Defaults of a [Scenario] and of [FourCallerOutage].
const (
	// DefaultCallerAttempts is how many attempts a lab caller makes at most
	// (not a retry policy default):
	// callers retry "until accepted", and this is only a safety net.
	DefaultCallerAttempts = 1000
	// MaxCallers bounds Scenario.Callers: every caller holds a loopback
	// connection.
	MaxCallers = 10000
	// FourCallerDown is how long the gateway of [FourCallerOutage] is down.
	FourCallerDown = 700 * time.Millisecond
	// FourCallerRamp is the span over which the callers of
	// [FourCallerOutage] start (see Scenario.Ramp).
	FourCallerRamp = 48 * time.Millisecond
	// FourCallerRoundTrip is the round trip the callers of
	// [FourCallerOutage] see. The scenario aims at about 46 ms per "retry
	// immediately" cycle: caller 1 sends attempt 1 at 12 ms and has
	// attempt 16 accepted at 708 ms, (708 − 12) / 15 = 46.4 ms, of which
	// 20 ms is the wait. With callers 12 ms apart, 4 callers make exactly
	// 64 attempts with a peak of 18 for any cycle in (45.87, 46.57) ms;
	// 46.2 ms is the middle, so the round trip is 26.2 ms.
	FourCallerRoundTrip = 26200 * time.Microsecond
	// calibrationRounds is how many warm-up exchanges measure the
	// machine's own overhead when Scenario.RoundTrip is set.
	calibrationRounds = 7
	// calibrationLoops bounds the warm-up loops run at once.
	calibrationLoops = 4
)

// Scenario is one experiment: callers, a gateway timeline, and how to count.
type Scenario struct {
	// Callers is the number of callers, each one logical request. Must be
	// in [1, MaxCallers].
	Callers int
	// Faults is the gateway's timeline.
	Faults Faults
	// Window is the width of the peak window and of the timeline's buckets;
	// 0 means DefaultWindow.
	Window time.Duration
	// Ramp spreads the callers' starts: caller i (1..N) sends its first
	// attempt i·Ramp/N after the start. 0 starts them all at once.
	Ramp time.Duration
	// MaxAttempts is each caller's attempt limit (the first try included);
	// 0 means DefaultCallerAttempts.
	MaxAttempts int
	// AttemptTimeout bounds each attempt (0: none); a timed-out attempt is
	// retried like a refusal.
	AttemptTimeout time.Duration
	// Seed makes the jitter reproducible: caller i draws its waits from
	// rand.NewPCG(Seed, i).
	Seed uint64
	// RoundTrip, when > 0, replaces Faults.Latency with a latency chosen at
	// run time so that the callers see this round trip: before the clock
	// starts, Run times a few uncounted exchanges to measure what the
	// machine itself adds to a cycle (the loopback, the HTTP stack, the
	// lateness of the two timers) and sets the gateway's latency to
	// RoundTrip minus that overhead (never below 0). The result records
	// both. This keeps a scenario's timing (FourCallerOutage's 46 ms
	// cycle) steady across machines; a heavily loaded machine still adds noise
	// (compare Overhead with Result.ObservedOverhead).
	RoundTrip time.Duration
	// Listen and Dial replace TCP on 127.0.0.1, for example with an
	// in-memory network inside a testing/synctest bubble. Both or neither.
	Listen func() (net.Listener, error)
	Dial   func(ctx context.Context, network, addr string) (net.Conn, error) // the callers' HTTP transport dials the gateway with it
}

// FourCallerOutage returns the lab's default scenario: 4 callers, a
// gateway down for 700 ms, peaks counted in 200 ms windows, seed 1, callers
// starting 12 ms apart over a 48 ms ramp (the first attempt arrives at
// 12 ms, and the callers are not in lock-step, so "retry immediately" peaks
// at 18 rather than 20) and a round trip of 26.2 ms (see
// FourCallerRoundTrip), which Run turns into a gateway latency for the
// machine it runs on.
func FourCallerOutage() Scenario {
	return Scenario{
		Callers:     4,
		Faults:      Outage(FourCallerDown, 0),
		Window:      DefaultWindow,
		Ramp:        FourCallerRamp,
		MaxAttempts: DefaultCallerAttempts,
		Seed:        1,
		RoundTrip:   FourCallerRoundTrip,
	}
}

// Validate checks every field and names the first one that is wrong.
func (s Scenario) Validate() error {
	switch {
	case s.Callers < 1 || s.Callers > MaxCallers:
		return fmt.Errorf("%w: Callers must be in [1, %d], got %d", ErrInvalid, MaxCallers, s.Callers)
	case s.Window < 0:
		return fmt.Errorf("%w: Window must be > 0 (0 means %v), got %v", ErrInvalid, DefaultWindow, s.Window)
	case s.Ramp < 0:
		return fmt.Errorf("%w: Ramp must be >= 0, got %v", ErrInvalid, s.Ramp)
	case s.MaxAttempts < 0:
		return fmt.Errorf("%w: MaxAttempts must be >= 1 (0 means %d), got %d", ErrInvalid, DefaultCallerAttempts, s.MaxAttempts)
	case s.AttemptTimeout < 0:
		return fmt.Errorf("%w: AttemptTimeout must be >= 0 (0 means none), got %v", ErrInvalid, s.AttemptTimeout)
	case s.RoundTrip < 0:
		return fmt.Errorf("%w: RoundTrip must be >= 0 (0 means use Faults.Latency), got %v", ErrInvalid, s.RoundTrip)
	case (s.Listen == nil) != (s.Dial == nil):
		return fmt.Errorf("%w: Listen and Dial must be set together", ErrInvalid)
	}
	return s.Faults.Validate()
}

func (s Scenario) window() time.Duration {
	if s.Window == 0 {
		return DefaultWindow
	}
	return s.Window
}

// Attempt is one attempt as its caller recorded it, joined with what the
// gateway recorded for it.
type Attempt struct {
	Caller  int // 1..N
	Attempt int // 1 for the first try
	// Wait is the wait before this attempt, as the policy decided it
	// (retry.Hooks.OnRetry); 0 for the first attempt.
	Wait time.Duration
	// Sent is when the caller sent it, measured from the start.
	Sent time.Duration
	// Outcome is what the caller saw (Failed: no answer).
	Outcome Outcome
	// Canceled says the caller canceled it: a hedge's loser, which the
	// gateway may not have counted.
	Canceled bool
	// Received says the gateway counted this attempt; Arrived is when.
	Received bool
	Arrived  time.Duration // from the start; 0 when not Received
}

// At returns the arrival time at the gateway, or the send time when the
// gateway never saw the attempt.
func (a Attempt) At() time.Duration {
	if a.Received {
		return a.Arrived
	}
	return a.Sent
}

// Caller sums up one caller's logical request.
type Caller struct {
	Caller   int  // 1..N, the caller's number and request ID
	Attempts int  // attempts sent
	Accepted bool // an attempt was answered 200
	// AcceptedAt is when the accepted attempt arrived at the gateway.
	AcceptedAt time.Duration
	// GaveUp says why the caller stopped without acceptance (NoReason
	// when accepted); Err is the error retry.Do returned.
	GaveUp retry.Reason
	Err    error // nil when accepted
}

// Result is what one strategy did in one scenario.
type Result struct {
	Strategy Strategy // the strategy run
	Scenario Scenario // the scenario as given (Faults.Latency not calibrated; see Latency)
	// Attempts holds every attempt as the callers recorded them, by
	// caller, then attempt.
	Attempts []Attempt
	// Callers holds each caller's summary, by caller.
	Callers []Caller
	// Gateway is what the receiving side counted.
	Gateway Stats
	// Arrivals are the gateway's records, by arrival time.
	Arrivals []Arrival
	// Mismatches lists every way the callers' and the gateway's records
	// disagree; empty when every attempt was counted once on each side.
	Mismatches []string
	// Latency is the gateway latency the run used: Faults.Latency, or the
	// one calibrated for Scenario.RoundTrip, which then measured Overhead
	// per cycle on this machine.
	Latency, Overhead time.Duration
	// Elapsed is the run's wall time from the start of the clock.
	Elapsed time.Duration
}

// Agree reports whether the callers and the gateway counted the same
// attempts, each exactly once, with the same outcomes.
func (r *Result) Agree() bool { return len(r.Mismatches) == 0 }

// CallersAccepted counts the callers whose request was accepted.
func (r *Result) CallersAccepted() int {
	n := 0
	for _, c := range r.Callers {
		if c.Accepted {
			n++
		}
	}
	return n
}

// GaveUp counts the callers that gave up, by reason.
func (r *Result) GaveUp() map[retry.Reason]int {
	m := map[retry.Reason]int{}
	for _, c := range r.Callers {
		if !c.Accepted {
			m[c.GaveUp]++
		}
	}
	return m
}

// Waits returns every wait before a retry, in whole milliseconds as the log
// prints them (attempts 2 and later).
func (r *Result) Waits() []int64 {
	var ws []int64
	for _, a := range r.Attempts {
		if a.Attempt > 1 {
			ws = append(ws, int64(a.Wait/time.Millisecond))
		}
	}
	return ws
}

// DistinctWaits counts the distinct values of Waits.
func (r *Result) DistinctWaits() int {
	seen := map[int64]bool{}
	for _, w := range r.Waits() {
		seen[w] = true
	}
	return len(seen)
}

// ObservedOverhead returns what the machine added to each retry cycle
// during the run: the mean, over every attempt after a caller's first, of
// the time since the caller's previous attempt minus the wait the policy
// decided and the gateway's latency (0 when there was no retry). Compare it
// with Overhead, which calibration measured before the run.
func (r *Result) ObservedOverhead() time.Duration {
	var sum time.Duration
	n := 0
	for i, a := range r.Attempts {
		if a.Attempt > 1 && i > 0 && r.Attempts[i-1].Caller == a.Caller {
			sum += a.Sent - r.Attempts[i-1].Sent - a.Wait - r.Latency
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / time.Duration(n)
}

// ErrJitterIdle is the jitter check failing: a jittered strategy whose
// waits took fewer than 2 distinct values.
var ErrJitterIdle = errors.New("every wait was identical — jitter is not doing anything")

// CheckJitter is the jitter check: a jittered strategy's waits must
// take at least 2 distinct values, otherwise callers that failed together
// come back together and the point of jitter is lost. It returns
// ErrJitterIdle when they did not. Strategies without jitter, and runs with
// fewer than 2 waits (nothing to compare), pass.
func (r *Result) CheckJitter() error {
	if !r.Strategy.Jittered || len(r.Waits()) < 2 {
		return nil
	}
	if r.DistinctWaits() < 2 {
		return ErrJitterIdle
	}
	return nil
}

// Check applies the lab's two checks to r: a jittered strategy's waits
// take at least 2 distinct values (CheckJitter), and the callers and the
// gateway agree on every attempt (Agree). It returns nil when both hold,
// or one error per failure, joined, each naming the strategy.
func (r *Result) Check() error {
	var errs []error
	if err := r.CheckJitter(); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w (%d waits, %d distinct)", r.Strategy.Name, err, len(r.Waits()), r.DistinctWaits()))
	}
	if !r.Agree() {
		errs = append(errs, fmt.Errorf("%s: callers and gateway disagree: %s", r.Strategy.Name, strings.Join(r.Mismatches, "; ")))
	}
	return errors.Join(errs...)
}

// errRefused is the error of an attempt the gateway refused.
type errRefused struct {
	status  int
	outcome Outcome
}

func (e errRefused) Error() string {
	return fmt.Sprintf("gateway refused the attempt: %d %s", e.status, e.outcome)
}

// Run runs the scenario once with strategy st: a fresh gateway, N callers
// each retrying one logical request with a retry.Policy built from st, then
// the two sides' counts compared.
//
// Each caller's policy has MaxAttempts, AttemptTimeout, st's schedule, the
// run's shared budget and bulkhead, and its own seeded random source; its
// hooks record the wait before each attempt (OnRetry) and the reason a
// caller gave up (OnGiveUp). A 503 (or 429) is retryable and a Retry-After
// in seconds is honoured; a transport error is retryable; any other status
// is permanent. The clock starts after uncounted warm-up requests (which
// also calibrate the latency when RoundTrip is set), so time 0 is the start
// of the gateway's timeline and of the callers' ramp. It returns an error when the scenario or
// the strategy is invalid, when the gateway cannot listen, or when ctx ended
// the run (the partial result is returned with it).
func (s Scenario) Run(ctx context.Context, st Strategy) (*Result, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if st.Schedule == nil {
		return nil, fmt.Errorf("%w: strategy %q has no schedule", ErrInvalid, st.Name)
	}
	if st.Bulkhead < 0 {
		return nil, fmt.Errorf("%w: strategy %q: Bulkhead must be >= 0, got %d", ErrInvalid, st.Name, st.Bulkhead)
	}
	var hedge *retry.Hedge
	if st.Hedge != 0 {
		hedge = &retry.Hedge{Delay: st.Hedge}
		if err := hedge.Validate(); err != nil {
			return nil, fmt.Errorf("%w: strategy %q: %w", ErrInvalid, st.Name, err)
		}
	}
	maxAttempts := s.MaxAttempts
	if maxAttempts == 0 {
		maxAttempts = DefaultCallerAttempts
	}

	listen, dial := s.Listen, s.Dial
	if listen == nil {
		listen = func() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }
		dial = (&net.Dialer{}).DialContext
	}
	l, err := listen()
	if err != nil {
		return nil, fmt.Errorf("lab: gateway cannot listen: %w", err)
	}
	tr := &http.Transport{
		DialContext:         dial,
		MaxIdleConns:        s.Callers,
		MaxIdleConnsPerHost: s.Callers,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	var bud budget.Budget
	if st.NewBudget != nil {
		bud = st.NewBudget()
	}
	var lim limit.Limiter
	if st.Bulkhead > 0 {
		b, err := limit.NewBulkhead(st.Bulkhead)
		if err != nil {
			l.Close()
			return nil, err
		}
		lim = b
	}
	if st.NewLimiter != nil {
		lim = limit.Join(lim, st.NewLimiter())
	}

	// The gateway's clock starts after uncounted warm-up requests, so that
	// the process's first HTTP exchange (lazy initialisation, the first
	// dial) does not delay the first callers; with RoundTrip set they also
	// measure the machine's overhead per cycle.
	gw, err := NewGateway(s.Faults, time.Time{})
	if err != nil {
		l.Close()
		return nil, err
	}
	gw.warmup = strconv.FormatUint(rand.Uint64(), 36)
	url := gw.Serve(l) + "/"
	par, rounds := 1, 1
	if s.RoundTrip > 0 {
		par, rounds = min(s.Callers, calibrationLoops), calibrationRounds
	}
	overhead, err := warmUp(ctx, client, url, gw.warmup, par, rounds)
	if err != nil {
		closeCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = gw.Close(closeCtx)
		return nil, fmt.Errorf("lab: gateway does not answer: %w", err)
	}
	faults := s.Faults
	if s.RoundTrip > 0 {
		faults.Latency = max(0, s.RoundTrip-overhead)
	} else {
		overhead = 0
	}
	start := time.Now()
	gw.restart(start, faults)

	attempts := make([][]Attempt, s.Callers)
	callers := make([]Caller, s.Callers)
	var wg sync.WaitGroup
	for i := range s.Callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := i + 1
			attempts[i], callers[i] = s.caller(ctx, n, start, url, client, st, bud, lim, hedge, maxAttempts)
		}()
	}
	wg.Wait()
	// Close the callers' connections first: a connection the transport
	// dialled but never used is "new" to the server, and Shutdown waits up
	// to 5 s for those. Shutdown then waits for the handlers, so the
	// recorder is complete after it.
	tr.CloseIdleConnections()
	closeCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	cerr := gw.Close(closeCtx)
	cancel()
	elapsed := time.Since(start)

	res := &Result{Strategy: st, Scenario: s, Callers: callers, Elapsed: elapsed,
		Latency: faults.Latency, Overhead: overhead}
	for _, a := range attempts {
		res.Attempts = append(res.Attempts, a...)
	}
	res.Gateway = gw.Recorder().Stats(s.window())
	res.Arrivals = gw.Recorder().Arrivals()
	res.reconcile()
	if err := ctx.Err(); err != nil {
		return res, err
	}
	if cerr != nil {
		return res, fmt.Errorf("lab: gateway did not stop: %w", cerr)
	}
	return res, nil
}

// warmUp runs par loops at once, each a retry loop of rounds uncounted
// attempts against the gateway's warm-up answer (503 after warmupLatency)
// with retry.Do waiting warmupLatency between them — the callers' own code
// path and timers. It returns the median time a cycle took beyond the two
// timers: what the machine adds to every cycle. The first cycle of each loop
// (which may dial) is left out, and the median keeps a passing hiccup
// (another process taking the CPU) from setting the latency of a whole run.
func warmUp(ctx context.Context, client *http.Client, url, key string, par, rounds int) (time.Duration, error) {
	var (
		mu    sync.Mutex
		extra []time.Duration
		first error
		wg    sync.WaitGroup
	)
	for i := range par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Stagger the loops over one cycle, as the ramp staggers callers.
			if !sleep(ctx, time.Duration(i)*2*warmupLatency/time.Duration(par)) {
				return
			}
			ex, err := warmLoop(ctx, client, url, key, rounds)
			mu.Lock()
			defer mu.Unlock()
			extra = append(extra, ex...)
			if err != nil && first == nil {
				first = err
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if first != nil {
		return 0, first
	}
	if len(extra) == 0 {
		return 0, nil
	}
	slices.Sort(extra)
	return max(0, extra[len(extra)/2]), nil
}

var errWarm = errors.New("lab: warm-up")

func warmLoop(ctx context.Context, client *http.Client, url, key string, rounds int) ([]time.Duration, error) {
	var starts []time.Time
	p := &retry.Policy{
		MaxAttempts: rounds,
		Schedule:    backoff.Constant(warmupLatency),
		Hooks:       retry.Hooks{OnAttempt: func(retry.Event) { starts = append(starts, time.Now()) }},
	}
	err := retry.Do(ctx, p, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		req.Header[headerWarmup] = []string{key}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			return fmt.Errorf("warm-up answered %d", resp.StatusCode)
		}
		return retry.Retryable(errWarm)
	})
	if !errors.Is(err, retry.ErrExhausted) {
		return nil, err
	}
	var extra []time.Duration
	for i := 2; i < len(starts); i++ {
		extra = append(extra, starts[i].Sub(starts[i-1])-2*warmupLatency)
	}
	return extra, nil
}

// caller runs one logical request to acceptance or give-up.
func (s Scenario) caller(ctx context.Context, n int, start time.Time, url string, client *http.Client,
	st Strategy, bud budget.Budget, lim limit.Limiter, hedge *retry.Hedge, maxAttempts int) ([]Attempt, Caller) {
	c := Caller{Caller: n}
	if s.Ramp > 0 && !sleep(ctx, time.Until(start.Add(s.Ramp*time.Duration(n)/time.Duration(s.Callers)))) {
		c.GaveUp, c.Err = retry.Canceled, ctx.Err()
		if errors.Is(c.Err, context.DeadlineExceeded) {
			c.GaveUp = retry.Deadline
		}
		return nil, c
	}
	var (
		mu   sync.Mutex // a hedge runs attempts at once
		log  []Attempt
		sent int
		wait time.Duration
	)
	id := strconv.Itoa(n)
	p := &retry.Policy{
		MaxAttempts:    maxAttempts,
		Schedule:       st.Schedule,
		AttemptTimeout: s.AttemptTimeout,
		Budget:         bud,
		Limiter:        lim,
		MaxAfter:       time.Minute,
		Rand:           rand.NewPCG(s.Seed, uint64(n)),
		Hooks: retry.Hooks{
			OnRetry:  func(e retry.Event) { mu.Lock(); wait = e.Delay; mu.Unlock() },
			OnGiveUp: func(e retry.Event) { c.GaveUp = e.Reason },
		},
	}
	record := func(a Attempt) {
		mu.Lock()
		log = append(log, a)
		mu.Unlock()
	}
	attempt := func(ctx context.Context) error {
		mu.Lock()
		sent++
		a := Attempt{Caller: n, Attempt: sent, Wait: wait, Sent: time.Since(start), Outcome: Failed}
		if hedge != nil {
			wait = 0 // the next attempt is a hedge, unless OnRetry decides a retry first
		}
		mu.Unlock()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return retry.Permanent(err)
		}
		req.Header[HeaderRequestID] = []string{id}
		req.Header[HeaderAttempt] = []string{strconv.Itoa(a.Attempt)}
		resp, err := client.Do(req)
		if err != nil {
			a.Canceled = hedge != nil && ctx.Err() != nil
			record(a)
			return retry.Retryable(err)
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		if v := resp.Header.Get(HeaderOutcome); v != "" {
			_ = a.Outcome.UnmarshalText([]byte(v))
		}
		record(a)
		switch resp.StatusCode {
		case http.StatusOK:
			return nil
		case http.StatusServiceUnavailable, http.StatusTooManyRequests:
			e := errRefused{status: resp.StatusCode, outcome: a.Outcome}
			if ra, err := strconv.ParseInt(resp.Header.Get("Retry-After"), 10, 64); err == nil && ra > 0 {
				// A foreign server may send any number: saturate, do not wrap.
				return retry.After(e, time.Duration(min(ra, int64(backoff.MaxDelay/time.Second)))*time.Second)
			}
			return retry.Retryable(e)
		}
		return retry.Permanent(fmt.Errorf("gateway answered %d", resp.StatusCode))
	}
	var err error
	if hedge != nil {
		err = hedge.Do(ctx, p, attempt)
		slices.SortFunc(log, func(x, y Attempt) int { return x.Attempt - y.Attempt })
	} else {
		err = retry.Do(ctx, p, attempt)
	}
	c.Attempts = len(log)
	if err == nil {
		c.Accepted, c.GaveUp = true, retry.NoReason
	} else {
		c.Err = err
	}
	return log, c
}

// reconcile joins the callers' attempts with the gateway's arrivals and
// lists every disagreement.
func (r *Result) reconcile() {
	type key struct{ caller, attempt int }
	idx := make(map[key]int, len(r.Attempts))
	for i, a := range r.Attempts {
		idx[key{a.Caller, a.Attempt}] = i
	}
	seen := make(map[key]bool, len(r.Arrivals))
	for _, ar := range r.Arrivals {
		n, err := strconv.Atoi(ar.ID)
		k := key{n, ar.Attempt}
		i, ok := idx[k]
		switch {
		case err != nil || !ok:
			r.Mismatches = append(r.Mismatches, fmt.Sprintf("gateway counted an attempt no caller sent (id %q, attempt %d)", ar.ID, ar.Attempt))
			continue
		case seen[k]:
			r.Mismatches = append(r.Mismatches, fmt.Sprintf("gateway counted caller %d attempt %d more than once", n, ar.Attempt))
			continue
		}
		seen[k] = true
		a := &r.Attempts[i]
		a.Received, a.Arrived = true, ar.At
		if a.Outcome != Failed && a.Outcome != ar.Outcome {
			r.Mismatches = append(r.Mismatches, fmt.Sprintf("caller %d attempt %d: caller saw %s, gateway recorded %s", n, ar.Attempt, a.Outcome, ar.Outcome))
		}
	}
	unseen := 0 // canceled before the gateway counted them
	for _, a := range r.Attempts {
		switch {
		case !a.Received && a.Canceled:
			unseen++
		case !a.Received:
			r.Mismatches = append(r.Mismatches, fmt.Sprintf("caller %d attempt %d was sent but the gateway never counted it", a.Caller, a.Attempt))
		}
	}
	won := make(map[int]time.Duration, len(r.Callers)) // the attempt each caller saw accepted (a hedge's winner need not be the last)
	for _, a := range r.Attempts {
		if a.Outcome == Accepted {
			won[a.Caller] = a.At()
		}
	}
	for i := range r.Callers {
		c := &r.Callers[i]
		if c.Accepted && c.Attempts > 0 {
			c.AcceptedAt = won[c.Caller]
		}
	}
	if len(r.Attempts)-unseen != r.Gateway.Total {
		r.Mismatches = append(r.Mismatches, fmt.Sprintf("callers sent %d attempts, the gateway counted %d", len(r.Attempts)-unseen, r.Gateway.Total))
	}
}
