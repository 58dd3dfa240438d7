package faultproxy

import (
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/staggerhq/stagger/internal/labkit"
)

// DefaultMaxConns bounds the connections a proxy (HTTP or TCP) serves at
// once; more wait in the kernel's backlog.
const DefaultMaxConns = 1024

// TCPProxy relays TCP connections for any protocol (PostgreSQL, Redis,
// AMQP, gRPC) through run-time faults, toxiproxy's toxics, and counts
// connections and bytes per window. A connection is one attempt:
// accepted when it ends normally, dropped when a fault closed or reset it,
// failed when the upstream could not be reached.
type TCPProxy struct {
	name, upstream string
	faults         *Set
	window         time.Duration
	start          time.Time
	now            func() time.Time
	ln             net.Listener
	sem            chan struct{}
	rec            atomic.Pointer[labkit.WindowedRecorder]
	bytes          atomic.Pointer[byteWindows]
	inflight       atomic.Int64

	mu     sync.Mutex
	conns  map[*relay]struct{}
	closed bool
	wg     sync.WaitGroup
}

// StartTCP listens on cfg.Listen and relays each connection to
// cfg.Upstream (host:port, or tcp://host:port).
func StartTCP(cfg Config) (*TCPProxy, error) {
	up := strings.TrimPrefix(cfg.Upstream, "tcp://")
	if _, _, err := net.SplitHostPort(up); err != nil || strings.ContainsAny(up, "/@?#") {
		return nil, errorf("upstream: want host:port or tcp://host:port, such as 127.0.0.1:6379")
	}
	ln, err := listen(cfg.Listen)
	if err != nil {
		return nil, err
	}
	w := cfg.Window
	if w <= 0 {
		w = labkit.DefaultWindow
	}
	p := &TCPProxy{name: cfg.Name, upstream: up, faults: NewSet(true, nil), window: w, start: time.Now(), now: time.Now,
		ln: ln, sem: make(chan struct{}, DefaultMaxConns), conns: map[*relay]struct{}{}}
	p.rec.Store(newRecorder(p.start, w))
	p.bytes.Store(newByteWindows(p.start, w))
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func (p *TCPProxy) accept() {
	defer p.wg.Done()
	for {
		p.sem <- struct{}{}
		c, err := p.ln.Accept()
		if err != nil {
			<-p.sem
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(5 * time.Millisecond) // EMFILE and the like: do not spin
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer func() { <-p.sem }()
			p.serve(c)
		}()
	}
}

// relay is one client connection and its upstream.
type relay struct {
	client, up net.Conn
	faulted    atomic.Bool // a fault closed or reset it
	once       sync.Once
}

func (r *relay) close(reset bool) {
	r.once.Do(func() {
		if reset {
			r.faulted.Store(true)
			SetLinger0(r.client)
			if r.up != nil {
				SetLinger0(r.up)
			}
		}
		r.client.Close()
		if r.up != nil {
			r.up.Close()
		}
	})
}

func (p *TCPProxy) serve(c net.Conn) {
	rec := p.rec.Load()
	pend := rec.Arrive(p.now())
	p.inflight.Add(1)
	defer p.inflight.Add(-1)
	r := &relay{client: c}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.Close()
		rec.Finish(pend, "", 0, labkit.Abandoned)
		return
	}
	p.conns[r] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.conns, r)
		p.mu.Unlock()
	}()

	// The faults that apply to this connection: drawn now, and those
	// added while it is open at its next chunk of data.
	cf := &connFaults{p: p, r: r}
	cf.draw(p.faults.list.Load())
	defer cf.stop()
	upc, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
	if err != nil {
		c.Close()
		rec.Finish(pend, "", 0, labkit.Failed)
		return
	}
	// Close may have run since the connection was registered: it closed
	// the client alone, and the upstream is this goroutine's to close.
	p.mu.Lock()
	closed := p.closed
	if !closed {
		r.up = upc
	}
	p.mu.Unlock()
	if closed {
		upc.Close()
		rec.Finish(pend, "", 0, labkit.Abandoned)
		return
	}
	cf.begin()
	bw := p.bytes.Load()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pump(r, cf, dirUp, c, upc, func(n int64) { bw.add(p.now(), n, 0) }) }()
	go func() { defer wg.Done(); p.pump(r, cf, dirDown, upc, c, func(n int64) { bw.add(p.now(), 0, n) }) }()
	wg.Wait()
	r.close(false)
	o := labkit.Accepted
	if r.faulted.Load() {
		o = labkit.Dropped
	}
	rec.Finish(pend, "", 0, o)
}

