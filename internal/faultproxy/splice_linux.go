//go:build linux

package faultproxy

import (
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"
)

// The flags of splice(2).
const (
	spliceMove     = 0x1
	spliceNonblock = 0x2
)

// canSplice reports whether src can be relayed to dst in the kernel.
func canSplice(src, dst net.Conn) bool {
	_, a := src.(*net.TCPConn)
	_, b := dst.(*net.TCPConn)
	return a && b
}

// maxSplice is the most a chunk moves, and the size asked of each pipe,
// as the io.Copy of package net does.
const maxSplice = 1 << 20

// pipe is a pipe's two ends; a pipe the pool drops is closed by the
// garbage collector's cleanup.
type pipe struct {
	fds     [2]int
	cleanup runtime.Cleanup
}

// pipes keeps empty pipes for the next connections.
var pipes = sync.Pool{New: func() any {
	var fds [2]int
	if syscall.Pipe2(fds[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK) != nil {
		return nil
	}
	// Smaller when the system's bound is lower: more system calls.
	syscall.Syscall(syscall.SYS_FCNTL, uintptr(fds[0]), syscall.F_SETPIPE_SZ, maxSplice)
	p := &pipe{fds: fds}
	p.cleanup = runtime.AddCleanup(p, func(fds [2]int) { syscall.Close(fds[0]); syscall.Close(fds[1]) }, fds)
	return p
}}

func getPipe() (*pipe, error) {
	p, _ := pipes.Get().(*pipe)
	if p == nil {
		return nil, syscall.EMFILE
	}
	return p, nil
}

// putPipe keeps p, which must be empty.
func putPipe(p *pipe) { pipes.Put(p) }

// closePipe closes p, which may hold bytes.
func closePipe(p *pipe) {
	p.cleanup.Stop()
	syscall.Close(p.fds[0])
	syscall.Close(p.fds[1])
}

// spliceRelay moves src's bytes to dst with splice(2) through a pipe, as
// io.Copy between two TCP connections does, a chunk of at most maxSplice
// bytes at a time, calling count and adding to sent for each piece
// written. Before writing a chunk it looks at the direction's faults: once
// one acts, it reads the chunk back from the pipe into getBuf's buffer and
// returns it as carry. Otherwise it returns src's end or read error as
// readErr, or neither when a write failed. handled is false, with nothing
// moved, when the kernel cannot splice these connections.
func spliceRelay(cf *connFaults, dir int, src, dst net.Conn, getBuf func() []byte, count func(int64), sent *int64) (carry []byte, readErr error, handled bool) {
	rc, err := src.(*net.TCPConn).SyscallConn()
	if err != nil {
		return nil, nil, false
	}
	wc, err := dst.(*net.TCPConn).SyscallConn()
	if err != nil {
		return nil, nil, false
	}
	// The pipe is held until the direction ends or a fault acts, as
	// io.Copy holds its own.
	pp, err := getPipe()
	if err != nil {
		return nil, nil, false
	}
	full := false // bytes may be left in the pipe
	defer func() {
		if full {
			closePipe(pp)
		} else {
			putPipe(pp)
		}
	}()
	var (
		n, m, left int64
		serr       error
	)
	// Built once: each chunk calls them.
	in := func(fd uintptr) bool {
		for {
			n, serr = syscall.Splice(int(fd), nil, pp.fds[1], nil, maxSplice, spliceMove|spliceNonblock)
			if serr != syscall.EINTR {
				return serr != syscall.EAGAIN // the pipe is empty: src has nothing yet
			}
		}
	}
	out := func(fd uintptr) bool {
		for {
			m, serr = syscall.Splice(pp.fds[0], nil, int(fd), nil, int(left), spliceMove|spliceNonblock)
			if serr != syscall.EINTR {
				return serr != syscall.EAGAIN
			}
		}
	}
	for {
		serr = nil
		err := rc.Read(in)
		switch {
		case serr == syscall.EINVAL:
			return nil, nil, false
		case err != nil:
			return nil, err, true
		case serr != nil:
			return nil, os.NewSyscallError("splice", serr), true
		case n == 0:
			return nil, io.EOF, true
		}
		full = true
		if cf.list(dir) != nil {
			b := getBuf()
			if n > int64(len(b)) {
				b = make([]byte, n) // once, when a fault comes
			}
			b = b[:n]
			for got := 0; got < len(b); {
				k, err := syscall.Read(pp.fds[0], b[got:])
				if err == syscall.EINTR {
					continue
				}
				if err != nil || k <= 0 {
					return nil, nil, true
				}
				got += k
			}
			full = false
			return b, nil, true
		}
		for left = n; left > 0; {
			if err := wc.Write(out); err != nil || serr != nil || m <= 0 {
				return nil, nil, true
			}
			left -= m
			*sent += m
			count(m)
		}
		full = false
	}
}
