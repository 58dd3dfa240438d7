package check

import (
	"context"
	"math"
	"math/rand/v2"
	"time"

	"github.com/staggerhq/stagger/internal/simkit"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retry/retrydriver"
)

// Run runs the experiment in virtual time, each policy in a run of its
// own: a discrete-event engine plays the callers and the dependency, and
// each attempt goes through the policy's own retrydriver.Step (Begin before it,
// End after it; Hedge rules for a hedged policy). Nothing waits: an hour
// of timeline takes as long as its events. The result is a pure function
// of the experiment and its Seed. Transport policies cannot run in
// virtual time and are listed in Result.Skipped. ctx is checked every
// 4,096 events.
func Run(ctx context.Context, e Experiment) (*Result, error) {
	p, err := e.plan()
	if err != nil {
		return nil, err
	}
	res := p.result("virtual")
	if e.Replay != nil {
		return res, runReplay(ctx, p, res)
	}
	for _, pol := range e.Policies {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		if !pol.Virtual() {
			res.Skipped = append(res.Skipped, pol.Name+": an http.RoundTripper runs in real time only (RunReal)")
			continue
		}
		r, span, err := runVirtual(ctx, p, pol)
		if err != nil {
			return res, err
		}
		res.Duration = max(res.Duration, span)
		res.Policies = append(res.Policies, r)
	}
	return res, nil
}

func (p *plan) result(clock string) *Result {
	r := &Result{Experiment: *p.e, Clock: clock, Seed: p.e.Seed, Window: p.window}
	if len(p.faults.Clauses) > 0 {
		r.FaultStart, r.FaultEnd = p.faults.Start(), p.faults.End()
	}
	return r
}

// runPolicy returns the policy and hedge of one run, the policy copied so
// that a run can give it a seeded random source (when it has none) without
// touching the caller's value. Its Budget, Limiter, Hooks and Classify are
// the caller's own.
func runPolicy(pol Policy, seed, stream uint64) (*retry.Policy, *retry.Hedge) {
	rp, h := pol.newRetry()
	var pp retry.Policy
	if rp != nil {
		pp = *rp
	}
	if pp.Rand == nil {
		pp.Rand = rand.NewPCG(seed, stream)
	}
	return &pp, h
}

// Event kinds of the virtual run.
const (
	evArrival int32 = iota // the open loop's next logical request
	evStart                // a closed-loop caller starts its next request (ID: caller)
	evAnswer               // the dependency's answer reaches the caller (ID: attempt)
	evTimeout              // an attempt's own timeout fires (ID: attempt)
	evSend                 // a retry's wait ended (ID: request)
	evHedge                // a hedge is due (ID: request)
)

// vreq is a logical request in flight: its Step ledger and what the
// hedging rules need.
type vreq struct {
	d        retry.Delivery
	start    time.Duration
	hedgeAt  time.Duration // when the scheduled hedge is due; -1: none scheduled
	due      time.Duration // when the next hedge is due (the last attempt's start + the delay)
	caller   int32         // closed loop: the caller; -1: open loop
	inFlight int16         // attempts in flight
	pend     int16         // evSend and evHedge events scheduled for it
	done     bool
	retried  bool  // a retry was decided (the latency says nothing of one attempt)
	first    int32 // its attempts in flight, a list through vatt.next; -1: none
}

// vatt is an attempt in flight.
type vatt struct {
	req        int32
	next       int32 // the request's next attempt in flight; -1: none
	answer     answer
	pend       int8          // evAnswer and evTimeout events scheduled for it
	served     bool          // counted in flight at the dependency
	queued     bool          // waiting in the dependency's queue (in fifo)
	over       bool          // answered, timed out or canceled
	at         time.Duration // when it arrived
	retryAfter time.Duration
}

// vrun is one policy's virtual run.
type vrun struct {
	p           *plan
	pp, quiet   *retry.Policy
	h           *retry.Hedge
	maxAttempts int
	maxInFlight int
	dep         *depModel
	m           *meter
	eng         *simkit.Engine
	reqs        []vreq
	freeReq     []int32
	atts        []vatt
	freeAtt     []int32
	left        []int32 // closed loop: requests left per caller
	lastDone    time.Duration
	fifo        []int32 // attempts queued at the dependency (over its Concurrency)
	head        int
}

var background = context.Background()