// relayBuf is the size of a pump's buffer; relayBufs keeps them for the
// next connections, so a proxy with short connections does not allocate
// 64 KiB for each.
const relayBuf = 32 << 10

var relayBufs = sync.Pool{New: func() any { return new([relayBuf]byte) }}

// The directions of a connection, as indexes of connFaults.dirs.
const (
	dirUp   = 0 // client to upstream
	dirDown = 1 // upstream to client
)

// connFaults is the faults one connection drew. Each fault is drawn once
// (its probability, and its counts): those in place when the connection
// opens, and one added while it is open when a pump next looks, at its
// next chunk of data. A fault changed under its name keeps its draw and
// acts with its new values; a removed one stops acting. Looking costs a
// pointer compare while the set has not changed.
type connFaults struct {
	p    *TCPProxy
	r    *relay
	seen atomic.Pointer[[]*Active]          // the set's list the draws are for
	dirs [2]atomic.Pointer[[]*labkit.Fault] // nil: none in that direction

	mu     sync.Mutex
	drawn  map[string]bool // name: whether it applied
	timers map[string]connTimer
	live   bool            // both connections are open: timers may start
	opened time.Time       // when live was set
	later  []*labkit.Fault // timers drawn before
	done   bool
}

// connTimer is a reset-peer or timeout D acting on one connection: it
// fires D after since (when the connection opened, or when the fault was
// drawn on an open one).
type connTimer struct {
	t     *time.Timer
	kind  labkit.FaultKind
	delay time.Duration
	since time.Time
}

// timed reports whether f acts on the whole connection after a while.
func timed(f *labkit.Fault) bool {
	return f.Kind == labkit.FaultResetPeer || f.Kind == labkit.FaultTimeout && f.Delay > 0
}

// list returns the faults acting on dir now (nil: none), drawing those
// added since the last look.
func (c *connFaults) list(dir int) *[]*labkit.Fault {
	if cur := c.p.faults.list.Load(); cur != c.seen.Load() {
		c.draw(cur)
	}
	return c.dirs[dir].Load()
}

func (c *connFaults) draw(cur *[]*Active) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen.Load() == cur || c.done {
		return
	}
	var up, down []*labkit.Fault
	for _, a := range *cur {
		applies, ok := c.drawn[a.Name]
		if !ok {
			applies = a.Applies(c.p.faults.rand())
			a.Count(applies)
			if c.drawn == nil {
				c.drawn = map[string]bool{}
			}
			c.drawn[a.Name] = applies
			if applies {
				c.startTimer(&a.Fault)
			}
		}
		if !applies {
			continue
		}
		if ok {
			c.retime(&a.Fault)
		}
		if a.Dir&labkit.DirUp != 0 {
			up = append(up, &a.Fault)
		}
		if a.Dir&labkit.DirDown != 0 {
			down = append(down, &a.Fault)
		}
	}
	gone := func(name string) bool {
		return !slices.ContainsFunc(*cur, func(a *Active) bool { return a.Name == name })
	}
	for name, t := range c.timers {
		if gone(name) {
			t.t.Stop()
			delete(c.timers, name)
		}
	}
	c.later = slices.DeleteFunc(c.later, func(f *labkit.Fault) bool { return gone(f.Name) })
	for i, l := range [2][]*labkit.Fault{up, down} {
		if l == nil {
			c.dirs[i].Store(nil)
		} else {
			c.dirs[i].Store(&l)
		}
	}
	c.seen.Store(cur)
}

