package rabbitmq

import (
	"encoding/binary"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// frameCount counts the AMQP frames of the benchmarks' connections that
// tell where a message's round trips go: the client's acks (single and
// multiple) and publishes, its writes to the socket, and the server's
// deliveries and confirms (single and multiple).
type frameCount struct {
	acks, multiAcks, publishes, writes atomic.Int64
	deliveries, confirms, multiConfs   atomic.Int64
	// full counts the deliveries that filled the prefetch window (the
	// unacknowledged deliveries of their channel reached benchPrefetch:
	// RabbitMQ sends no more until an ack), near those that left less than
	// a quarter of it.
	full, near atomic.Int64
}

// frames are the counts of every connection the benchmarks dial through
// countingDial, when STAGGER_BENCH_FRAMES is set.
var frames frameCount

// snapshot is a copy of the counts, to subtract.
type frameSnap struct {
	acks, multiAcks, publishes, writes, deliveries, confirms, multiConfs, full, near int64
}

func (f *frameCount) snapshot() frameSnap {
	return frameSnap{f.acks.Load(), f.multiAcks.Load(), f.publishes.Load(), f.writes.Load(),
		f.deliveries.Load(), f.confirms.Load(), f.multiConfs.Load(), f.full.Load(), f.near.Load()}
}

func (a frameSnap) sub(b frameSnap) frameSnap {
	return frameSnap{a.acks - b.acks, a.multiAcks - b.multiAcks, a.publishes - b.publishes, a.writes - b.writes,
		a.deliveries - b.deliveries, a.confirms - b.confirms, a.multiConfs - b.multiConfs, a.full - b.full, a.near - b.near}
}

// window follows a connection's unacknowledged deliveries per channel.
type window struct {
	mu sync.Mutex
	ch map[uint16]*chanWindow
}

type chanWindow struct {
	delivered uint64 // the last delivery tag: deliveries so far
	low       uint64 // every tag up to low is acknowledged
	acked     map[uint64]bool
	n         uint64 // acknowledged tags
}

func (w *window) get(ch uint16) *chanWindow {
	if w.ch == nil {
		w.ch = map[uint16]*chanWindow{}
	}
	c := w.ch[ch]
	if c == nil {
		c = &chanWindow{acked: map[uint64]bool{}}
		w.ch[ch] = c
	}
	return c
}

func (w *window) deliver(f *frameCount, ch uint16) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := w.get(ch)
	c.delivered++
	switch unacked := c.delivered - c.n; {
	case unacked >= benchPrefetch:
		f.full.Add(1)
	case unacked > benchPrefetch*3/4:
		f.near.Add(1)
	}
}

func (w *window) ack(ch uint16, tag uint64, multiple bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := w.get(ch)
	lo := tag
	if multiple {
		lo = c.low + 1
	}
	for t := lo; t <= tag; t++ {
		if t > c.low && !c.acked[t] {
			c.acked[t] = true
			c.n++
		}
	}
	for c.acked[c.low+1] {
		delete(c.acked, c.low+1)
		c.low++
	}
}

// countingDial dials addr and counts the connection's frames in frames.
func countingDial(network, addr string) (net.Conn, error) {
	c, err := net.DialTimeout(network, addr, 3*time.Second)
	if err != nil {
		return nil, err
	}
	w := &window{}
	return &countingConn{Conn: c, out: frameParser{f: &frames, w: w, out: true, skip: 8}, in: frameParser{f: &frames, w: w}}, nil
}

type countingConn struct {
	net.Conn
	out, in frameParser
}

func (c *countingConn) Write(p []byte) (int, error) {
	frames.writes.Add(1)
	c.out.feed(p)
	return c.Conn.Write(p)
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.in.feed(p[:n])
	return n, err
}

// frameParser follows one direction's stream of frames (type, channel,
// size, payload, 0xCE) across reads or writes, keeping the first bytes of
// each method frame: class, method, and an ack's tag and flags.
type frameParser struct {
	f    *frameCount
	w    *window
	out  bool
	head [7 + 13]byte
	have int // bytes of head filled
	skip int // bytes left of the current frame after head (first the client's protocol header)
}

func (p *frameParser) feed(b []byte) {
	for len(b) > 0 {
		if p.skip > 0 {
			n := min(p.skip, len(b))
			p.skip -= n
			b = b[n:]
			continue
		}
		// Fill the header (7 bytes), then up to 13 bytes of payload.
		want := 7
		if p.have >= 7 {
			want = 7 + min(13, int(binary.BigEndian.Uint32(p.head[3:7])))
		}
		n := copy(p.head[p.have:want], b)
		p.have += n
		b = b[n:]
		if p.have < want || (want == 7 && binary.BigEndian.Uint32(p.head[3:7]) > 0) {
			continue // more of the header, or the payload's first bytes next
		}
		size := int(binary.BigEndian.Uint32(p.head[3:7]))
		p.count(p.head[7:want])
		p.skip = size - (want - 7) + 1 // the rest and the frame end
		p.have = 0
	}
}

func (p *frameParser) count(payload []byte) {
	if p.head[0] != 1 || len(payload) < 4 {
		return // not a method frame
	}
	class, method := binary.BigEndian.Uint16(payload), binary.BigEndian.Uint16(payload[2:])
	if class != 60 {
		return
	}
	multiple := len(payload) >= 13 && payload[12]&1 != 0
	ch := binary.BigEndian.Uint16(p.head[1:3])
	switch {
	case p.out && method == 80:
		if len(payload) >= 12 {
			p.w.ack(ch, binary.BigEndian.Uint64(payload[4:12]), multiple)
		}
		p.f.acks.Add(1)
		if multiple {
			p.f.multiAcks.Add(1)
		}
	case p.out && method == 40:
		p.f.publishes.Add(1)
	case !p.out && method == 60:
		p.w.deliver(p.f, ch)
		p.f.deliveries.Add(1)
	case !p.out && method == 80:
		p.f.confirms.Add(1)
		if multiple {
			p.f.multiConfs.Add(1)
		}
	}
}
