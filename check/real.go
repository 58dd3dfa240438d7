package check

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
	"sync"
	"time"

	"github.com/staggerhq/stagger/internal/labkit"
	"github.com/staggerhq/stagger/internal/simkit"
	"github.com/staggerhq/stagger/retry"
)

// RunReal runs the experiment in real time, each policy in a run of its
// own on a fresh loopback gateway (127.0.0.1, a random port, HTTP/2
// without TLS) that plays the dependency and the faults and counts every
// attempt that reaches it (the lab's recorder). Callers are goroutines: a retry policy runs
// retry.Do, a hedged one Hedge.Do, a transport carries the requests
// itself. A run lasts as long as its timeline (the experiment's Duration,
// or until a closed loop's callers are done), so keep real-time
// experiments to seconds. At most MaxRealRequests logical requests.
//
// With Replay set, the gateway follows the recording per window by the
// virtual replay's rules (its capacity, error rate and mix, latency
// percentiles; healthy between and after its windows), the callers start
// the recorded first attempts at the instants the virtual replay draws,
// and the run lasts until every request has finished (at most a minute
// after the recording ends). A hedge and a transport replay in real time.
func RunReal(ctx context.Context, e Experiment) (*Result, error) {
	p, err := e.plan()
	if err != nil {
		return nil, err
	}
	c := e.Callers
	res := p.result("real")
	if e.Replay != nil {
		if n := e.Replay.originals(); n > MaxRealRequests {
			return nil, fmt.Errorf("%w: Replay: a recording must start <= %d requests in real time, got %d", ErrInvalid, MaxRealRequests, n)
		}
		p.limit = e.Replay.End() + time.Minute
		replayFrame(res, e.Replay)
	}
	if n := c.Rate * p.limit.Seconds(); c.Open() && n > MaxRealRequests {
		return nil, fmt.Errorf("%w: Callers.Rate × Duration must be <= %d requests in real time, got %.3g", ErrInvalid, MaxRealRequests, n)
	}
	if n := c.N * c.requests(); !c.Open() && n > MaxRealRequests {
		return nil, fmt.Errorf("%w: Callers.N × Requests must be <= %d requests in real time, got %d", ErrInvalid, MaxRealRequests, n)
	}
	for _, pol := range e.Policies {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		r, span, err := runReal(ctx, p, pol)
		if err != nil {
			return res, fmt.Errorf("check: %s: %w", pol.Name, err)
		}
		res.Duration = max(res.Duration, span)
		res.Policies = append(res.Policies, r)
	}
	return res, nil
}

// gateway is the real-time dependency: the virtual run's rules (depModel)
// under a lock, answering over HTTP, counting in a labkit.Recorder.
type gateway struct {
	mu      sync.Mutex
	dep     *depModel
	start   time.Time
	rec     *labkit.Recorder
	waiters []*waiter // attempts queued over Concurrency, first come first served
}

// waiter is a queued attempt's handler, waiting for the verdict wake
// gives it when the dependency has room.
type waiter struct {
	ch   chan verdict // buffered: wake never blocks
	gone bool         // its caller hung up; wake skips it
}

// leave ends a served attempt and serves queued ones while there is room.
func (g *gateway) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.dep.leave()
	for len(g.waiters) > 0 && g.dep.room() {
		w := g.waiters[0]
		g.waiters = g.waiters[1:]
		if w.gone {
			continue
		}
		w.ch <- g.dep.serve(time.Since(g.start), 0)
	}
}

const warmPath = "/warm"

