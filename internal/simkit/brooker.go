package simkit

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/retry"
)

// Brooker2015Config is the optimistic-concurrency experiment of Marc
// Brooker's "Exponential Backoff And Jitter" (AWS Architecture Blog,
// 2015): N clients each update one shared row once; an update reads the
// row, then writes it conditionally, and the write fails if another write
// landed since the read. A failed client backs off and tries again (read
// and write) until its write lands.
//
// The model: an attempt is four network hops, each an independent
// |Normal(Delay, SD)|: request to the read, the read's answer, the write
// request, the write's answer. The read happens when its request reaches
// the row, the write when its request does; the write succeeds iff no
// write succeeded after the read (a write at the very instant of the read
// counts as seen by it). Writes reaching the row at the same instant are
// applied in client order. The client decides (retry.Policy.Decide) when
// the write's answer reaches it.
//
// With SD = 0 every surviving client moves in lockstep: round k is N−k+1
// attempts, of which one wins, so the calls are N(N+1)/2; round k takes
// 4·Delay, and the k-th wait is the schedule's b(k), so the last client
// finishes at 4·Delay·N + Σ_{k=1}^{N−1} b(k) for a deterministic schedule.
//
// The defaults follow the blog's simulator (aws-samples/
// aws-arch-backoff-simulator, backoff_simulator.py): hops of
// |Normal(10 ms, 2 ms)|, base 5 ms, cap 2 s, N = 10…190 step 10, 100 runs
// per point, and calls counted as writes. That simulator increments its
// attempt counter before it computes the wait, so its k-th wait is drawn
// from the window min(cap, base·2^k): the first retry's window is 2·base.
// With Counter "paper" (the default) expo, full and equal run
// backoff.Exponential with Base 2·base (min(cap, 2·base·2^(k−1)) is the
// same window), so at SD = 0 expo finishes at
// 40 ms·N + Σ_{k=1}^{N−1} min(2 s, 5 ms·2^k); with Counter "stagger" they
// run backoff.Exponential's own convention, whose first window is base.
// Decorrelated starts from sleep = base in both (backoff.Decorrelated
// raises a zero prev to Base).
type Brooker2015Config struct {
	NFrom, NTo, NStep int           // client counts N swept: NFrom, NFrom+NStep, … up to NTo
	Runs              int           // runs per N and strategy, averaged
	Delay, SD         time.Duration // one network hop: |Normal(Delay, SD)|
	Base, Cap         time.Duration // backoff base and cap of every strategy but "none"; Cap >= Base
	Strategies        []string      // of "none", "expo", "full", "equal", "decorrelated"; run in that order
	Counter           string        // "paper": the k-th window is min(cap, base·2^k); "stagger": min(cap, base·2^(k−1))
}

var brookerCounters = []string{"paper", "stagger"}

var brookerStrategies = []string{"none", "expo", "full", "equal", "decorrelated"}

// DefaultBrooker2015 returns the blog's numbers: N = 10…190 step 10, 100
// runs per point, hops of |Normal(10 ms, 2 ms)|, base 5 ms, cap 2 s.
func DefaultBrooker2015() Brooker2015Config {
	return Brooker2015Config{NFrom: 10, NTo: 190, NStep: 10, Runs: 100,
		Delay: 10 * time.Millisecond, SD: 2 * time.Millisecond, Base: 5 * time.Millisecond, Cap: 2 * time.Second,
		Strategies: brookerStrategies, Counter: "paper"}
}

// Params returns the scenario's parameters.
func (c *Brooker2015Config) Params() []*Param {
	return []*Param{
		intParam(&c.NFrom, "n-from", "smallest number of clients", 1, 100_000),
		intParam(&c.NTo, "n-to", "largest number of clients", 1, 100_000),
		intParam(&c.NStep, "n-step", "step between client counts", 1, 100_000),
		intParam(&c.Runs, "runs", "runs per point (averaged)", 1, 1_000_000),
		durParam(&c.Delay, "delay", "mean of one network hop", 0, time.Minute),
		durParam(&c.SD, "sd", "standard deviation of one network hop", 0, time.Minute),
		durParam(&c.Base, "base", "backoff base", time.Nanosecond, time.Hour),
		durParam(&c.Cap, "cap", "backoff cap", time.Nanosecond, 24*time.Hour),
		listParam(&c.Strategies, "strategy", "backoff strategies", brookerStrategies),
		choiceParam(&c.Counter, "counter", "attempt counter of expo, full and equal: paper (the k-th window is min(cap, base·2^k), as the blog's simulator) or stagger (backoff.Exponential: min(cap, base·2^(k−1)))", brookerCounters),
	}
}