func runVirtual(ctx context.Context, p *plan, pol Policy) (PolicyResult, time.Duration, error) {
	e := p.e
	seed := e.Seed
	pp, h := runPolicy(pol, seed, 0x9e3779b97f4a7c15)
	quiet := *pp
	quiet.Hooks = retry.Hooks{}
	v := &vrun{p: p, pp: pp, quiet: &quiet, h: h, maxAttempts: pp.MaxAttempts,
		dep: newDepModel(p, rand.New(rand.NewPCG(seed, 2))), m: newMeter(p.window), eng: simkit.NewEngine(1 << 10)}
	if v.maxAttempts == 0 {
		v.maxAttempts = retry.DefaultMaxAttempts
	}
	if h != nil {
		v.maxInFlight = h.MaxInFlight
		if v.maxInFlight == 0 {
			v.maxInFlight = 2
		}
		if v.maxInFlight == 1 || v.maxAttempts == 1 {
			v.h = nil // Hedge.Do runs Do
		}
	}
	c := e.Callers
	eng := v.eng
	var arr *arrivals
	if c.Open() {
		arr = &arrivals{c: c, rng: rand.New(rand.NewPCG(seed, 1))}
		if t := arr.next(); t < p.limit {
			eng.At(t, evArrival, 0)
		}
	} else {
		v.left = make([]int32, c.N)
		for i := range c.N {
			v.left[i] = int32(c.requests())
			var at time.Duration
			if c.Ramp > 0 {
				at = c.Ramp * time.Duration(i+1) / time.Duration(c.N)
			}
			eng.At(at, evStart, int32(i))
		}
	}
	for {
		ev, ok := eng.Next()
		if !ok || ev.At >= p.limit {
			break
		}
		if eng.Processed()%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return PolicyResult{}, 0, err
			}
		}
		switch ev.Kind {
		case evArrival:
			if t := arr.next(); t < p.limit {
				eng.At(t, evArrival, 0)
			}
			v.startRequest(ev.At, -1)
		case evStart:
			v.left[ev.ID]--
			v.startRequest(ev.At, ev.ID)
		default:
			v.handle(ev)
		}
	}
	span := p.limit
	if !c.Open() && p.duration == 0 && v.m.requests == v.m.done {
		span = (v.lastDone/p.window + 1) * p.window
	}
	r := v.m.result(pol.Name, p, span)
	r.Events = eng.Processed()
	return r, span, nil
}

func (v *vrun) newReq(now time.Duration, caller int32) int32 {
	r := vreq{start: now, caller: caller, hedgeAt: -1, first: -1}
	if n := len(v.freeReq); n > 0 {
		id := v.freeReq[n-1]
		v.freeReq = v.freeReq[:n-1]
		v.reqs[id] = r
		return id
	}
	v.reqs = append(v.reqs, r)
	return int32(len(v.reqs) - 1)
}

func (v *vrun) newAtt(a vatt) int32 {
	if n := len(v.freeAtt); n > 0 {
		id := v.freeAtt[n-1]
		v.freeAtt = v.freeAtt[:n-1]
		v.atts[id] = a
		return id
	}
	v.atts = append(v.atts, a)
	return int32(len(v.atts) - 1)
}

// releaseReq frees a request that is done, with nothing in flight and no
// event scheduled for it.
func (v *vrun) releaseReq(id int32) {
	if r := &v.reqs[id]; r.done && r.inFlight == 0 && r.pend == 0 {
		v.freeReq = append(v.freeReq, id)
	}
}

// releaseAtt frees an attempt that is over, with no event scheduled.
func (v *vrun) releaseAtt(id int32) {
	if a := &v.atts[id]; a.over && a.pend == 0 && !a.queued {
		v.freeAtt = append(v.freeAtt, id)
	}
}

func (v *vrun) schedule(at time.Duration, kind, id int32) {
	switch kind {
	case evAnswer, evTimeout:
		v.atts[id].pend++
	case evSend, evHedge:
		v.reqs[id].pend++
	}
	v.eng.At(at, kind, id)
}

// finish ends a logical request (success or give-up) and schedules the
// caller's next one.
func (v *vrun) finish(id int32, now time.Duration, ok bool, reason retry.Reason) {
	r := &v.reqs[id]
	r.done = true
	if ok {
		v.m.success(now, r.start)
	} else {
		v.m.giveUp(now, r.start, reason)
	}
	v.lastDone = max(v.lastDone, now)
	if r.caller >= 0 && v.left[r.caller] > 0 {
		v.eng.After(v.p.e.Callers.Think, evStart, r.caller)
	}
	v.releaseReq(id)
}

