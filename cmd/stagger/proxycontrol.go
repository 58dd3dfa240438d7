package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/staggerhq/stagger/internal/faultproxy"
	"github.com/staggerhq/stagger/internal/labkit"
)

// Limits of the control API's server.
const (
	controlMaxConns = 64
	controlTimeout  = 10 * time.Second
)

// startControl serves the control API on addr (an empty host is
// 127.0.0.1) with main as its default proxy; stop it with the returned
// function, which also closes the proxies added through it.
func startControl(addr string, main faultproxy.Proxy, window time.Duration) (stop func(), bound string, err error) {
	ctl := faultproxy.NewControl(func(c faultproxy.Config) (faultproxy.Proxy, error) {
		c.Window = window
		return faultproxy.Start(c)
	})
	if err := ctl.Add(main); err != nil {
		return nil, "", err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", err
	}
	srv := &http.Server{Handler: ctl.Handler(), ReadHeaderTimeout: controlTimeout, ReadTimeout: controlTimeout, WriteTimeout: controlTimeout,
		IdleTimeout: time.Minute, MaxHeaderBytes: 16 << 10, ErrorLog: log.New(io.Discard, "", 0)}
	go srv.Serve(newLimitListener(l, controlMaxConns))
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		ctl.Close()
	}, l.Addr().String(), nil
}

// controlLine is the line printed once the control API listens.
func controlLine(addr string) string {
	line := "control API: http://" + addr + " (/faults, /schedule, /stats; see docs/proxy.md)"
	if host, _, err := net.SplitHostPort(addr); err == nil {
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			line += "\nwarning: the control API is not on a loopback address: whoever reaches it can change the faults and start proxies"
		}
	}
	return line
}

// controlAddr reads --control: host:port, an empty host meaning 127.0.0.1.
func controlAddr(v string) (string, error) {
	host, port, err := net.SplitHostPort(v)
	if err != nil || port == "" {
		return "", fmt.Errorf("--control %q: want host:port, such as 127.0.0.1:8474", v)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// splitFaults sorts the --fault clauses: the timeline's (down, drop,
// latency D, slow, flap, cap, retry-after), parsed by parseFaults, and the
// run-time ones (labkit.ParseFault), which a TCP proxy alone accepts.
// "latency" is a timeline clause of the HTTP proxy and a fault of the TCP
// one.
func splitFaults(values []string, tcp bool) (schedule []string, runtime []labkit.Fault, err error) {
	set := faultproxy.NewSet(tcp, nil) // checks the kinds and the names
	for _, v := range values {
		if strings.TrimSpace(v) == "" {
			schedule = append(schedule, v) // parseFaults names the rule
			continue
		}
		var rest []string
		for _, clause := range strings.Split(v, ";") {
			word, _, _ := strings.Cut(strings.TrimSpace(clause), " ")
			if word == "" {
				continue
			}
			if tcp || (labkit.IsRuntimeFault(word) && !strings.EqualFold(word, "latency")) {
				f, err := set.Parse(clause)
				if err != nil {
					return nil, nil, fmt.Errorf("--fault %q: %v", strings.TrimSpace(clause), err)
				}
				if _, err := set.Add(f); err != nil {
					return nil, nil, fmt.Errorf("--fault %q: %v", strings.TrimSpace(clause), err)
				}
				continue
			}
			rest = append(rest, clause)
		}
		if len(rest) > 0 {
			schedule = append(schedule, strings.Join(rest, ";"))
		}
	}
	for _, a := range set.Snapshot() {
		runtime = append(runtime, a.Fault)
	}
	return schedule, runtime, nil
}