func (c *Brooker2015Config) validate() error {
	if err := checkParams(c.Params()); err != nil {
		return err
	}
	switch {
	case c.NTo < c.NFrom:
		return invalid("n-to", "must be >= n-from (%d), got %d", c.NFrom, c.NTo)
	case c.Cap < c.Base:
		return invalid("cap", "must be >= base (%v), got %v", c.Base, c.Cap)
	case c.Delay == 0 && c.SD == 0:
		return invalid("delay", "must be > 0 when sd is 0: with instant hops every read and write coincide")
	}
	points := (c.NTo-c.NFrom)/c.NStep + 1
	if work := float64(points) * float64(c.Runs) * float64(len(c.Strategies)) * float64(c.NTo) * float64(c.NTo); work > 1e10 {
		return invalid("runs", "the sweep is too large: points × runs × strategies × n-to² = %.3g > 1e10 (the default is 3.4e8)", work)
	}
	return nil
}

// schedule returns the schedule of a strategy. With Counter "paper" the
// exponential strategies start from the window 2·base (capped), which is
// the blog simulator's min(cap, base·2^k) for the k-th wait.
func (c *Brooker2015Config) schedule(name string) backoff.Schedule {
	first := c.Base
	if c.Counter != "stagger" {
		first = min(c.Cap, 2*c.Base)
	}
	switch name {
	case "none":
		return backoff.Constant(0)
	case "expo":
		return backoff.Exponential{Base: first, Cap: c.Cap}
	case "full":
		return backoff.Exponential{Base: first, Cap: c.Cap, Jitter: backoff.Full}
	case "equal":
		return backoff.Exponential{Base: first, Cap: c.Cap, Jitter: backoff.Equal}
	}
	return backoff.Decorrelated{Base: c.Base, Cap: c.Cap}
}

// occRun is one run's outcome.
type occRun struct {
	calls      int64
	completion time.Duration
	events     uint64 // the model's events: a write and its answer per call
}

type occClient struct {
	attempt int32
	prev    time.Duration // the previous wait
	read    time.Duration // when the current attempt's read reaches the row
}

// runOCC simulates n clients updating one row with policy p, which must be
// plain (driver.plain: no Budget, no Limiter, no hooks, no Timeout; its
// Rand set); net seeds the hop delays and q is the event queue, reused
// from run to run.
//
// A plain policy's decision shares nothing with the other clients but the
// policy's Rand and reads no clock, so a write's answer is handled in the
// write's event: the answer's arrival is drawn there and the client
// decides for that instant. The attempt and error are those an event at
// the arrival would give; the delay is drawn from the same distribution,
// though from another place in the shared Rand's sequence, so a seed's
// numbers differ from such a model's, not their expectation. The queue
// holds one event per client, the next write of its attempt in flight,
// and handles one per attempt; the answers still count as events.
func runOCC(n int, delay, sd time.Duration, p *retry.Policy, net occRand, q *occQueue) occRun {
	m := occModel{q: q, d: driver{p}, cs: make([]occClient, n), net: newOCCNet(net, delay, sd)}
	if !m.d.plain() {
		panic("sim: runOCC needs a policy with no Budget, Limiter, Timeout or hooks")
	}
	q.reset(n)
	for id := range m.cs {
		m.attempt(int32(id), 0)
	}
	last := time.Duration(math.MinInt64) // when the last successful write landed
	for {
		now, id, ok := q.next()
		if !ok {
			break
		}
		m.res.calls++
		c := &m.cs[id]
		won := last <= c.read
		if won {
			last = now
		}
		m.answer(id, won, now+m.net.hop())
	}
	m.res.events = 2 * uint64(m.res.calls) // a write and its answer
	return m.res
}

// occModel is one run of runOCC.
type occModel struct {
	q   *occQueue
	d   driver
	cs  []occClient
	net occNet
	res occRun
}

