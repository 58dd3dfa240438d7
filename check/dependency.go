package check

import (
	"errors"
	"math"
	"math/rand/v2"
	"time"

	"github.com/staggerhq/stagger/internal/labkit"
	"github.com/staggerhq/stagger/internal/simkit"
	"github.com/staggerhq/stagger/retry"
)

// answer is what the dependency does with one attempt.
type answer uint8

const (
	answerOK      answer = iota // 200 after the latency
	answer503                   // 503 (with Retry-After when retryAfter > 0)
	answerDrop                  // the connection closes without an answer
	answerHang                  // no answer for the hang, then a drop
	answerRefused               // over capacity: refused at once as Refusal says
	answer500                   // 500 after the delay (a replayed 5xx)
)

// verdict is the dependency's decision for an arriving attempt.
type verdict struct {
	answer     answer
	delay      time.Duration // until the answer (or the drop)
	retryAfter time.Duration // with a 503
	served     bool          // the attempt counts in flight until it is answered
	queued     bool          // over Concurrency with Overload Queue: served later (serve)
	outcome    labkit.Outcome
}

// depModel is the receiving side's rules, shared by the virtual and the
// real-time run: one decision per arriving attempt. It is not safe for
// concurrent use (the real-time gateway holds a lock around it).
type depModel struct {
	d        Dependency
	fc       *labkit.FaultClauses
	cap      int           // the clause "cap N": refused at once
	interval time.Duration // 1/Rate
	tat      time.Duration // when the rate cap serves the next attempt
	inFlight int
	rng      *rand.Rand
	replay   *simkit.Replay // a recorded timeline, in place of the rules above
	adm      simkit.ReplayAdmission
}

func newDepModel(p *plan, rng *rand.Rand) *depModel {
	m := &depModel{d: p.e.Dependency, fc: p.faults, rng: rng, cap: p.faults.Capacity}
	if p.e.Replay != nil {
		m.replay = p.e.Replay.dep
	}
	if m.d.Rate > 0 {
		m.interval = time.Duration(math.Round(float64(time.Second) / m.d.Rate))
	}
	return m
}

// refusal returns how a refusal looks.
func (m *depModel) refusal() (answer, time.Duration) {
	switch {
	case m.d.Refusal == Drop:
		return answerDrop, 0
	case m.d.Refusal == Timeout:
		return answerHang, 0
	case m.d.Refusal == RetryAfter:
		ra := m.d.RetryAfter
		if ra == 0 {
			ra = time.Second
		}
		return answer503, ra
	case m.fc.RetryAfter > 0:
		return answer503, m.fc.RetryAfter
	}
	return answer503, 0
}

// decide decides an attempt arriving at t (from the start). A served
// verdict counts the attempt in flight; the caller calls leave when it is
// answered or its caller hung up.
func (m *depModel) decide(t time.Duration) verdict {
	if m.replay != nil {
		return m.replayed(t)
	}
	if m.fc.IsDropped(t) {
		return verdict{answer: answerDrop, outcome: labkit.Dropped}
	}
	if m.cap > 0 && m.inFlight >= m.cap {
		return m.refuse(labkit.Busy)
	}
	if c := m.d.Concurrency; c > 0 && m.inFlight >= c {
		if m.d.Overload == Queue {
			return verdict{queued: true}
		}
		return m.refuse(labkit.Busy)
	}
	var wait time.Duration
	if m.interval > 0 {
		switch {
		case m.tat <= t:
			m.tat = t + m.interval
		case m.d.Overload == Queue:
			wait = m.tat - t
			m.tat += m.interval
		default:
			return m.refuse(labkit.Busy)
		}
	}
	return m.serve(t, wait)
}

// replayed decides an attempt arriving at t in a recorded timeline, by
// the virtual replay's own rule (simkit.Replay.Outcome): nothing is
// counted in flight, the recorded capacity is a count per window.
func (m *depModel) replayed(t time.Duration) verdict {
	lat, err := m.replay.Outcome(t, m.rng, &m.adm)
	switch err {
	case nil:
		return verdict{answer: answerOK, delay: lat, outcome: labkit.Accepted}
	case simkit.ErrShed:
		return verdict{answer: answer503, delay: lat, outcome: labkit.Busy}
	case simkit.ErrFailed:
		return verdict{answer: answer500, delay: lat, outcome: labkit.Failed}
	case simkit.ErrTimeout:
		return verdict{answer: answerHang, delay: m.hang(), outcome: labkit.Dropped}
	}
	return verdict{answer: answerDrop, outcome: labkit.Dropped} // a reset
}