// startTimer starts what f does to the whole connection after a while:
// reset-peer resets it, timeout D (D > 0) closes it; c.mu is held.
func (c *connFaults) startTimer(f *labkit.Fault) {
	if !timed(f) {
		return
	}
	if !c.live {
		c.later = append(c.later, f)
		return
	}
	c.setTimer(f, c.p.now())
}

// setTimer arms f's timer to fire f.Delay after since (at once when that
// has passed), replacing the one under its name; c.mu is held.
func (c *connFaults) setTimer(f *labkit.Fault, since time.Time) {
	if c.timers == nil {
		c.timers = map[string]connTimer{}
	}
	c.timers[f.Name] = connTimer{
		t:    time.AfterFunc(max(0, f.Delay-c.p.now().Sub(since)), func() { c.r.close(true) }),
		kind: f.Kind, delay: f.Delay, since: since,
	}
}

// retime applies a change of an applied fault (PUT under its name) to
// the connection's timers: a new D counts from when the old one began,
// a fault that no longer acts after a while stops its timer; c.mu is
// held.
func (c *connFaults) retime(f *labkit.Fault) {
	if !c.live {
		c.later = slices.DeleteFunc(c.later, func(l *labkit.Fault) bool { return l.Name == f.Name })
		c.startTimer(f)
		return
	}
	old, ok := c.timers[f.Name]
	if ok && timed(f) && old.kind == f.Kind && old.delay == f.Delay {
		return
	}
	since := c.opened
	if ok {
		old.t.Stop()
		delete(c.timers, f.Name)
		since = old.since
	}
	if timed(f) {
		c.setTimer(f, since)
	}
}

// begin starts the timers drawn while the upstream was being dialled.
func (c *connFaults) begin() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.live, c.opened = true, c.p.now()
	for _, f := range c.later {
		c.startTimer(f)
	}
	c.later = nil
}

// stop stops the timers once the connection has ended.
func (c *connFaults) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done = true
	for _, t := range c.timers {
		t.t.Stop()
	}
}

// pumpFaults is what a direction's faults ask of its pump.
type pumpFaults struct {
	slowClose, sliceDelay time.Duration
	hasLatency, hold      bool
	limited               bool
	jitter                *labkit.Fault
	rate, limit, sliceN   int64
}

func newPumpFaults(l *[]*labkit.Fault) pumpFaults {
	var pf pumpFaults
	if l == nil {
		return pf
	}
	for _, f := range *l {
		switch f.Kind {
		case labkit.FaultLatency:
			pf.hasLatency, pf.jitter = true, f
		case labkit.FaultBandwidth:
			pf.rate = f.Bytes
		case labkit.FaultSlowClose:
			pf.slowClose = f.Delay
		case labkit.FaultTimeout:
			pf.hold = true
		case labkit.FaultSlicer:
			pf.sliceN, pf.sliceDelay = f.Bytes, f.Delay
		case labkit.FaultLimitData:
			pf.limited, pf.limit = true, f.Bytes
		}
	}
	return pf
}