func (g *gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == warmPath {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	now := time.Now()
	g.mu.Lock()
	v := g.dep.decide(now.Sub(g.start))
	var wt *waiter
	if v.queued {
		wt = &waiter{ch: make(chan verdict, 1)}
		g.waiters = append(g.waiters, wt)
	}
	g.mu.Unlock()
	id, attempt := labkit.Identify(r.Header)
	if wt != nil {
		select {
		case v = <-wt.ch:
		case <-r.Context().Done(): // the caller gave up while it waited
			g.mu.Lock()
			wt.gone = true
			g.mu.Unlock()
			select {
			case <-wt.ch: // served in the meantime: give the slot back
				g.leave()
			default:
			}
			g.rec.Record(now, id, attempt, labkit.Abandoned)
			return
		}
	}
	g.rec.Record(now, id, attempt, v.outcome)
	if v.served {
		defer g.leave()
	}
	if v.delay > 0 {
		t := time.NewTimer(v.delay)
		select {
		case <-t.C:
		case <-r.Context().Done(): // the caller hung up: stop working on it
			t.Stop()
			return
		}
	}
	switch v.answer {
	case answerOK:
		w.WriteHeader(http.StatusOK)
	case answer500:
		w.WriteHeader(http.StatusInternalServerError)
	case answer503:
		if v.retryAfter > 0 {
			w.Header().Set("Retry-After", strconv.FormatInt(int64(retryAfterSeconds(v.retryAfter)/time.Second), 10))
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	default: // a drop, or the end of a hang
		panic(http.ErrAbortHandler) // closes the connection without an answer
	}
}

// realReq is one logical request as its caller saw it.
type realReq struct {
	start, end time.Duration
	ok         bool
	reason     retry.Reason
	other      string // a transport's give-up: "status 503", "error"
	unfinished bool
}

func runReal(ctx context.Context, p *plan, pol Policy) (PolicyResult, time.Duration, error) {
	e := p.e
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return PolicyResult{}, 0, fmt.Errorf("the gateway cannot listen: %w", err)
	}
	g := &gateway{dep: newDepModel(p, rand.New(rand.NewPCG(e.Seed, 2)))}
	srv, base := serveGateway(l, g)
	defer base.CloseIdleConnections()
	r := &realRun{ctx: ctx, p: p, pol: pol, url: "http://" + l.Addr().String()}
	var rt http.RoundTripper = base
	if pol.wrap != nil {
		rt = pol.wrap(base)
	}
	r.client = &http.Client{Transport: rt}
	if err := warm(ctx, &http.Client{Transport: base}, r.url, e.Callers); err != nil {
		_ = srv.Close()
		return PolicyResult{}, 0, fmt.Errorf("the gateway does not answer: %w", err)
	}
	if pol.newRetry != nil {
		var rp *retry.Policy
		if rp, r.hedge = pol.newRetry(); rp != nil {
			r.shared, r.ownRand = *rp, rp.Rand != nil
		}
	}

	r.start = time.Now()
	g.start = r.start
	g.rec = labkit.NewRecorder(r.start)
	runCtx, cancel := context.WithDeadline(ctx, r.start.Add(p.limit))
	defer cancel()
	r.runCtx = runCtx
	if e.Callers.Open() || e.Replay != nil {
		r.openLoop(r.arrivalTimes())
	} else {
		r.closedLoop()
	}
	r.wg.Wait()
	elapsed := time.Since(r.start)
	cancel()
	base.CloseIdleConnections()
	// Every caller has returned, and the gateway records an attempt when
	// its handler starts: the count is complete. Close, not Shutdown: an
	// HTTP/2 server's graceful shutdown waits a second for its GOAWAY.
	_ = srv.Close()
	if err := ctx.Err(); err != nil {
		return PolicyResult{}, 0, err
	}

	if e.Replay != nil {
		res, span := realReplay(p, pol, r.reqs, g.rec.Arrivals())
		res.Lateness = r.late
		return res, span, nil
	}
	res, span := r.summary(g.rec.Arrivals(), elapsed)
	return res, span, nil
}

// serveGateway serves the gateway on l and returns the server and the
// transport that reaches it.
func serveGateway(l net.Listener, g *gateway) (*http.Server, *http.Transport) {
	// HTTP/2 without TLS (h2c): a caller that gives up on an attempt (its
	// timeout, a hedge's loser) resets a stream instead of closing a
	// connection, so a run does not spend a loaded machine on dials and
	// stays the experiment it describes.
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: g, ReadHeaderTimeout: 10 * time.Second, Protocols: &protos,
		HTTP2: &http.HTTP2Config{MaxConcurrentStreams: MaxRealRequests * 4}}
	go func() { _ = srv.Serve(l) }()
	base := &http.Transport{MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096, IdleConnTimeout: time.Minute, DisableCompression: true, Protocols: &protos}
	return srv, base
}

// realRun is one policy's real-time run: its callers and the requests
// they have finished.
type realRun struct {
	ctx    context.Context // the caller's; its end cancels the run
	runCtx context.Context // ends with the run's time limit
	p      *plan
	pol    Policy
	url    string
	client *http.Client
	start  time.Time

	// The retry policy every request copies, with a hedge if the policy
	// has one; ownRand when the policy brings its own random source.
	hedge   *retry.Hedge
	shared  retry.Policy
	ownRand bool

	mu   sync.Mutex
	reqs []realReq
	wg   sync.WaitGroup
	late time.Duration // the most an arrival or a caller's start came after its time
}

