package main

import (
	"net"

	"github.com/staggerhq/stagger/internal/faultproxy"
)

// limitListener accepts at most n connections open at once
// (faultproxy.LimitListener): a client beyond the cap waits in the
// kernel's backlog instead of costing the proxy a goroutine and a buffer.
type limitListener struct{ *faultproxy.LimitListener }

func newLimitListener(l net.Listener, n int) *limitListener {
	return &limitListener{faultproxy.NewLimitListener(l, n)}
}

// open returns the number of connections holding a slot.
func (l *limitListener) open() int { return l.Open() }
