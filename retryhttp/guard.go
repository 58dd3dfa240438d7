package retryhttp

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/staggerhq/stagger/internal/wire"
	"github.com/staggerhq/stagger/retry"
)

// Header names of the single-retry-owner protocol.
const (
	// AttemptHeader carries the attempt number (1, 2, …) of the retry owner
	// on every request a Transport sends.
	AttemptHeader = "Stagger-Attempt"
	// NoRetryHeader on a response ("1") tells the caller not to retry it:
	// the service shed the request because it is overloaded, and a retry
	// would only add to the load. Retry-After says when to come back.
	NoRetryHeader = "Stagger-No-Retry"
	// IdempotencyKeyHeader makes a non-idempotent request retryable.
	IdempotencyKeyHeader = "Idempotency-Key"
	// RequestIDHeader carries the logical request's ID: the same on every
	// attempt of a call, and on the calls a service makes further down
	// for it. A Transport sends the request's own value, else the ID of
	// the work its context carries ([retry.DeliveryFrom]), else a random
	// one; [Guard] reads it when it is one value of 1 to 255 bytes of
	// printable ASCII, and treats anything else as no ID.
	RequestIDHeader = "Stagger-Request-Id"
	// TimeoutHeader carries the time left before the caller's deadline,
	// in whole milliseconds (rounded down) when the request was sent: a
	// duration, so the two clocks need not agree (as gRPC's
	// grpc-timeout). [Guard] bounds the handler's context by it, clamped to
	// Guard.MaxTimeout, which can only shorten the server's own deadline,
	// never extend it; 0 or an unreadable value gives no deadline of the
	// client's (the server's own applies). A Transport
	// sends it on every attempt of a call that has a deadline.
	TimeoutHeader = "Stagger-Timeout-Ms"
)

// MaxAttemptHeader is the largest attempt number a Guard accepts; larger or
// malformed values count as [GuardStats].Malformed and are not put in the
// context.
const MaxAttemptHeader = wire.MaxAttempt

// DefaultMaxTimeout is the longest deadline a request's TimeoutHeader can
// give a handler when Guard.MaxTimeout is not set.
const DefaultMaxTimeout = wire.DefaultMaxTimeout

// TrackedAttempts is the number of attempt numbers a Guard counts one by
// one; attempts above it share the last counter.
const TrackedAttempts = 16

// DefaultShedRetryAfter is the Retry-After a Guard sends when it sheds a
// request and its RetryAfter field is 0.
const DefaultShedRetryAfter = time.Second

type upstreamKey struct{}

// WithUpstreamAttempt returns a context saying that the work it carries is
// attempt n (n >= 1) of a retry owner upstream. A Transport that sends a
// request with this context makes one attempt and forwards n in its
// AttemptHeader, instead of adding retries of its own (unless
// Transport.NestedRetries is set). [Guard] does this for every request that
// arrives with an AttemptHeader; call it yourself when the work reaches
// you another way (a queue message carrying the header).
func WithUpstreamAttempt(ctx context.Context, n int) context.Context {
	return context.WithValue(ctx, upstreamKey{}, n)
}

// UpstreamAttempt returns the upstream owner's attempt number carried by
// ctx, if any.
func UpstreamAttempt(ctx context.Context) (int, bool) {
	n, ok := ctx.Value(upstreamKey{}).(int)
	return n, ok && n > 0
}

// ParseAttempt reads an AttemptHeader value: a decimal integer in
// [1, MaxAttemptHeader] with nothing around it (the rule for every value
// from the wire: docs/architecture.md, "Values from the wire").
func ParseAttempt(v string) (int, bool) { return wire.ParseAttempt(v) }

