//go:build !linux

package faultproxy

import "net"

// canSplice reports whether src can be relayed to dst in the kernel: only
// on Linux.
func canSplice(src, dst net.Conn) bool { return false }

func spliceRelay(cf *connFaults, dir int, src, dst net.Conn, getBuf func() []byte, count func(int64), sent *int64) (carry []byte, readErr error, handled bool) {
	return nil, nil, false
}