// attempt starts client id's next attempt at virtual time at: the read's
// request, the read's answer and the write's request are three hops.
func (m *occModel) attempt(id int32, at time.Duration) {
	c := &m.cs[id]
	c.attempt++
	c.read = at + m.net.hop()
	m.q.push(c.read+m.net.hop()+m.net.hop(), id)
}

// answer: the answer to client id's write (won: it landed) reaches the
// client at now, and the client decides.
func (m *occModel) answer(id int32, won bool, now time.Duration) {
	c := &m.cs[id]
	var err error
	if !won {
		err = ErrConflict
	}
	// a plain policy without a deadline reads no clock: the zero time
	dec := m.d.decide(time.Time{}, int(c.attempt), err, time.Time{}, c.prev)
	if err == nil || !dec.Retry {
		m.res.completion = max(m.res.completion, now)
		return
	}
	c.prev = dec.Delay
	m.attempt(id, now+dec.Delay)
}

// occQueue is runOCC's event queue: the pending writes, at most one per
// client, earliest first; writes at the same instant come out in client
// order. Since each client has at most one, the queue is a tournament
// (winner) tree with a fixed leaf per client: a node holds the least key
// below it and the root the next write. Changing a client's write walks
// from its leaf to the root, one load and one min per level, a loop of
// fixed length per run without a data-dependent branch (a 4-ary heap's
// sifts were a quarter of the sweep, most of it mispredicted loop exits).
//
// A key is one uint64, (at − base)<<idBits | id, so keys are unique, a
// compare is one instruction and the root names its client. base is a
// time at or before every pending write. When a write lies 2^atBits ns or
// more past base, base moves up to now, the time of the write taken last,
// which every pending write is at or after (a rare pass over the tree:
// with 190 clients, every 2^56 ns of virtual time). From now a write is
// at most one wait and four hops ahead: at most 24 h + 4·(1 min + 15·1
// min) with the scenario's limits on cap, delay and sd (a |Normal| draw
// of the ziggurat is below 15 sd), under the 2^47 ns (39 h) left for at
// with 100,000 clients.
type occQueue struct {
	t      []uint64 // t[1] the root; t[p+id] client id's leaf; occFree: none
	p      int      // the number of leaves, a power of 2
	base   time.Duration
	now    time.Duration // the time of the write next returned last
	idBits uint
	atBits uint // 64 − idBits (fewer in tests, to exercise rebase)
	taken  int  // the client whose write next returned last, or −1
}

// occFree is the key of a leaf with no write: larger than any key.
const occFree = ^uint64(0)

func (h *occQueue) reset(n int) {
	h.p = 1
	for h.p < n {
		h.p <<= 1
	}
	if cap(h.t) < 2*h.p {
		h.t = make([]uint64, 2*h.p)
	}
	h.t = h.t[:2*h.p]
	for i := range h.t {
		h.t[i] = occFree
	}
	h.base, h.now, h.taken = 0, 0, -1
	h.idBits = uint(bits.Len(uint(h.p - 1)))
	h.atBits = 64 - h.idBits
}

// push sets client id's write to time at (not before now), replacing the
// one next returned for it.
func (h *occQueue) push(at time.Duration, id int32) {
	off := uint64(at - h.base)
	if off>>h.atBits != 0 {
		h.rebase()
		if off = uint64(at - h.base); off>>h.atBits != 0 {
			panic(fmt.Sprintf("sim: a write %v ahead of now, beyond the queue's range", at-h.now))
		}
	}
	if int(id) == h.taken {
		h.taken = -1
	}
	h.set(int(id), off<<h.idBits|uint64(id))
}

// set gives client id the key k and updates the nodes above its leaf.
func (h *occQueue) set(id int, k uint64) {
	t := h.t
	i := h.p + id
	t[i] = k
	for i > 1 {
		k = min(k, t[i^1])
		i >>= 1
		t[i] = k
	}
}

// rebase moves base up to now. Every key is at or after now, so each
// drops by the same amount and the order stays.
func (h *occQueue) rebase() {
	d := uint64(h.now-h.base) << h.idBits
	for i, k := range h.t {
		if k != occFree {
			h.t[i] = k - d
		}
	}
	h.base = h.now
}