// pump copies src to dst through the faults of its direction, and passes
// src's end on as a half close (after slow-close's wait). With no fault
// acting on the direction, two TCP connections are relayed by splice(2)
// in the kernel, as io.Copy relays them, counting each piece; once a
// fault acts, chunks go through a buffer (and back to the kernel when
// none acts any more).
func (p *TCPProxy) pump(r *relay, cf *connFaults, dir int, src, dst net.Conn, count func(int64)) {
	var (
		bp      *[relayBuf]byte
		buf     []byte
		carry   []byte // read from src, not yet written
		sent    int64
		kernel  = canSplice(src, dst)
		readErr error
	)
	defer func() {
		if bp != nil {
			relayBufs.Put(bp)
		}
	}()
	getBuf := func() []byte {
		if bp == nil {
			bp = relayBufs.Get().(*[relayBuf]byte) // 64 KiB a connection: --max-conns of them bound the memory
			buf = bp[:]
		}
		return buf
	}
	for {
		l := cf.list(dir)
		if l == nil && carry == nil && kernel {
			var handled bool
			carry, readErr, handled = spliceRelay(cf, dir, src, dst, getBuf, count, &sent)
			switch {
			case !handled:
				kernel = false
			case carry == nil && readErr == nil: // a write failed
				r.close(false)
				return
			case readErr != nil:
				p.end(r, dst, cf.list(dir), readErr)
				return
			}
			l = cf.list(dir)
		}
		pf := newPumpFaults(l)
		if pf.limited && sent >= pf.limit {
			r.close(true)
			return
		}
		began := time.Now()
		for {
			b := carry
			carry = nil
			if b == nil {
				var n int
				n, readErr = src.Read(getBuf())
				b = buf[:n]
				if n > 0 {
					if l2 := cf.list(dir); l2 != l {
						l, pf, began = l2, newPumpFaults(l2), time.Now()
						if pf.limited && sent >= pf.limit {
							r.close(true)
							return
						}
					}
				}
			}
			if pf.hold {
				b = nil // pass nothing
			}
			if len(b) > 0 {
				if pf.limited && sent+int64(len(b)) >= pf.limit {
					b = b[:pf.limit-sent]
				}
				if pf.hasLatency {
					time.Sleep(pf.jitter.Wait(p.faults.rand()))
				}
				for len(b) > 0 {
					k := int64(len(b))
					if pf.sliceN > 0 {
						k = min(k, pf.sliceN)
					}
					if rate := pf.rate; rate > 0 {
						// Pieces of a twentieth of a second, each written once
						// the bytes before it and itself fit the rate.
						k = min(k, max(rate/20, 1))
						due := began.Add(time.Duration(float64(sent+k) / float64(rate) * float64(time.Second)))
						if now := time.Now(); now.Sub(due) > 50*time.Millisecond {
							// Idle for a while: no burst of the time not used.
							began = now.Add(-time.Duration(float64(sent) / float64(rate) * float64(time.Second)))
							due = now.Add(time.Duration(float64(k) / float64(rate) * float64(time.Second)))
						}
						if d := time.Until(due); d > 0 {
							time.Sleep(d)
						}
					}
					if _, werr := dst.Write(b[:k]); werr != nil {
						r.close(false)
						return
					}
					sent += k
					count(k)
					b = b[k:]
					if pf.sliceN > 0 && len(b) > 0 && pf.sliceDelay > 0 {
						time.Sleep(pf.sliceDelay)
					}
				}
				if pf.limited && sent >= pf.limit {
					r.close(true)
					return
				}
			}
			if readErr != nil {
				if pf.hold {
					r.close(false)
					return
				}
				p.end(r, dst, l, readErr)
				return
			}
			if l == nil && kernel {
				break // no fault acts any more: back to the kernel
			}
		}
	}
}

// end passes src's end (err) on to dst: a half close after EOF, after
// slow-close's wait; a close after any other error.
func (p *TCPProxy) end(r *relay, dst net.Conn, l *[]*labkit.Fault, err error) {
	if d := newPumpFaults(l).slowClose; d > 0 {
		time.Sleep(d)
	}
	if tc, ok := dst.(interface{ CloseWrite() error }); ok && errors.Is(err, io.EOF) {
		tc.CloseWrite()
		return
	}
	r.close(false)
}

// Name returns the proxy's name.
func (p *TCPProxy) Name() string { return p.name }

// Kind returns "tcp".
func (p *TCPProxy) Kind() string { return "tcp" }

// Addr returns the address it listens on.
func (p *TCPProxy) Addr() string { return p.ln.Addr().String() }

// Upstream returns host:port.
func (p *TCPProxy) Upstream() string { return p.upstream }

// Faults returns its run-time faults.
func (p *TCPProxy) Faults() *Set { return p.faults }

// Stats returns what it counted: connections as attempts, and bytes.
func (p *TCPProxy) Stats(timeline bool) Stats {
	s := BaseStats(p, p.now().Sub(p.start), p.inflight.Load(), p.rec.Load().Stats(timeline))
	s.Requests, s.RequestsAccepted, s.MaxAttempts, s.AttemptsPerRequest = nil, nil, nil, nil
	bw := p.bytes.Load()
	s.BytesUp, s.BytesDown, s.PeakBytes, s.PeakBytesAtMS = bw.totals()
	if timeline {
		bw.fill(s.Timeline)
	}
	return s
}

