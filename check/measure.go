package check

import (
	"math"
	"slices"
	"time"

	"github.com/staggerhq/stagger/internal/simkit"
	"github.com/staggerhq/stagger/retry"
)

// Result is one experiment run on one clock.
type Result struct {
	// Experiment is the experiment as given.
	Experiment Experiment
	// Clock is "virtual" ([Run]) or "real" ([RunReal]).
	Clock string
	// Seed is the seed the run used.
	Seed uint64
	// Policies holds one result per policy run, in the experiment's order.
	Policies []PolicyResult
	// Skipped names the policies this clock cannot run (a Transport in
	// virtual time), each with the reason.
	Skipped []string
	// FaultStart and FaultEnd bound the fault timeline (both 0 without
	// faults).
	FaultStart, FaultEnd time.Duration
	// Window is the width of a window.
	Window time.Duration
	// Duration is how long the run lasted (its timeline, in either clock).
	Duration time.Duration
	// Recorded is, for a replay, what the recording received per window
	// (Attempts, Requests: its first attempts, Accepted: its served
	// answers); nil otherwise.
	Recorded []Window
}

// Policy returns the result of the policy named name, or nil.
func (r *Result) Policy(name string) *PolicyResult {
	for i := range r.Policies {
		if r.Policies[i].Name == name {
			return &r.Policies[i]
		}
	}
	return nil
}

// Window is what the dependency received and the callers got in one
// window [Start, Start+width).
type Window struct {
	Start     time.Duration
	Attempts  int64 // attempts that arrived
	Accepted  int64 // of which answered 200
	Requests  int64 // logical requests that started
	Successes int64 // logical requests that succeeded
}

// Amplification returns attempts per logical request started in the
// window (0 when none started).
func (w Window) Amplification() float64 {
	if w.Requests == 0 {
		return 0
	}
	return float64(w.Attempts) / float64(w.Requests)
}

// Latency holds percentiles of the time callers waited for their logical
// requests (from the start to success or give-up).
type Latency struct {
	P50, P90, P99, Max time.Duration
}

// PolicyResult is what one policy did.
type PolicyResult struct {
	Name string
	// Requests counts logical requests started; Attempts the attempts the
	// dependency received; Accepted those it answered 200.
	Requests, Attempts, Accepted int64
	// Successes counts logical requests that succeeded; GaveUp those that
	// stopped without success, by reason (retry.Reason's names, or "status
	// N" for a transport that returned a refusal); Unfinished those still
	// going when the run ended.
	Successes  int64
	GaveUp     map[string]int64
	Unfinished int64
	// Amplification is Attempts / Requests.
	Amplification float64
	// Peak is the most attempts received in any window of the
	// experiment's width, the window ending at PeakAt.
	Peak   int
	PeakAt time.Duration
	// Goodput is successes per second over the run.
	Goodput float64
	// Recovered says goodput came back after the fault (within the
	// experiment's Tolerance of its level before the fault, and stayed
	// there; for a closed loop: every caller finished), Recovery how long
	// after the fault's end.
	Recovered bool
	Recovery  time.Duration
	// Metastable says the run ended still failing long after the fault:
	// goodput not back at its end (open loop; averaged over its last 5
	// windows), or callers unfinished (closed loop).
	Metastable bool
	// Latency is what the callers waited.
	Latency Latency
	// Windows holds the timeline, one per window.
	Windows []Window
	// Events is the number of events the virtual run handled (0 in real
	// time).
	Events uint64
	// Lateness is, in real time with an open loop, the most a logical
	// request started after its scheduled arrival: how much the machine
	// held the run back (a loaded machine stalls goroutines for tens of
	// milliseconds). 0 in virtual time.
	Lateness time.Duration
}

// MaxWindowAmplification returns the highest amplification of any window
// in which requests started, and that window.
func (p *PolicyResult) MaxWindowAmplification() (float64, Window) {
	var best float64
	var at Window
	for _, w := range p.Windows {
		if a := w.Amplification(); a > best {
			best, at = a, w
		}
	}
	return best, at
}

// meter counts one policy's run from both sides. Attempts must be counted
// in time order.
type meter struct {
	m        *simkit.Meter
	window   time.Duration
	windows  []Window
	gaveUp   [retry.CircuitOpen + 1]int64
	other    map[string]int64
	requests int64
	accepted int64
	lat      []time.Duration
	done     int64
	lastDone time.Duration
}

func newMeter(window time.Duration) *meter {
	return &meter{m: simkit.NewMeter(window, window), window: window}
}

func (m *meter) win(t time.Duration) *Window {
	i := int(t / m.window)
	for len(m.windows) <= i {
		m.windows = append(m.windows, Window{Start: time.Duration(len(m.windows)) * m.window})
	}
	return &m.windows[i]
}

func (m *meter) request(t time.Duration) {
	m.requests++
	m.win(t).Requests++
}

func (m *meter) attempt(t time.Duration, ok bool) {
	m.m.Call(t)
	w := m.win(t)
	w.Attempts++
	if ok {
		w.Accepted++
		m.accepted++
	}
}

// acceptedAt counts an attempt that arrived at t (and was counted then)
// as accepted: its answer was decided later (it waited in a queue).
func (m *meter) acceptedAt(t time.Duration) {
	m.win(t).Accepted++
	m.accepted++
}

func (m *meter) success(t, start time.Duration) {
	m.m.Success(t)
	m.win(t).Successes++
	m.finish(t, start)
}

func (m *meter) giveUp(t, start time.Duration, r retry.Reason) {
	if int(r) < len(m.gaveUp) {
		m.gaveUp[r]++
	}
	m.finish(t, start)
}

func (m *meter) giveUpOther(t, start time.Duration, why string) {
	if m.other == nil {
		m.other = map[string]int64{}
	}
	m.other[why]++
	m.finish(t, start)
}

func (m *meter) finish(t, start time.Duration) {
	m.done++
	m.lastDone = max(m.lastDone, t)
	m.lat = append(m.lat, t-start)
}

// result sums the run up; p gives the faults, span the run's length,
// open whether the callers were an open loop.
func (m *meter) result(name string, p *plan, span time.Duration) PolicyResult {
	if span > 0 {
		m.win(span - 1) // the timeline covers the whole run
	}
	r := PolicyResult{Name: name, Requests: m.requests, Attempts: m.m.Calls(), Accepted: m.accepted,
		Successes: m.m.Successes(), Windows: m.windows, GaveUp: map[string]int64{}}
	for i, n := range m.gaveUp {
		if n > 0 {
			r.GaveUp[retry.Reason(i).String()] = n
		}
	}
	for k, n := range m.other {
		r.GaveUp[k] += n
	}
	r.Unfinished = m.requests - m.done
	if m.requests > 0 {
		r.Amplification = float64(r.Attempts) / float64(m.requests)
	}
	r.Peak, r.PeakAt = m.m.Peak()
	if span > 0 {
		r.Goodput = float64(r.Successes) / span.Seconds()
	}
	slices.Sort(m.lat)
	q := func(f float64) time.Duration {
		if len(m.lat) == 0 {
			return 0
		}
		return m.lat[min(len(m.lat)-1, int(math.Ceil(f*float64(len(m.lat))))-1)]
	}
	if len(m.lat) > 0 {
		r.Latency = Latency{P50: q(0.5), P90: q(0.9), P99: q(0.99), Max: m.lat[len(m.lat)-1]}
	}
	end := p.faults.End()
	if !p.e.Callers.Open() {
		r.Recovered = r.Unfinished == 0
		if r.Recovered {
			r.Recovery = max(0, m.lastDone-end)
		}
	} else {
		r.Recovered, r.Recovery, r.Metastable = m.recovery(p, span)
	}
	if !r.Recovered {
		r.Metastable = true
	}
	return r
}

// recoverySpan is how many windows goodput is averaged over when judging
// recovery, so that one quiet window of a Poisson stream does not count
// as a relapse.
const recoverySpan = 5

// recovery finds the first window at or after the fault's end from which
// goodput, averaged over recoverySpan windows, is within the tolerance of
// its level before the fault (the offered load, when the fault starts
// before a steady level could be seen); metastable says the last
// recoverySpan windows of the run are not.
func (m *meter) recovery(p *plan, span time.Duration) (recovered bool, at time.Duration, metastable bool) {
	ws := m.windows
	full := min(int(span/m.window), len(ws)) // windows wholly inside the run
	start, end := p.faults.Start(), p.faults.End()
	steady := int((p.e.Callers.Ramp + m.window - 1) / m.window)
	var base float64
	if n := int(start/m.window) - steady; n >= recoverySpan {
		var s int64
		for _, w := range ws[steady : steady+n] {
			s += w.Successes
		}
		base = float64(s) / float64(n)
	} else {
		base = p.e.Callers.Rate * m.window.Seconds() // the offered load
	}
	need := (1 - p.e.tolerance()) * base
	// good: the mean goodput of windows [i, i+recoverySpan), cut at the
	// run's end, is high enough
	good := func(i int) bool {
		j := min(i+recoverySpan, full)
		var s int64
		for _, w := range ws[i:j] {
			s += w.Successes
		}
		return float64(s)/float64(j-i) >= need
	}
	first := int((end + m.window - 1) / m.window)
	if first >= full {
		return false, 0, true
	}
	metastable = !good(max(first, full-recoverySpan))
	for i := first; i < full; i++ {
		if good(i) {
			return true, max(0, time.Duration(i)*m.window-end), metastable
		}
	}
	return false, 0, metastable
}
