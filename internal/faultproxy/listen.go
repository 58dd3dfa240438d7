package faultproxy

import (
	"net"
	"sync"
)

// LimitListener accepts at most n connections open at once: Accept waits
// for one to close, so a client beyond the cap waits in the kernel's
// backlog instead of costing the proxy a goroutine and a buffer (what
// golang.org/x/net/netutil.LimitListener does, with the standard library).
type LimitListener struct {
	net.Listener
	sem       chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// NewLimitListener wraps l so that at most n connections are open at once.
func NewLimitListener(l net.Listener, n int) *LimitListener {
	return &LimitListener{Listener: l, sem: make(chan struct{}, n), done: make(chan struct{})}
}

// Accept waits for a free slot, then for a connection.
func (l *LimitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, l: l}, nil
}

// Close closes the listener and wakes an Accept waiting for a slot.
func (l *LimitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

// Open returns the number of connections holding a slot.
func (l *LimitListener) Open() int { return len(l.sem) }

type limitConn struct {
	net.Conn
	l       *LimitListener
	release sync.Once
}

// Close closes the connection and frees its slot (once).
func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.release.Do(func() { <-c.l.sem })
	return err
}

// NetConn returns the connection underneath, so a reset fault can set
// SO_LINGER on the TCP connection (faultproxy.SetLinger0).
func (c *limitConn) NetConn() net.Conn { return c.Conn }