// ResetStats starts the counts afresh (the faults' too).
func (p *TCPProxy) ResetStats() {
	now := p.now()
	p.rec.Store(newRecorder(now, p.window))
	p.bytes.Store(newByteWindows(now, p.window))
	p.faults.ResetCounts()
}

// Close stops listening and closes every connection.
func (p *TCPProxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	err := p.ln.Close()
	for r := range p.conns {
		r.close(false)
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

// byteWindows counts bytes per window, keeping the last maxByteWindows.
// Counting a chunk takes no lock: totals and each window's slot are
// atomic; a slot is taken over for a newer window (once every
// maxByteWindows windows) under mu, which also keeps the peak of the
// windows that left the ring.
type byteWindows struct {
	start    time.Time
	width    time.Duration
	up, down atomic.Int64
	newest   atomic.Int64 // the newest window seen; -1 before any
	ring     [maxByteWindows]byteSlot

	mu           sync.Mutex
	peak, peakAt int64 // the fullest window that left the ring
}

// byteSlot counts window k of the ring.
type byteSlot struct {
	k        atomic.Int64 // -1: none yet
	up, down atomic.Int64
}

const maxByteWindows = 4096

func newByteWindows(start time.Time, w time.Duration) *byteWindows {
	b := &byteWindows{start: start, width: w}
	b.newest.Store(-1)
	for i := range b.ring {
		b.ring[i].k.Store(-1)
	}
	return b
}

func (b *byteWindows) add(now time.Time, up, down int64) {
	k := int64(now.Sub(b.start) / b.width)
	b.up.Add(up)
	b.down.Add(down)
	if k < 0 {
		return
	}
	n := b.newest.Load()
	for n < k && !b.newest.CompareAndSwap(n, k) {
		n = b.newest.Load()
	}
	if k <= max(n, k)-maxByteWindows {
		return // older than the ring: in the totals only
	}
	s := &b.ring[k%maxByteWindows]
	if s.k.Load() != k {
		b.mu.Lock()
		old := s.k.Load()
		if old > k { // the slot holds a newer window: k left the ring
			b.mu.Unlock()
			return
		}
		if old != k {
			if t := s.up.Load() + s.down.Load(); old >= 0 && t > b.peak {
				b.peak, b.peakAt = t, old
			}
			s.up.Store(0)
			s.down.Store(0)
			s.k.Store(k)
		}
		b.mu.Unlock()
	}
	// A writer that read its window maxByteWindows windows ago and only
	// now adds would count in the slot's new window: a pause of minutes
	// between reading the clock and adding, which the proxy's pumps do
	// not make.
	if up != 0 {
		s.up.Add(up)
	}
	if down != 0 {
		s.down.Add(down)
	}
}

// totals returns the bytes each way and the fullest window.
func (b *byteWindows) totals() (up, down, peak, peakAtMS int64) {
	b.mu.Lock()
	peak, at := b.peak, b.peakAt
	b.mu.Unlock()
	for i := range b.ring {
		s := &b.ring[i]
		if k := s.k.Load(); k >= 0 {
			if t := s.up.Load() + s.down.Load(); t > peak || t == peak && k < at {
				peak, at = t, k
			}
		}
	}
	return b.up.Load(), b.down.Load(), peak, (time.Duration(at) * b.width).Milliseconds()
}

// fill adds the bytes to the timeline's windows it still keeps.
func (b *byteWindows) fill(tl []Window) {
	for i := range tl {
		k := int64(time.Duration(tl[i].StartMS) * time.Millisecond / b.width)
		if k < 0 || k <= b.newest.Load()-maxByteWindows {
			continue
		}
		if s := &b.ring[k%maxByteWindows]; s.k.Load() == k {
			tl[i].BytesUp, tl[i].BytesDown = s.up.Load(), s.down.Load()
		}
	}
}