// stepPolicy is the policy Begin runs with: the policy itself, or for a
// hedged one its copy without hooks (a hedged policy's hooks do not fire
// in virtual time).
func (v *vrun) stepPolicy() *retry.Policy {
	if v.h != nil {
		return v.quiet
	}
	return v.pp
}

// startRequest starts a logical request at now: the Step's Begin for its
// first attempt (the Budget's Request, a Limiter slot, the deadline).
func (v *vrun) startRequest(now time.Duration, caller int32) {
	id := v.newReq(now, caller)
	v.m.request(now)
	s := retrydriver.Step{Policy: v.stepPolicy()}
	if reason := s.Begin(background, v.eng.Time()); reason != retry.NoReason {
		v.finish(id, now, false, reason)
		return
	}
	v.reqs[id].d = s.Delivery
	v.send(id, now)
}

// send sends the attempt Begin has just counted: the dependency decides
// it, the answer (and the attempt's own timeout, and a hedge) are
// scheduled.
func (v *vrun) send(id int32, now time.Duration) {
	r := &v.reqs[id]
	vd := v.dep.decide(now)
	v.m.attempt(now, vd.answer == answerOK && !vd.queued)
	a := v.newAtt(vatt{req: id, next: r.first, answer: vd.answer, retryAfter: vd.retryAfter, served: vd.served, queued: vd.queued, at: now})
	r.first = a
	r.inFlight++
	if vd.queued {
		v.fifo = append(v.fifo, a)
		vd.delay = math.MaxInt64 - now // the answer's time is not known yet
	} else {
		v.schedule(now+vd.delay, evAnswer, a)
	}
	// the attempt's bound, as Step.Context makes it: AttemptTimeout cut to
	// the time left before the deadline
	bound := v.pp.AttemptTimeout
	if !r.d.Deadline.IsZero() {
		if l := r.d.Deadline.Sub(simkit.Epoch.Add(now)); bound == 0 || l < bound {
			bound = l
		}
	}
	if bound > 0 && bound < vd.delay {
		v.schedule(now+bound, evTimeout, a)
	}
	if v.h != nil {
		r.due = now + v.h.CurrentDelay()
		v.hedgeLater(id)
	}
}

// hedgeLater schedules request id's next hedge, when it is due, if
// another attempt may still start (Hedge.Do's rule) and none is scheduled.
func (v *vrun) hedgeLater(id int32) {
	r := &v.reqs[id]
	if r.hedgeAt >= 0 || int(r.inFlight) >= v.maxInFlight || r.d.Attempt >= v.maxAttempts {
		return
	}
	r.hedgeAt = max(r.due, v.eng.Now())
	v.schedule(r.hedgeAt, evHedge, id)
}

// leave takes an attempt away from the dependency: answered, or its
// caller hung up (a timeout, a hedge's loser), which a server notices and
// stops working on it.
func (v *vrun) leave(aid int32) {
	a := &v.atts[aid]
	for p := &v.reqs[a.req].first; *p >= 0; p = &v.atts[*p].next {
		if *p == aid {
			*p = a.next
			break
		}
	}
	if a.served {
		a.served = false
		v.dep.leave()
		v.wake()
	}
	a.over = true
}

// wake serves queued attempts while the dependency has room, first come
// first served; one whose caller gave up while it waited is dropped.
func (v *vrun) wake() {
	now := v.eng.Now()
	for v.head < len(v.fifo) && v.dep.room() {
		aid := v.fifo[v.head]
		v.head++
		a := &v.atts[aid]
		a.queued = false
		if a.over {
			v.releaseAtt(aid)
			continue
		}
		vd := v.dep.serve(now, 0)
		a.answer, a.retryAfter, a.served = vd.answer, vd.retryAfter, vd.served
		if vd.answer == answerOK {
			v.m.acceptedAt(a.at)
		}
		v.schedule(now+vd.delay, evAnswer, aid)
	}
	if v.head > 1024 && v.head*2 > len(v.fifo) {
		v.fifo = v.fifo[:copy(v.fifo, v.fifo[v.head:])]
		v.head = 0
	}
}

