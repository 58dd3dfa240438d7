package rabbitmq

import (
	"net"
	"sync"
)

// corkConn is a Consumer's connection whose writes can be held back and
// sent as one: between cork and uncork the frames the client library
// writes (each flushed on its own, an ack a write) gather in a buffer and
// go out in one write at uncork. An acker's burst of acks then costs one
// system call, and RabbitMQ one read, instead of one per ack; the frames
// and their order do not change.
type corkConn struct {
	net.Conn

	mu     sync.Mutex // held across each write, so the buffer goes out before any later write
	corked int
	buf    []byte
}

// maxCorkBuffer is the largest buffer kept between corks; a larger one
// (a burst of big frames) is dropped after its write.
const maxCorkBuffer = 64 << 10

// Write sends p, or buffers it while corked.
func (c *corkConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.corked > 0 {
		c.buf = append(c.buf, p...)
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// cork holds back the writes until the matching uncork.
func (c *corkConn) cork() {
	c.mu.Lock()
	c.corked++
	c.mu.Unlock()
}

// uncork ends a cork; the last one sends what was buffered, in one write.
// Its error is the connection's: the client library's reader sees the
// connection fail too.
func (c *corkConn) uncork() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.corked--; c.corked > 0 || len(c.buf) == 0 {
		return nil
	}
	_, err := c.Conn.Write(c.buf)
	if cap(c.buf) > maxCorkBuffer {
		c.buf = nil
	} else {
		c.buf = c.buf[:0]
	}
	return err
}

// corkingDial wraps dial (nil: amqp.DefaultDial's behaviour, through
// defaultDial) so that the connection it opens is a corkConn, stored in
// *conn.
func corkingDial(dial func(network, addr string) (net.Conn, error), conn **corkConn) func(network, addr string) (net.Conn, error) {
	return func(network, addr string) (net.Conn, error) {
		c, err := dial(network, addr)
		if err != nil {
			return nil, err
		}
		cc := &corkConn{Conn: c}
		*conn = cc
		return cc, nil
	}
}