// arrivalTimes yields an open loop's arrivals: the replay's recorded ones,
// or the experiment's arrival process up to the time limit.
func (r *realRun) arrivalTimes() func() (time.Duration, bool) {
	e := r.p.e
	if e.Replay != nil {
		ts := e.Replay.arrivals(rand.New(rand.NewPCG(e.Seed, 1)))
		return func() (time.Duration, bool) {
			if len(ts) == 0 {
				return 0, false
			}
			t := ts[0]
			ts = ts[1:]
			return t, true
		}
	}
	arr := &arrivals{c: e.Callers, rng: rand.New(rand.NewPCG(e.Seed, 1))}
	return func() (time.Duration, bool) {
		t := arr.next()
		return t, t < r.p.limit
	}
}

// openLoop starts a request at each arrival, whatever the earlier ones
// are doing.
func (r *realRun) openLoop(next func() (time.Duration, bool)) {
	timer := time.NewTimer(0)
	<-timer.C
	for n := 1; ; n++ {
		t, ok := next()
		if !ok {
			return
		}
		timer.Reset(time.Until(r.start.Add(t)))
		select {
		case <-timer.C:
		case <-r.runCtx.Done():
			return
		}
		r.late = max(r.late, time.Since(r.start)-t)
		r.wg.Add(1)
		go func() { defer r.wg.Done(); r.one(n) }()
	}
}

// closedLoop starts the callers, ramped up if asked; each sends its
// requests one after the other.
func (r *realRun) closedLoop() {
	for i := range r.p.e.Callers.N {
		r.wg.Add(1)
		go func() { defer r.wg.Done(); r.caller(i) }()
	}
}

// caller is closed-loop caller i (from 0).
func (r *realRun) caller(i int) {
	c := r.p.e.Callers
	if c.Ramp > 0 && !sleepCtx(r.runCtx, time.Until(r.start.Add(c.Ramp*time.Duration(i+1)/time.Duration(c.N)))) {
		return
	}
	for k := range c.requests() {
		if k > 0 && !sleepCtx(r.runCtx, c.Think) {
			return
		}
		if r.runCtx.Err() != nil {
			return
		}
		r.one(i*c.requests() + k + 1)
	}
}

// one sends logical request n (from 1) through the policy and records it.
func (r *realRun) one(n int) {
	rq := realReq{start: time.Since(r.start)}
	id := []string{strconv.Itoa(n)}
	if r.pol.wrap != nil {
		transportCall(r.runCtx, r.client, r.url, id, &rq)
	} else {
		r.retried(n, id, &rq)
	}
	rq.end = time.Since(r.start)
	if !rq.ok && r.runCtx.Err() != nil && r.ctx.Err() == nil {
		rq.unfinished = true // the run ended first
	}
	r.mu.Lock()
	r.reqs = append(r.reqs, rq)
	r.mu.Unlock()
}

// retried runs request n under the retry policy (hedged if it has a
// hedge) and notes how it ended.
func (r *realRun) retried(n int, id []string, rq *realReq) {
	pp := r.shared
	if !r.ownRand { // a seeded source per goroutine: a PCG is not safe for concurrent use
		pp.Rand = rand.NewPCG(r.p.e.Seed, uint64(n))
	}
	work := func(actx context.Context) error { return r.attempt(actx, id) }
	var err error
	if r.hedge != nil {
		err = r.hedge.Do(r.runCtx, &pp, work)
	} else {
		err = retry.Do(r.runCtx, &pp, work)
	}
	rq.ok = err == nil
	var re *retry.Error
	if errors.As(err, &re) {
		rq.reason = re.Reason
	} else if err != nil {
		rq.reason = retry.UnknownError
	}
}

