package lab

import (
	"net/http"
	"time"

	"github.com/staggerhq/stagger/internal/labkit"
	"github.com/staggerhq/stagger/retryhttp"
)

// Headers by which a sender identifies its attempts, those retryhttp
// sends: the request ID names the logical request, the attempt header
// counts from 1.
const (
	HeaderRequestID = retryhttp.RequestIDHeader
	HeaderAttempt   = retryhttp.AttemptHeader
)

// Handler returns next with every request counted in r as one attempt: it
// arrives when the request does and is attributed to the request's
// HeaderRequestID and HeaderAttempt. Its outcome is Accepted, Failed when
// next answered 5xx or panicked (the panic goes on once counted), or
// Abandoned when the client went away before it had the whole answer.
// next's ResponseWriter is a wrapper: reach the connection's own methods
// (Flush, Hijack, deadlines) through http.ResponseController, which
// unwraps it, rather than with a type assertion.
func (r *Recorder) Handler(next http.Handler) http.Handler {
	return labkit.CountingHandler(next, func(at time.Time) func(string, int, Outcome) {
		return func(id string, attempt int, o Outcome) { r.r.Record(at, id, attempt, o) }
	})
}

// Handler is [Recorder.Handler] for a WindowedRecorder: the attempt counts
// toward the peak from its arrival, even while next is still serving it.
func (r *WindowedRecorder) Handler(next http.Handler) http.Handler {
	return labkit.CountingHandler(next, func(at time.Time) func(string, int, Outcome) {
		p := r.r.Arrive(at)
		return func(id string, attempt int, o Outcome) { r.r.Finish(p, id, attempt, o) }
	})
}
