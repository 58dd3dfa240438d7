package staggerotel

import (
	"net"
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/staggerhq/stagger/internal/wire"
	"github.com/staggerhq/stagger/retryhttp"
)

// Server wraps h (a retryhttp.Guard, or the handler behind one) so that
// each request runs in a span of kind server, the child of the trace
// context the request carries (W3C Trace Context: the client attempt's
// span, with [Tracer.Transport]). Put it outside the Guard, so the span
// covers a request the Guard sheds:
//
//	http.Handle("/", tr.Server(&retryhttp.Guard{Next: app}))
//
// The span is named by the method and has http.request.method,
// url.path, url.scheme, server.address, server.port, client.address,
// http.response.status_code, error.type and status Error for a status
// of 500 or more (a 4xx answer leaves it Unset, as the HTTP semantic
// conventions ask of servers), and the ledger the request carries:
// stagger.attempt.number (a well-formed Stagger-Attempt) and
// stagger.request.id. h's request context carries the span.
func (t *Tracer) Server(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := t.prop.Extract(r.Context(), headerCarrier(r.Header))
		kv := make([]attribute.KeyValue, 0, 10)
		kv = append(kv, semconv.HTTPRequestMethodKey.String(method(r.Method)),
			semconv.URLPath(r.URL.Path), semconv.URLScheme(scheme(r)))
		if host, port, err := net.SplitHostPort(r.Host); err == nil {
			kv = append(kv, semconv.ServerAddress(host))
			if p, err := strconv.Atoi(port); err == nil {
				kv = append(kv, semconv.ServerPort(p))
			}
		} else if r.Host != "" {
			kv = append(kv, semconv.ServerAddress(r.Host))
		}
		if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
			kv = append(kv, semconv.ClientAddress(host))
		}
		if v := r.Header[retryhttp.AttemptHeader]; len(v) == 1 {
			if n, ok := retryhttp.ParseAttempt(v[0]); ok {
				kv = append(kv, KeyAttemptNumber.Int(n))
			}
		}
		if id := r.Header.Get(retryhttp.RequestIDHeader); wire.ValidID(id) { // the rule for IDs from the wire
			kv = append(kv, KeyRequestID.String(id))
		}
		ctx, span := t.tracer.Start(ctx, method(r.Method), kindServer, trace.WithAttributes(kv...))
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			code := sw.status()
			span.SetAttributes(semconv.HTTPResponseStatusCode(code))
			if code >= 500 {
				span.SetAttributes(semconv.ErrorTypeKey.String(strconv.Itoa(code)))
				span.SetStatus(codes.Error, strconv.Itoa(code))
			}
			span.End()
		}()
		h.ServeHTTP(sw, r.WithContext(ctx))
	})
}

func scheme(r *http.Request) string {
	if r.TLS != nil {
		return "https"
	}
	return "http"
}

// statusWriter records the status a handler answers with. Unwrap lets
// http.ResponseController reach the writer's Flush, Hijack and deadlines.
type statusWriter struct {
	http.ResponseWriter
	code int
}

// status is the status the handler answered with: 200 when it wrote
// nothing.
func (w *statusWriter) status() int {
	if w.code == 0 {
		return http.StatusOK
	}
	return w.code
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 && code >= 200 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