// Guard is server middleware for the single-retry-owner rule: exactly one
// layer owns retries; hidden retries are counted or turned off (the SRE
// book, "Addressing Cascading Failures": avoid retrying at multiple levels).
//
// It reads the AttemptHeader of every request and counts requests per
// attempt number, so a service can see how much of its load is retries. A
// request that carries the header gets its attempt number in the context
// ([UpstreamAttempt]), so a stagger [Transport] the handler uses to call
// further down does not multiply the upstream owner's retries with its own.
//
// The ledger of the request travels into the handler: its logical request
// ID (RequestIDHeader, else IdempotencyKeyHeader), its attempt number, its
// attempt budget (MaxAttemptsHeader, clamped to MaxAttempts) and
// its deadline (TimeoutHeader) are put in the context as a
// [retry.Delivery] ([retry.DeliveryFrom], Source "http"; Attempt 1 for a
// request without an attempt number), and the
// context is bounded by that deadline — which can only shorten the
// server's own. Every value is read by one rule (docs/architecture.md,
// "Values from the wire"): an attempt number must be a decimal integer in
// [1, MaxAttemptHeader]; a timeout is clamped to MaxTimeout
// (DefaultMaxTimeout unless set), so a client cannot give a handler — or
// the work it hands on — a deadline further away than the server allows;
// a request ID must be 1 to 255 bytes of printable ASCII; a repeated
// header counts as unreadable. An unreadable value is ignored (an
// attempt number is counted as Malformed), never an error. A handler that gives up in process and hands the work to
// a queue or a broker passes that Delivery on, so the work continues with
// the attempts and the time that are left, not a fresh budget; a Transport
// the handler calls through forwards the same request ID and the time
// left.
//
// Guard also counts repeats: a request whose logical request ID it has
// seen before, arriving without an attempt number or with one no higher
// than the highest seen for that ID ([GuardStats].Repeats) — a re-send
// that no attempt number marks as a retry. The rule has limits: it needs
// an ID, so a client that sends none (and forwards none) is not seen
// repeating; a client between two stagger services that re-sends with the
// headers it was given (a retrying client library in the middle) is
// counted only if it forwards the request ID; and IDs are remembered in a
// bounded table (MaxIDs), so a repeat that comes after its ID was evicted
// ([GuardStats].Evicted) counts as new.
//
// When the service is overloaded — more than MaxInFlight requests in the
// handler, or Overloaded says so — Guard answers at once with 503, a
// Retry-After and NoRetryHeader, without calling Next: a controlled answer
// instead of a queue without end, which a stagger Transport does not retry.
//
// Guard counts a request as in flight from the moment the server hands it
// to the handler until the handler returns, and it cannot time a client out
// itself. The http.Server in front of it must therefore bound how long a
// client may hold a handler, or slow and idle clients take the slots that
// MaxInFlight keeps for real work:
//
//   - ReadHeaderTimeout: a client that sends its headers a byte at a time
//     holds a connection before Guard sees it;
//   - ReadTimeout (or a per-request deadline set with
//     http.ResponseController.SetReadDeadline in a handler that streams
//     large bodies): a client that sends its body a byte every few seconds
//     holds an in-flight slot for as long as the body takes;
//   - IdleTimeout: idle keep-alive connections hold file descriptors and
//     memory (without it, ReadTimeout is used; with neither, they are kept
//     forever);
//   - WriteTimeout, when responses are small: a client that stops reading
//     holds the handler in its last Write;
//   - MaxHeaderBytes, and a connection cap on the listener
//     (golang.org/x/net/netutil.LimitListener or an equivalent) so that
//     open connections cannot exhaust file descriptors.
//
// stagger proxy sets all but WriteTimeout, since it forwards responses of any
// length (its --help gives the values).
//
// Use a *Guard; it is safe for concurrent use. Configure it before the first
// request.
type Guard struct {
	// Next handles the requests Guard admits.
	Next http.Handler
	// MaxInFlight caps the requests inside Next; 0 means no cap.
	MaxInFlight int
	// Overloaded, if set, is asked before each request is admitted; true
	// sheds it. It must be cheap and safe for concurrent use.
	Overloaded func(*http.Request) bool
	// RetryAfter is sent with a shed request (rounded up to whole
	// seconds); 0 means DefaultShedRetryAfter.
	RetryAfter time.Duration
	// MaxIDs bounds the table of logical request IDs that repeats are
	// counted against (about 20 bytes each); the oldest is evicted first.
	// 0 means 16384; negative turns repeat counting off.
	MaxIDs int
	// Logger, if set, gets a Debug record for every shed request.
	Logger *slog.Logger
	// MaxTimeout bounds the deadline a request's TimeoutHeader can give
	// the handler: a longer timeout counts as MaxTimeout. 0 or negative
	// means DefaultMaxTimeout. The server's own deadline (one the
	// request's context already has) is never extended either way.
	MaxTimeout time.Duration
	// MaxAttempts bounds the attempt budget a request's MaxAttemptsHeader
	// can give the work (the handler's Delivery.MaxAttempts): a larger
	// budget counts as MaxAttempts. 0 or negative means DefaultMaxBudget.
	MaxAttempts int

	inflight  atomic.Int64
	unmarked  atomic.Int64
	malformed atomic.Int64
	shed      atomic.Int64
	byAttempt [TrackedAttempts]atomic.Int64
	ids       wire.Repeats
}

// GuardStats is a snapshot of a Guard's counters.
type GuardStats struct {
	// ByAttempt[i] counts requests that arrived with AttemptHeader i+1; the
	// last entry also counts every attempt above TrackedAttempts.
	ByAttempt [TrackedAttempts]int64
	// Unmarked counts requests without an AttemptHeader.
	Unmarked int64
	// Malformed counts requests with an unreadable AttemptHeader. (An
	// unreadable TimeoutHeader is ignored: the server's own deadline
	// applies.)
	Malformed int64
	// Repeats counts requests whose logical request ID had been seen
	// before, without an attempt number or with one no higher than the
	// highest seen for it: re-sends no attempt number marks (see [Guard]
	// for what the rule cannot see). They are counted in ByAttempt or
	// Unmarked too.
	Repeats int64
	// Evicted counts IDs dropped from the full table; a repeat of one of
	// them counts as new.
	Evicted int64
	// Shed counts requests answered with 503 + NoRetryHeader.
	Shed int64
	// InFlight is the number of requests inside Next now.
	InFlight int64
}

