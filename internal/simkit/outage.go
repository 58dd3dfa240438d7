package simkit

import (
	"math"
	"time"

	"github.com/staggerhq/stagger/retry"
)

// The down-then-up server (outage and herd). Callers are serial: each
// works through its logical requests (jobs) one after another, retrying
// each with the policy until it succeeds or the policy stops. An attempt
// takes half the round trip to reach the server and half to come back. The
// server is down (ErrDown) for attempts it starts serving before the
// outage ends and up afterwards. With a service rate, it serves attempts
// one at a time, first come first served, each taking 1/rate (a database
// host's connection handling); attempts wait their turn, which is what
// spreads a herd.
type outageModel struct {
	callers, jobs int
	outage        time.Duration
	rtt           time.Duration
	atServer      bool          // the round trip is spent at the server, after arrival
	ramp          time.Duration // callers start over the ramp (0: all at once)
	rate          float64       // attempts served per second; 0: unlimited
	window        time.Duration
	bucket        time.Duration
	// lateAt, when set, says how late a real machine sent an attempt due
	// at t (its timers and HTTP stack, as a lab run measured them): the
	// attempt arrives that much after it is due.
	lateAt     func(t time.Duration) time.Duration
	logCallers int  // record every attempt of callers [0, logCallers)
	countWaits bool // count the distinct waits before retries
}

// attemptLog is one attempt as its caller saw it (one log line).
type attemptLog struct {
	caller, attempt int
	wait            time.Duration // wait before this attempt (0 for the first)
	ok              bool
	at              time.Duration // when the attempt reached the server
}

type outageRun struct {
	m       *Meter
	during  int64 // attempts the server handled while down (answered ErrDown)
	arrived int64 // attempts that reached the server during the outage
	log     []attemptLog
	events  uint64
	maxWait time.Duration // longest time an attempt queued at the server
	// lastAccept is the arrival at the server of the last attempt it
	// accepted (what the lab reports as the time to last acceptance).
	lastAccept time.Duration
	waits      map[time.Duration]bool
}

const (
	evArrive int32 = iota // an attempt reaches the server
	evReply               // its answer reaches the caller
	evSend                // a retry's wait ended (only with a limiter)
	evStart               // a caller's first job starts (with a ramp)
)

type outageCaller struct {
	attempt int32
	jobs    int32 // jobs left after the current one
	failed  bool  // the current attempt's answer
	arrived time.Duration
	l       ledger
	wait    time.Duration
}

func (om outageModel) run(p *retry.Policy) outageRun {
	d := driver{p}
	e := NewEngine(om.callers)
	bindClock(p.Limiter, e)
	m := NewMeter(om.window, om.bucket)
	res := outageRun{m: m}
	if om.countWaits {
		res.waits = map[time.Duration]bool{}
	}
	cs := make([]outageCaller, om.callers)
	half := om.rtt / 2
	if om.atServer {
		half = 0
	}
	back := om.rtt - half
	var service time.Duration
	if om.rate > 0 {
		service = time.Duration(math.Round(float64(time.Second) / om.rate))
	}
	var busy time.Duration // the server is serving until busy

	send := func(id int32, at time.Duration) {
		c := &cs[id]
		c.attempt++
		var late time.Duration
		if om.lateAt != nil {
			late = max(om.lateAt(at), 0)
		}
		e.At(at+half+late, evArrive, id)
	}
	start := func(id int32) { // begin the caller's next job at now
		for {
			c := &cs[id]
			if c.jobs <= 0 {
				return
			}
			c.jobs--
			c.attempt, c.l, c.wait = 0, ledger{}, 0
			if r := d.begin(&c.l, e.Time()); r != retry.NoReason {
				m.GiveUp(e.Now(), r)
				continue
			}
			m.Original()
			send(id, e.Now())
			return
		}
	}
	for id := range cs {
		cs[id].jobs = int32(om.jobs)
		if om.ramp > 0 {
			e.At(om.ramp*time.Duration(id+1)/time.Duration(om.callers), evStart, int32(id))
			continue
		}
		start(int32(id))
	}
	for {
		ev, ok := e.Next()
		if !ok {
			break
		}
		id := ev.ID
		c := &cs[id]
		now := e.Now()
		switch ev.Kind {
		case evStart:
			start(id)
		case evArrive:
			m.Call(now)
			c.arrived = now
			if now < om.outage {
				res.arrived++
			}
			begin := now
			if service > 0 {
				begin = max(now, busy)
				busy = begin + service
				res.maxWait = max(res.maxWait, begin-now)
			}
			c.failed = begin < om.outage
			if c.failed {
				res.during++
			}
			e.At(begin+service+back, evReply, id)
		case evReply:
			var err error
			if c.failed {
				err = ErrDown
			}
			if int(id) < om.logCallers {
				res.log = append(res.log, attemptLog{caller: int(id), attempt: int(c.attempt), wait: c.wait, ok: !c.failed, at: c.arrived})
			}
			dec := d.end(&c.l, e.Time(), int(c.attempt), err)
			switch {
			case err == nil:
				res.lastAccept = max(res.lastAccept, c.arrived)
				m.Success(now)
				start(id)
			case !dec.Retry:
				m.GiveUp(now, dec.Reason)
				start(id)
			default:
				c.wait = dec.Delay
				if res.waits != nil {
					res.waits[dec.Delay] = true
				}
				if d.needsSendEvent() {
					e.After(dec.Delay, evSend, id)
				} else {
					send(id, now+dec.Delay)
				}
			}
		case evSend:
			if r := d.again(&c.l, e.Time()); r != retry.NoReason {
				m.GiveUp(now, r)
				start(id)
				continue
			}
			send(id, now)
		}
	}
	res.events = e.Processed()
	return res
}