// next returns the earliest write (the one it returned before is gone
// unless push replaced it); ok is false when none is pending.
func (h *occQueue) next() (at time.Duration, id int32, ok bool) {
	if h.taken >= 0 {
		h.set(h.taken, occFree)
		h.taken = -1
	}
	k := h.t[1]
	if k == occFree {
		return 0, 0, false
	}
	h.now = h.base + time.Duration(k>>h.idBits)
	id = int32(k & (1<<h.idBits - 1))
	h.taken = int(id)
	return h.now, id, true
}

// occNet draws network hops: |Normal(mean, sd)|, or exactly delay when sd
// is 0. It draws them in batches, in order, so the loop that draws them
// runs many draws at once and a hop costs a load; the hops of a run are
// the same as drawn one at a time (those left in the batch at the end of
// the run are never used).
type occNet struct {
	buf      [64]time.Duration
	i        int // the next hop in buf; len(buf): buf is used up
	src      occRand
	delay    time.Duration
	mean, sd float64
	x        [64]float64
}

func newOCCNet(src occRand, delay, sd time.Duration) occNet {
	h := occNet{src: src, delay: delay, mean: float64(delay), sd: float64(sd)}
	h.i = len(h.buf)
	return h
}

func (h *occNet) hop() time.Duration {
	if h.i == len(h.buf) {
		h.fill()
	}
	h.i++
	return h.buf[(h.i-1)&(len(h.buf)-1)]
}

// fill draws the next batch of hops.
func (h *occNet) fill() {
	h.i = 0
	if h.sd == 0 {
		for k := range h.buf {
			h.buf[k] = h.delay
		}
		return
	}
	h.src.normals(h.x[:])
	for k, x := range h.x {
		h.buf[k] = time.Duration(math.Abs(h.mean + h.sd*x))
	}
}

// occRand is the generator of the hops and of the policies' jitter (it
// is a rand.Source): wyrand (Wang Yi's wyhash generator, the one Go's
// runtime uses for its own random numbers), a 64-bit counter mixed by one
// 64×64→128-bit multiplication. The hops take four draws an attempt;
// PCG's three multiplications per draw made them the largest cost of the
// scenario.
type occRand uint64

func (r *occRand) Uint64() uint64 {
	*r += 0xa0761d6478bd642f
	hi, lo := bits.Mul64(uint64(*r), uint64(*r)^0xe7037ed1a0b428db)
	return hi ^ lo
}

// normals fills xs with standard normal draws from r: the ziggurat of
// math/rand/v2's Rand.NormFloat64 (Marsaglia and Tsang, "The Ziggurat
// Method for Generating Random Variables", 2000; 128 layers) on the same
// tables, so it yields the numbers NormFloat64 yields on the same source
// (TestNormal), without a call through the Source interface per number.
func (r *occRand) normals(xs []float64) {
	g := *r // in a register through the loop
	for k := range xs {
		u := g.Uint64()
		j := int32(u) // possibly negative
		i := u >> 32 & 0x7f
		x := float64(j) * float64(zigW[i])
		// |j| < k[i] in 99% of the draws; |j| without a branch on its sign
		if uint32((j^j>>31)-j>>31) >= zigK[i] {
			x, g = normalSlow(g, j, i, x)
		}
		xs[k] = x
	}
	*r = g
}

// normalSlow is the rest of NormFloat64's loop, from a draw that fell in
// the base strip's tail (i = 0) or in a wedge between two layers; it
// returns the draw and the generator after it.
func normalSlow(g occRand, j int32, i uint64, x float64) (float64, occRand) {
	float := func() float64 { return float64(g.Uint64()<<11>>11) / (1 << 53) }
	for {
		if i == 0 {
			for {
				x = -math.Log(float()) * (1.0 / zigR)
				y := -math.Log(float())
				if y+y >= x*x {
					break
				}
			}
			if j > 0 {
				return zigR + x, g
			}
			return -zigR - x, g
		}
		if zigF[i]+float32(float())*(zigF[i-1]-zigF[i]) < float32(math.Exp(-.5*x*x)) {
			return x, g
		}
		u := g.Uint64()
		j = int32(u)
		i = u >> 32 & 0x7f
		x = float64(j) * float64(zigW[i])
		if uint32((j^j>>31)-j>>31) < zigK[i] {
			return x, g
		}
	}
}

// zigR is the start of the ziggurat's tail; zigV is the area of each of
// its 128 layers.
const (
	zigR = 3.442619855899
	zigV = 9.91256303526217e-3
)

