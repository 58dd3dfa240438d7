package retryhttp

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/staggerhq/stagger/retry"
)

// Classifier judges the outcome of one attempt in the core vocabulary.
//
// It receives the attempt's request and either the response or the
// transport's error (exactly one of resp and err is non-nil). It returns nil
// when the attempt succeeded — the response goes to the caller — or an error
// whose class ([retry.Classify]) decides what happens next:
// [retry.Retryable] may be retried (the transport adds the response's
// Retry-After), [retry.Permanent] stops, and an error of no class stops and
// is handed back as it is. For a response, "stops" means the response itself
// is returned to the caller, unread.
//
// A Classifier must not read or close resp.Body.
type Classifier func(req *http.Request, resp *http.Response, err error) error

// StatusError is the error a classifier returns for a response it judges a
// failure. Its RetryClass method gives [retry.Classify] its class
// directly; After holds the response's Retry-After once the transport has
// parsed it.
type StatusError struct {
	// Method and Host name the request (Host as in req.URL.Host).
	Method string
	Host   string // req.URL.Host
	// StatusCode is the response's status.
	StatusCode int
	// Class is the classifier's verdict (permanent once NoRetry is set).
	Class retry.Class
	// After is the wait the server asked for (Retry-After), 0 when none.
	After time.Duration
	// NoRetry reports that the server sent Stagger-No-Retry: the response
	// is final whatever its status.
	NoRetry bool
}

// Error reads like "retryhttp: GET example.com: 503 Service Unavailable".
func (e *StatusError) Error() string {
	var b strings.Builder
	b.WriteString("retryhttp: ")
	b.WriteString(e.Method)
	b.WriteByte(' ')
	b.WriteString(e.Host)
	b.WriteString(": ")
	b.WriteString(strconv.Itoa(e.StatusCode))
	if t := http.StatusText(e.StatusCode); t != "" {
		b.WriteByte(' ')
		b.WriteString(t)
	}
	if e.NoRetry {
		b.WriteString(" (" + NoRetryHeader + ")")
	}
	return b.String()
}

// RetryClass reports the error's class to [retry.Classify].
func (e *StatusError) RetryClass() (retry.Class, time.Duration) { return e.Class, e.After }

// StatusClass is the default class of a response status: 1xx-3xx are not
// failures (ok is false); 408, 429, 502, 503 and 504 are retryable; 501 and
// every other 4xx are permanent; any other 5xx (500, 505, …) has no class,
// since what a 500 means differs between services — give it one per
// endpoint with [Statuses].
func StatusClass(code int) (c retry.Class, failure bool) {
	switch {
	case code < 400:
		return retry.ClassUnknown, false
	case code == http.StatusRequestTimeout, code == http.StatusTooManyRequests,
		code == http.StatusBadGateway, code == http.StatusServiceUnavailable,
		code == http.StatusGatewayTimeout:
		return retry.ClassRetryable, true
	case code < 500, code == http.StatusNotImplemented:
		return retry.ClassPermanent, true
	}
	return retry.ClassUnknown, true
}

// DefaultClassify is the classifier of a Transport without one: responses
// by [StatusClass], transport errors by [ErrorClass].
func DefaultClassify(req *http.Request, resp *http.Response, err error) error {
	if err != nil {
		return classifyErr(err)
	}
	c, failure := StatusClass(resp.StatusCode)
	if !failure {
		return nil
	}
	return newStatusError(req, resp.StatusCode, c)
}

func newStatusError(req *http.Request, code int, c retry.Class) *StatusError {
	return &StatusError{Method: req.Method, Host: req.URL.Host, StatusCode: code, Class: c}
}

// classifyErr marks a transport error with its ErrorClass. An error that
// is classed already (a Base that returns retry.After) is kept as it is,
// with its requested wait.
func classifyErr(err error) error {
	if c, _ := retry.Classify(err); c != retry.ClassUnknown {
		return err
	}
	switch ErrorClass(err) {
	case retry.ClassRetryable:
		return retry.Retryable(err)
	case retry.ClassPermanent:
		return retry.Permanent(err)
	}
	return err
}