func (v *vrun) handle(ev simkit.Event) {
	now := ev.At
	switch ev.Kind {
	case evAnswer, evTimeout:
		a := &v.atts[ev.ID]
		a.pend--
		if a.over {
			v.releaseAtt(ev.ID)
			return // timed out or canceled before the answer
		}
		err := errTimeoutR
		if ev.Kind == evAnswer {
			err = attemptErr(a.answer, a.retryAfter)
		}
		v.leave(ev.ID)
		id := a.req
		v.releaseAtt(ev.ID)
		v.ended(id, ev.ID, now, err)
	case evSend:
		r := &v.reqs[ev.ID]
		r.pend--
		if r.done {
			v.releaseReq(ev.ID)
			return
		}
		s := retrydriver.Step{Policy: v.stepPolicy(), Delivery: r.d}
		if reason := s.Begin(background, v.eng.Time()); reason != retry.NoReason {
			v.finish(ev.ID, now, false, reason)
			return
		}
		r.d = s.Delivery
		v.send(ev.ID, now)
	case evHedge:
		r := &v.reqs[ev.ID]
		r.pend--
		if r.hedgeAt != now {
			v.releaseReq(ev.ID)
			return // replaced by a later one
		}
		r.hedgeAt = -1
		if r.done || int(r.inFlight) >= v.maxInFlight || r.d.Attempt >= v.maxAttempts {
			v.releaseReq(ev.ID)
			return
		}
		// a hedge needs a Limiter slot and time before the deadline (Begin)
		// and the Budget's Retry, as retry.Hedge asks them; one refused is
		// not sent, and the next is due Delay later
		s := retrydriver.Step{Policy: v.quiet, Delivery: r.d}
		if s.Begin(background, v.eng.Time()) != retry.NoReason {
			r.due = now + v.h.Delay
			v.hedgeLater(ev.ID)
			return
		}
		if v.pp.Budget != nil && !v.pp.Budget.Retry(v.eng.Time()) {
			s.Postpone() // nothing was sent: the slot goes back as served
			r.due = now + v.h.Delay
			v.hedgeLater(ev.ID)
			return
		}
		r.d = s.Delivery
		v.send(ev.ID, now)
	}
}

// ended judges attempt aid of request id, which ended at now with err.
func (v *vrun) ended(id, aid int32, now time.Duration, err error) {
	r := &v.reqs[id]
	r.inFlight--
	if r.done { // a hedge's loser that ended after the winner
		v.releaseReq(id)
		return
	}
	if v.h == nil {
		s := retrydriver.Step{Policy: v.pp, Delivery: r.d}
		s.Resume()
		dec := s.End(err, v.eng.Time())
		r.d = s.Delivery
		switch {
		case err == nil:
			v.finish(id, now, true, retry.NoReason)
		case !dec.Retry:
			v.finish(id, now, false, dec.Reason)
		default:
			v.schedule(now+dec.Delay, evSend, id)
		}
		return
	}
	// hedged: judge the attempt and decide nothing (Hedge.Do's rules):
	// End tells the Budget and frees the slot
	s := retrydriver.Step{Policy: v.quiet, Delivery: r.d}
	s.Delivery.MaxAttempts = s.Delivery.Attempt
	s.Resume()
	dq := s.End(err, v.eng.Time())
	if err == nil {
		if v.h.Quantile > 0 && !r.retried {
			v.h.Observe(now - r.start)
		}
		v.cancelLosers(id, aid)
		v.finish(id, now, true, retry.NoReason)
		return
	}
	switch {
	case dq.Reason != retry.Exhausted:
		v.cancelLosers(id, aid)
		v.finish(id, now, false, dq.Reason)
	case r.inFlight > 0:
		// the others carry the request on; the next hedge comes when due
		v.hedgeLater(id)
	default:
		// the last attempt in flight failed: the Policy decides, as
		// Step.End would (the Budget's Retry included)
		dec := v.pp.Decide(r.d.Attempt, err, v.eng.Time(), r.d.Deadline, r.d.Prev)
		if !dec.Retry {
			v.finish(id, now, false, dec.Reason)
			return
		}
		r.d.Prev, r.retried, r.hedgeAt = dec.Delay, true, -1
		v.schedule(now+dec.Delay, evSend, id)
	}
}

// cancelLosers cancels the attempts of request id still in flight but
// winner: the dependency stops on them, the Budget hears nothing, the
// Limiter slot goes back as served (Hedge.Do's rules for a loser).
func (v *vrun) cancelLosers(id, winner int32) {
	r := &v.reqs[id]
	if r.inFlight == 0 {
		return
	}
	for i := r.first; i >= 0; {
		next := v.atts[i].next
		if i == winner {
			i = next
			continue
		}
		v.leave(i)
		r.inFlight--
		if v.pp.Limiter != nil {
			s := retrydriver.Step{Policy: v.quiet}
			s.Resume()
			s.Postpone()
		}
		v.releaseAtt(i)
		i = next
	}
}