// The ziggurat's tables, built as Marsaglia and Tsang's zigset builds
// them (these are the values of math/rand/v2's kn, wn and fn, bit for
// bit; TestNormal compares the draws).
var zigK, zigW, zigF = zigTables()

func zigTables() (k [128]uint32, w, f [128]float32) {
	const m1 = 1 << 31
	dn, tn := zigR, zigR
	q := zigV / math.Exp(-.5*dn*dn)
	k[0] = uint32(dn / q * m1)
	w[0], w[127] = float32(q/m1), float32(dn/m1)
	f[0], f[127] = 1, float32(math.Exp(-.5*dn*dn))
	for i := 126; i >= 1; i-- {
		dn = math.Sqrt(-2 * math.Log(zigV/dn+math.Exp(-.5*dn*dn)))
		k[i+1] = uint32(dn / tn * m1)
		tn = dn
		f[i] = float32(math.Exp(-.5 * dn * dn))
		w[i] = float32(dn / m1)
	}
	return k, w, f
}

// Run sweeps N for each strategy, averaging Runs runs per point.
func (c *Brooker2015Config) Run(ctx context.Context, o Options) (*Result, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	strategies := selected(brookerStrategies, c.Strategies)
	var ns []int
	for n := c.NFrom; n <= c.NTo; n += c.NStep {
		ns = append(ns, n)
	}
	total := len(strategies) * len(ns) * c.Runs
	runs := make([]occRun, total)
	queues := make(chan *occQueue, 64)
	err := parallel(ctx, o, total, func(i int) {
		si, rest := i/(len(ns)*c.Runs), i%(len(ns)*c.Runs)
		ni, r := rest/c.Runs, rest%c.Runs
		s := strategies[si]
		p := &retry.Policy{MaxAttempts: math.MaxInt, Schedule: c.schedule(brookerStrategies[s])}
		jitter := occRand(mix(o.Seed, uint64(s), uint64(ns[ni]), uint64(r), 1))
		p.Rand = &jitter
		net := occRand(mix(o.Seed, uint64(s), uint64(ns[ni]), uint64(r), 2))
		var q *occQueue
		select {
		case q = <-queues:
		default:
			q = new(occQueue)
		}
		runs[i] = runOCC(ns[ni], c.Delay, c.SD, p, net, q)
		select {
		case queues <- q:
		default:
		}
	})
	if err != nil {
		return nil, err
	}
	res := &Result{
		Scenario: "brooker2015",
		Title:    fmt.Sprintf("N clients update one row with optimistic concurrency; mean of %d runs per point", c.Runs),
		Settings: settings(c.Params(), o),
		Table: Table{Columns: []Column{
			{Key: "strategy", Title: "strategy"},
			{Key: "clients", Title: "clients"},
			{Key: "calls", Title: "calls", Prec: 1},
			{Key: "calls_per_client", Title: "calls/client", Prec: 2},
			{Key: "completion_ms", Title: "completion ms", Prec: 1},
		}},
	}
	callsChart := Chart{Title: "calls vs clients", XLabel: "clients (N)", YLabel: "calls (mean)"}
	timeChart := Chart{Title: "completion time vs clients", XLabel: "clients (N)", YLabel: "completion (ms, mean, log scale)", LogY: true}
	for si, s := range strategies {
		name := brookerStrategies[s]
		cs, ts := Series{Name: name}, Series{Name: name}
		for ni, n := range ns {
			var calls int64
			var done time.Duration
			for r := range c.Runs {
				run := runs[(si*len(ns)+ni)*c.Runs+r]
				calls += run.calls
				done += run.completion
				res.Events += run.events
			}
			mc := float64(calls) / float64(c.Runs)
			mt := float64(done) / float64(c.Runs) / float64(time.Millisecond)
			res.Table.Rows = append(res.Table.Rows, []any{name, n, mc, mc / float64(n), mt})
			cs.Points = append(cs.Points, Point{X: float64(n), Y: mc})
			ts.Points = append(ts.Points, Point{X: float64(n), Y: mt})
		}
		callsChart.Series = append(callsChart.Series, cs)
		timeChart.Series = append(timeChart.Series, ts)
	}
	res.Charts = []Chart{callsChart, timeChart}
	return res, nil
}