// ErrorClass is the default class of a transport error:
//
//   - already classed errors keep their class;
//   - refused and reset connections, connections closed early (EOF) and
//     network timeouts are retryable. The transport only ever retries
//     idempotent requests (or ones with an Idempotency-Key), for which a
//     reset after the request was written is as safe to retry as one
//     before;
//   - a host that does not exist and certificate errors are permanent;
//   - anything else (a canceled context, a malformed URL) has no class.
func ErrorClass(err error) retry.Class {
	if c, _ := retry.Classify(err); c != retry.ClassUnknown {
		return c
	}
	if errors.Is(err, context.Canceled) {
		return retry.ClassUnknown
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		if dnsErr.IsNotFound {
			return retry.ClassPermanent
		}
		return retry.ClassRetryable
	}
	var (
		certErr      *tls.CertificateVerificationError
		hostErr      x509.HostnameError
		authorityErr x509.UnknownAuthorityError
		invalidErr   x509.CertificateInvalidError
	)
	if errors.As(err, &certErr) || errors.As(err, &hostErr) ||
		errors.As(err, &authorityErr) || errors.As(err, &invalidErr) {
		return retry.ClassPermanent
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, context.DeadlineExceeded) {
		return retry.ClassRetryable
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return retry.ClassRetryable // nothing was sent
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		return retry.ClassRetryable
	}
	return retry.ClassUnknown
}

// Route gives requests that match it their own classifier. Empty fields
// match anything. Host is compared with req.URL.Host (host[:port]) and with
// its host name alone.
type Route struct {
	Host       string     // host[:port] or host name; "" matches any
	Method     string     // exact method; "" matches any
	PathPrefix string     // prefix of req.URL.Path; "" matches any
	Classify   Classifier // nil: the fallback of Routes
}

func (r *Route) match(req *http.Request) bool {
	if r.Method != "" && r.Method != req.Method {
		return false
	}
	if r.Host != "" && r.Host != req.URL.Host && r.Host != req.URL.Hostname() {
		return false
	}
	return strings.HasPrefix(req.URL.Path, r.PathPrefix)
}

// Routes classifies per endpoint: the first route that matches the request
// decides, and fallback (nil: DefaultClassify) decides the rest: no single
// table reads one status the same way for every service.
func Routes(fallback Classifier, routes ...Route) Classifier {
	if fallback == nil {
		fallback = DefaultClassify
	}
	rs := append([]Route(nil), routes...)
	for i := range rs {
		if rs[i].Classify == nil {
			rs[i].Classify = fallback
		}
	}
	return func(req *http.Request, resp *http.Response, err error) error {
		for i := range rs {
			if rs[i].match(req) {
				return rs[i].Classify(req, resp, err)
			}
		}
		return fallback(req, resp, err)
	}
}

// Statuses overrides base (nil: DefaultClassify) for the listed response
// statuses: ClassRetryable and ClassPermanent make the status a failure of
// that class, ClassUnknown makes it a success handed to the caller.
func Statuses(base Classifier, classes map[int]retry.Class) Classifier {
	if base == nil {
		base = DefaultClassify
	}
	m := make(map[int]retry.Class, len(classes))
	for k, v := range classes {
		m[k] = v
	}
	return func(req *http.Request, resp *http.Response, err error) error {
		if resp != nil {
			if c, ok := m[resp.StatusCode]; ok {
				if c == retry.ClassUnknown {
					return nil
				}
				return newStatusError(req, resp.StatusCode, c)
			}
		}
		return base(req, resp, err)
	}
}

// ParseRetryAfter reads a Retry-After value: delay-seconds (a run of
// digits) or an HTTP-date, measured from now. It returns false for an empty
// or malformed value; a date in the past is a wait of 0, and a number of
// seconds too large for a time.Duration saturates at its maximum.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if v[0] >= '0' && v[0] <= '9' {
		var secs uint64
		for i := 0; i < len(v); i++ {
			c := v[i]
			if c < '0' || c > '9' {
				return 0, false
			}
			if secs <= math.MaxInt64/uint64(time.Second) {
				secs = secs*10 + uint64(c-'0')
			}
		}
		if secs > math.MaxInt64/uint64(time.Second) {
			return time.Duration(math.MaxInt64), true
		}
		return time.Duration(secs) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(0, t.Sub(now)), true
}