// attempt is one attempt of a request with this id: the gateway's answer
// as the retry package classes it.
func (r *realRun) attempt(actx context.Context, id []string) error {
	req, err := http.NewRequestWithContext(actx, http.MethodGet, r.url+"/", nil)
	if err != nil {
		return retry.Permanent(err)
	}
	req.Header[labkit.HeaderRequestID] = id
	resp, err := r.client.Do(req)
	if err != nil {
		return retry.Retryable(err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return nil
	case http.StatusInternalServerError:
		return errFailedR
	case http.StatusServiceUnavailable:
		if ra, err := strconv.ParseInt(resp.Header.Get("Retry-After"), 10, 64); err == nil && ra > 0 {
			return retry.After(errRefused, time.Duration(ra)*time.Second)
		}
		return errRefusedR
	}
	return retry.Permanent(fmt.Errorf("gateway answered %d", resp.StatusCode))
}

// summary meters the requests and the gateway's arrivals into the
// policy's result and the span it covers.
func (r *realRun) summary(arrivals []labkit.Arrival, elapsed time.Duration) (PolicyResult, time.Duration) {
	p := r.p
	m := newMeter(p.window)
	slices.SortFunc(r.reqs, func(a, b realReq) int { return int(a.start - b.start) })
	for _, rq := range r.reqs {
		m.request(rq.start)
	}
	for _, a := range arrivals {
		if a.At < p.limit {
			m.attempt(a.At, a.Outcome == labkit.Accepted)
		}
	}
	for _, rq := range r.reqs {
		switch {
		case rq.unfinished:
		case rq.ok:
			m.success(rq.end, rq.start)
		case rq.other != "":
			m.giveUpOther(rq.end, rq.start, rq.other)
		default:
			m.giveUp(rq.end, rq.start, rq.reason)
		}
	}
	span := p.limit
	if !p.e.Callers.Open() && p.duration == 0 && m.requests == m.done {
		span = (elapsed/p.window + 1) * p.window
		span = min(span, p.limit)
	}
	res := m.result(r.pol.Name, p, span)
	res.Lateness = r.late
	return res, span
}

// realReplay sums up a real-time replay as the virtual one is: the
// recording's windows, a request's end counted when its caller returned.
func realReplay(p *plan, pol Policy, reqs []realReq, arrivals []labkit.Arrival) (PolicyResult, time.Duration) {
	rec := p.e.Replay
	m := simkit.NewMeter(p.window, rec.Width())
	for _, a := range arrivals {
		m.Call(a.At)
	}
	var unfinished int64
	other, gaveUp := map[string]int64{}, map[retry.Reason]int64{}
	for _, rq := range reqs {
		m.Original()
		switch {
		case rq.unfinished:
			unfinished++
		case rq.ok:
			m.Success(rq.end)
		case rq.other != "":
			other[rq.other]++
			m.GiveUp(rq.end, retry.NoReason)
		default:
			m.GiveUp(rq.end, rq.reason)
			gaveUp[rq.reason]++
		}
	}
	rr := &simkit.ReplayResult{Attempts: m.Calls(), Originals: m.Originals(), Succeeded: m.Successes(),
		GaveUp: gaveUp, Window: p.window, Width: rec.Width(), Replayed: m.Load(), Completion: m.Completion()}
	rr.Peak, rr.PeakAt = m.Peak()
	res := &Result{}
	replayFrame(res, rec)
	pr, span := replayPolicy(pol.Name, rr, res, rec)
	for k, n := range other {
		pr.GaveUp[k] += n
	}
	if unfinished > 0 {
		pr.Unfinished, pr.Recovered, pr.Metastable = unfinished, false, true
	}
	return pr, span
}

// transportCall sends one logical request through a transport under test
// and records how it ended.
func transportCall(ctx context.Context, client *http.Client, url string, id []string, rq *realReq) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/", nil)
	if err != nil {
		rq.other = "error"
		return
	}
	req.Header[labkit.HeaderRequestID] = id
	resp, err := client.Do(req)
	if err != nil {
		var re *retry.Error
		if errors.As(err, &re) {
			rq.reason = re.Reason
		} else {
			rq.other = "error"
		}
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		rq.ok = true
		return
	}
	rq.other = "status " + strconv.Itoa(resp.StatusCode)
}

// warm opens the connections the first callers will use before the clock
// starts, so the first dials do not delay them (as the lab warms up).
func warm(ctx context.Context, client *http.Client, url string, c Callers) error {
	n := min(max(c.N, int(c.Rate/20)), 64)
	n = max(n, 1)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+warmPath, nil)
			if err != nil {
				errs[i] = err
				return
			}
			resp, err := client.Do(req)
			if err != nil {
				errs[i] = err
				return
			}
			resp.Body.Close()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
