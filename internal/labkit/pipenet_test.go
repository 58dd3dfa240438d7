package labkit

import (
	"context"
	"net"
	"sync"
)

// pipeNet is an in-memory network for tests inside a testing/synctest
// bubble, where loopback TCP cannot be used: Dial hands one end of a
// net.Pipe to Accept. Every blocking operation is a channel operation, so
// the bubble sees goroutines waiting on it as durably blocked.
type pipeNet struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newPipeNet() *pipeNet {
	return &pipeNet{conns: make(chan net.Conn), done: make(chan struct{})}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe.invalid:80" }

func (p *pipeNet) Accept() (net.Conn, error) {
	select {
	case c := <-p.conns:
		return c, nil
	case <-p.done:
		return nil, net.ErrClosed
	}
}

func (p *pipeNet) Close() error {
	p.once.Do(func() { close(p.done) })
	return nil
}

func (p *pipeNet) Addr() net.Addr { return pipeAddr{} }

func (p *pipeNet) Dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case p.conns <- server:
		return client, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-p.done:
		return nil, net.ErrClosed
	}
}

// inMemory returns s set to run over a fresh pipeNet (created when the
// gateway listens, so inside the caller's bubble).
func inMemory(s Scenario) Scenario {
	var (
		mu sync.Mutex
		pn *pipeNet
	)
	s.Listen = func() (net.Listener, error) {
		mu.Lock()
		defer mu.Unlock()
		pn = newPipeNet()
		return pn, nil
	}
	s.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		mu.Lock()
		p := pn
		mu.Unlock()
		return p.Dial(ctx, network, addr)
	}
	return s
}