// Total is the number of requests counted.
func (s GuardStats) Total() int64 {
	n := s.Unmarked + s.Malformed
	for _, c := range s.ByAttempt {
		n += c
	}
	return n
}

// Retries is the number of requests marked as attempt 2 or later.
func (s GuardStats) Retries() int64 {
	var n int64
	for _, c := range s.ByAttempt[1:] {
		n += c
	}
	return n
}

// Stats returns the counters.
func (g *Guard) Stats() GuardStats {
	s := GuardStats{
		Unmarked:  g.unmarked.Load(),
		Malformed: g.malformed.Load(),
		Repeats:   g.ids.Repeats(),
		Evicted:   g.ids.Evicted(),
		Shed:      g.shed.Load(),
		InFlight:  g.inflight.Load(),
	}
	for i := range g.byAttempt {
		s.ByAttempt[i] = g.byAttempt[i].Load()
	}
	return s
}

// ServeHTTP counts the request, sheds it when overloaded, and otherwise
// calls Next with the request's ledger in the context.
func (g *Guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	attempt := 0
	if v := r.Header[AttemptHeader]; len(v) > 0 {
		if n, ok := ParseAttempt(v[0]); ok && len(v) == 1 {
			attempt = n
			g.byAttempt[min(n, TrackedAttempts)-1].Add(1)
		} else {
			g.malformed.Add(1)
		}
	} else {
		g.unmarked.Add(1)
	}
	var timeout time.Duration
	if v := r.Header[TimeoutHeader]; len(v) == 1 {
		timeout, _ = wire.ParseTimeoutMs(v[0], g.MaxTimeout)
	}
	budget := 0
	if v := r.Header[MaxAttemptsHeader]; len(v) == 1 {
		budget, _ = wire.ParseMaxAttempts(v[0], g.MaxAttempts)
	}
	id := wireID(r.Header, RequestIDHeader)
	if id == "" {
		id = wireID(r.Header, IdempotencyKeyHeader)
	}
	if id != "" && g.MaxIDs >= 0 {
		g.ids.Seen(id, attempt, g.MaxIDs)
	}

	n := g.inflight.Add(1)
	if (g.MaxInFlight > 0 && n > int64(g.MaxInFlight)) || (g.Overloaded != nil && g.Overloaded(r)) {
		g.inflight.Add(-1)
		g.shedRequest(w, r, attempt)
		return
	}
	defer g.inflight.Add(-1)
	if attempt > 0 || id != "" || timeout > 0 || budget > 0 {
		ctx := r.Context()
		if timeout > 0 {
			own, ok := ctx.Deadline()
			if dl, shorter := wire.Deadline(time.Now(), timeout, g.MaxTimeout, own, ok); shorter {
				var cancel context.CancelFunc
				ctx, cancel = context.WithDeadline(ctx, dl)
				defer cancel()
			}
		}
		if attempt > 0 {
			ctx = WithUpstreamAttempt(ctx, attempt)
		}
		d := retry.Delivery{ID: id, Attempt: max(attempt, 1), MaxAttempts: budget, Source: "http"}
		d.Deadline, _ = ctx.Deadline()
		r = r.WithContext(d.NewContext(ctx))
	}
	g.Next.ServeHTTP(w, r)
}

// wireID is h's value for the canonical key k when it is one usable
// request ID (wire.ValidID); "" when absent, repeated or malformed.
func wireID(h http.Header, k string) string {
	if v := h[k]; len(v) == 1 && wire.ValidID(v[0]) {
		return v[0]
	}
	return ""
}

func (g *Guard) shedRequest(w http.ResponseWriter, r *http.Request, attempt int) {
	g.shed.Add(1)
	ra := g.RetryAfter
	if ra <= 0 {
		ra = DefaultShedRetryAfter
	}
	secs := int64(ra / time.Second) // rounded up, without overflowing near the largest Duration
	if ra%time.Second != 0 {
		secs++
	}
	h := w.Header()
	h.Set("Retry-After", strconv.FormatInt(secs, 10))
	h.Set(NoRetryHeader, "1")
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write([]byte("overloaded: retry after " + strconv.FormatInt(secs, 10) + "s\n"))
	if g.Logger != nil {
		g.Logger.LogAttrs(r.Context(), slog.LevelDebug, "request shed",
			slog.String("method", r.Method), slog.String("path", r.URL.Path),
			slog.Int("attempt", attempt), slog.Int64("retry_after_s", secs))
	}
}
