package labkit

import (
	"net/http"
	"time"

	"github.com/staggerhq/stagger/internal/wire"
)

// Identify returns the logical request ID and the attempt number an
// attempt's headers carry (HeaderRequestID, HeaderAttempt): "" and 0 when
// absent, repeated or unreadable (an ID that is not 1 to 255 bytes of
// printable ASCII, an attempt number that is not a decimal integer in
// [1, 2^20]).
func Identify(h http.Header) (id string, attempt int) {
	// Direct map access: the constants are already in canonical form. The
	// rule for values from the wire: one value each; an ID of 1 to 255
	// bytes of printable ASCII, an attempt number in [1, 2^20].
	if v := h[HeaderRequestID]; len(v) == 1 && wire.ValidID(v[0]) {
		id = v[0]
	}
	if v := h[HeaderAttempt]; len(v) == 1 {
		attempt, _ = wire.ParseAttempt(v[0])
	}
	return id, attempt
}

// StatusWriter remembers the status a handler answered with and whether
// writing to the client failed. UpstreamErr is for a proxy's error handler
// to say that the upstream did not answer.
type StatusWriter struct {
	http.ResponseWriter
	Status      int
	WriteErr    bool
	UpstreamErr bool
}

// WriteHeader records the first status and passes it on.
func (w *StatusWriter) WriteHeader(code int) {
	if w.Status == 0 {
		w.Status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write records an implicit 200 and a failed write.
func (w *StatusWriter) Write(b []byte) (int, error) {
	if w.Status == 0 {
		w.Status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	if err != nil {
		w.WriteErr = true
	}
	return n, err
}

// Flush flushes the underlying writer if it can.
func (w *StatusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap returns the underlying writer, for http.ResponseController.
func (w *StatusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// ServeAttempt serves r with next and tells count what became of the
// attempt: Abandoned when the client went away before it had the whole
// answer (next may have served it), Failed when next (or its upstream) did
// not answer or answered 5xx, Accepted otherwise. count runs once, before
// ServeAttempt returns; when next panics (http.ErrAbortHandler when
// copying an answer failed), while the panic goes on, unrecovered, with
// next's own stack.
func ServeAttempt(next http.Handler, w http.ResponseWriter, r *http.Request, count func(Outcome)) {
	sw := &StatusWriter{ResponseWriter: w}
	gone := func() bool { return sw.WriteErr || r.Context().Err() != nil }
	served := false
	defer func() {
		switch {
		case served:
		case gone():
			count(Abandoned)
		default:
			count(Failed)
		}
	}()
	next.ServeHTTP(sw, r)
	served = true
	switch {
	case (sw.UpstreamErr || sw.WriteErr) && gone():
		count(Abandoned)
	case sw.UpstreamErr || sw.Status >= 500:
		count(Failed)
	default:
		count(Accepted)
	}
}

// CountingHandler counts every request next serves as one attempt: arrive
// is called when the request arrives (with time.Now) and the function it
// returns once the outcome is known (ServeAttempt), with the request's ID
// and attempt number (Identify). A panic of next goes on once counted.
func CountingHandler(next http.Handler, arrive func(at time.Time) func(id string, attempt int, o Outcome)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		done := arrive(time.Now())
		id, attempt := Identify(r.Header)
		ServeAttempt(next, w, r, func(o Outcome) { done(id, attempt, o) })
	})
}