// room reports whether a queued attempt may be served now.
func (m *depModel) room() bool {
	return m.inFlight < m.d.Concurrency && (m.cap == 0 || m.inFlight < m.cap)
}

// serve starts serving an attempt at t (after wait for the rate cap): its
// latency and its answer, the fault timeline read at t.
func (m *depModel) serve(t, wait time.Duration) verdict {
	m.inFlight++
	lat := m.fc.LatencyAt(t) + m.d.Latency + wait + time.Duration(m.inFlight)*m.d.PerInFlight
	if m.d.LatencyExp > 0 {
		lat += time.Duration(m.rng.ExpFloat64() * float64(m.d.LatencyExp))
	}
	if m.fc.IsDown(t) {
		v := verdict{served: true, delay: lat, outcome: labkit.Down}
		v.answer, v.retryAfter = m.refusal()
		if v.answer == answerHang {
			v.delay = m.hang()
		}
		return v
	}
	return verdict{answer: answerOK, delay: lat, served: true, outcome: labkit.Accepted}
}

// refuse is a refusal at once, over capacity.
func (m *depModel) refuse(o labkit.Outcome) verdict {
	v := verdict{outcome: o}
	v.answer, v.retryAfter = m.refusal()
	if v.answer == answerHang {
		v.delay, v.served = m.hang(), true
		m.inFlight++
	}
	return v
}

func (m *depModel) hang() time.Duration {
	if m.d.Hang == 0 {
		return DefaultHang
	}
	return m.d.Hang
}

// leave ends a served attempt.
func (m *depModel) leave() { m.inFlight-- }

// The errors a caller's attempt ends with, in both runs: every refusal is
// retryable, as a 503 and a dropped connection are to retryhttp.
var (
	errRefused = errors.New("check: dependency answered 503")
	errDropped = errors.New("check: connection dropped without an answer")
	errTimeout = errors.New("check: attempt timed out")
	errFailed  = errors.New("check: dependency answered 500")

	errRefusedR = retry.Retryable(errRefused)
	errDroppedR = retry.Retryable(errDropped)
	errTimeoutR = retry.Retryable(errTimeout)
	errFailedR  = retry.Retryable(errFailed)
)

// attemptErr is the error an attempt answered a with ends with.
func attemptErr(a answer, retryAfter time.Duration) error {
	switch a {
	case answerOK:
		return nil
	case answer503:
		if retryAfter > 0 {
			return retry.After(errRefused, retryAfterSeconds(retryAfter))
		}
		return errRefusedR
	}
	return errDroppedR
}

// retryAfterSeconds is what a caller reads from a Retry-After header of
// d: whole seconds, rounded up.
func retryAfterSeconds(d time.Duration) time.Duration {
	return (d + time.Second - 1) / time.Second * time.Second
}

// arrivals generates the open loop's arrival times: a rate that climbs
// linearly from 0 to Rate over Ramp, then stays; constant gaps or Poisson.
type arrivals struct {
	c   Callers
	rng *rand.Rand
	k   int
	t   time.Duration
}

// next returns the next arrival time.
func (a *arrivals) next() time.Duration {
	c := a.c
	if c.Poisson {
		for { // thinning: a Poisson process of rate Rate, kept with probability rate(t)/Rate
			a.t += time.Duration(a.rng.ExpFloat64() / c.Rate * float64(time.Second))
			if a.t >= c.Ramp || a.rng.Float64()*float64(c.Ramp) < float64(a.t) {
				return a.t
			}
		}
	}
	a.k++
	ramp := c.Ramp.Seconds()
	n := float64(a.k)
	// arrivals by t: Rate·t²/(2·Ramp) inside the ramp, then Rate·(t − Ramp/2)
	if n <= c.Rate*ramp/2 {
		a.t = time.Duration(math.Sqrt(2*ramp*n/c.Rate) * float64(time.Second))
	} else {
		a.t = time.Duration((n/c.Rate + ramp/2) * float64(time.Second))
	}
	return a.t
}
