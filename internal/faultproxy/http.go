package faultproxy

import (
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/staggerhq/stagger/internal/labkit"
)

// Plan is what the faults do to one HTTP attempt: wait, then answer a
// status, reset the connection, or forward and cut the answer.
type Plan struct {
	Wait   time.Duration // delay faults, added up
	Status *labkit.Fault // answer this status fault's answer
	Reset  bool          // reset the connection, no answer
	Cut    int64         // forward and cut the body after Cut bytes; -1 not cut
}

// PlanHTTP decides, for an attempt, which faults apply: each fault whose
// match holds applies with its probability; delays add up, and the first
// status or reset fault that applies answers. Every fault that matched
// counts, applied or not.
func (s *Set) PlanHTTP(r *http.Request) Plan {
	pl := Plan{Cut: -1}
	list := s.Snapshot()
	if len(list) == 0 {
		return pl
	}
	header := func(k string) (string, bool) {
		v, ok := r.Header[k]
		if !ok || len(v) == 0 {
			return "", ok
		}
		return v[0], true
	}
	for _, a := range list {
		if !a.Matches(r.Method, r.URL.Path, header) {
			continue
		}
		if pl.Status != nil || pl.Reset {
			continue // an answer is decided; later faults do not see the attempt
		}
		applies := a.Applies(s.rand())
		a.Count(applies)
		if !applies {
			continue
		}
		switch a.Kind {
		case labkit.FaultDelay:
			pl.Wait += a.Wait(s.rand())
		case labkit.FaultStatus:
			pl.Status = &a.Fault
		case labkit.FaultReset:
			pl.Reset = true
		case labkit.FaultCut:
			if pl.Cut < 0 || a.Bytes < pl.Cut {
				pl.Cut = a.Bytes
			}
		}
	}
	return pl
}

// Serve carries out the plan: it waits (an attempt whose client goes away
// meanwhile is Abandoned), then answers, resets or forwards to next,
// calling finish once with the attempt's outcome: a status answer counts as
// Down (refused by a fault), a reset or a cut answer as Dropped, a
// forwarded one as labkit.ServeAttempt counts it.
func (pl Plan) Serve(w http.ResponseWriter, r *http.Request, next http.Handler, now func() time.Time, finish func(labkit.Outcome)) {
	if pl.Wait > 0 {
		t := time.NewTimer(pl.Wait)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			finish(labkit.Abandoned)
			return
		}
	}
	switch {
	case pl.Reset:
		finish(labkit.Dropped)
		ResetConn(w)
	case pl.Status != nil:
		WriteStatus(w, pl.Status, now())
		finish(labkit.Down)
	case pl.Cut >= 0:
		cw := &cutWriter{ResponseWriter: w, left: pl.Cut}
		labkit.ServeAttempt(next, cw, r, func(o labkit.Outcome) {
			if cw.cut {
				o = labkit.Dropped
			}
			finish(o)
		})
	default:
		labkit.ServeAttempt(next, w, r, finish)
	}
}

// HeaderFault names the fault that answered, on a status fault's answer.
const HeaderFault = "Stagger-Fault"

// WriteStatus answers a status fault: its code, Retry-After, and its body
// (or one line naming the fault).
func WriteStatus(w http.ResponseWriter, f *labkit.Fault, now time.Time) {
	h := w.Header()
	if v := f.RetryAfterValue(now); v != "" {
		h.Set("Retry-After", v)
	}
	h.Set(HeaderFault, f.Name)
	h.Set(labkit.HeaderOutcome, labkit.Down.String())
	body := f.Body
	if body == "" {
		body = "stagger proxy: fault " + f.Name + ": " + strconv.Itoa(f.Status) + " " + http.StatusText(f.Status) + "\n"
	}
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(f.Status)
	io.WriteString(w, body)
}

// ResetConn closes the attempt's connection with a TCP reset (SO_LINGER
// 0): the client reads ECONNRESET, no answer. Where the connection cannot
// be taken over (HTTP/2), the stream is aborted instead.
func ResetConn(w http.ResponseWriter) {
	c, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	SetLinger0(c)
	c.Close()
}

// SetLinger0 makes closing c send a TCP reset; c may wrap a *net.TCPConn
// behind NetConn methods.
func SetLinger0(c net.Conn) {
	for range 8 {
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0)
			return
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return
		}
		c = u.NetConn()
	}
}

var errCut = errors.New("stagger proxy: answer cut by a fault")

// cutWriter passes at most left bytes of the body, then fails every write:
// the reverse proxy aborts the connection, and the client, missing the rest
// of a body whose length it was told (or the last chunk), reads an error.
type cutWriter struct {
	http.ResponseWriter
	left int64
	cut  bool
}

func (c *cutWriter) Write(p []byte) (int, error) {
	if int64(len(p)) <= c.left {
		n, err := c.ResponseWriter.Write(p)
		c.left -= int64(n)
		return n, err
	}
	n, _ := c.ResponseWriter.Write(p[:c.left])
	c.left, c.cut = 0, true
	http.NewResponseController(c.ResponseWriter).Flush()
	return n, errCut
}

func (c *cutWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }
