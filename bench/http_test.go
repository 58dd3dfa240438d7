package bench

// The HTTP comparison: stagger's retryhttp.Transport next to
// hashicorp/go-retryablehttp.
//
//	TestHTTPOutage     the same outage of the lab gateway, the same callers,
//	                   each library as its documentation configures it: the
//	                   gateway counts attempts, the peak in 200 ms and the
//	                   callers that were served (go test -run HTTPOutage -v)
//	BenchmarkHTTPSuccess/<lib>  one successful GET over loopback (stagger-timeout:
//	                   with Policy.Timeout, so each attempt has a deadline;
//	                   net-http+ledger: net/http alone sending stagger's
//	                   ledger headers, the wire format's own cost)

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/budget"
	"github.com/staggerhq/stagger/internal/labkit"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retryhttp"
)

// httpClient is one configured library: do sends one logical request with
// the given ID and reports whether it was served and how many attempts the
// client itself counted.
type httpClient struct {
	name string
	note string
	do   func(ctx context.Context, method, url, id string) (ok bool, attempts int)
}

// Both libraries get the same connection pool, sized for the callers.
func pooledTransport() *http.Transport {
	return &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256, IdleConnTimeout: time.Minute}
}

const (
	outageMaxAttempts = 6 // the first try included: 5 retries
	outageBase        = 60 * time.Millisecond
	outageCap         = 2 * time.Second
)

func newRetryablehttp(base http.RoundTripper) *retryablehttp.Client {
	c := retryablehttp.NewClient()
	c.HTTPClient.Transport = base
	c.Logger = nil
	c.RetryMax = outageMaxAttempts - 1
	c.RetryWaitMin, c.RetryWaitMax = outageBase, outageCap
	return c
}

func retryablehttpClient(base http.RoundTripper) httpClient {
	// DefaultBackoff: min·2^n capped at max, no jitter; it honours Retry-After.
	return httpClient{
		name: "go-retryablehttp",
		note: fmt.Sprintf("RetryMax %d, DefaultBackoff %v·2^n ≤ %v (no jitter), DefaultRetryPolicy", outageMaxAttempts-1, outageBase, outageCap),
		do: func(ctx context.Context, method, url, id string) (bool, int) {
			var attempts atomic.Int64
			c := newRetryablehttp(base)
			c.RequestLogHook = func(_ retryablehttp.Logger, r *http.Request, n int) {
				attempts.Add(1)
				r.Header.Set(labkit.HeaderAttempt, fmt.Sprint(n+1)) // for the gateway's log
			}
			req, _ := retryablehttp.NewRequestWithContext(ctx, method, url, strings.NewReader("{}"))
			req.Header.Set(labkit.HeaderRequestID, id)
			resp, err := c.Do(req)
			if err != nil {
				return false, int(attempts.Load())
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode == 200, int(attempts.Load())
		},
	}
}

func staggerClient(name string, base http.RoundTripper, b func() budget.Budget) httpClient {
	return staggerJitter(name, base, backoff.Full, b)
}

func staggerJitter(name string, base http.RoundTripper, j backoff.Jitter, b func() budget.Budget) httpClient {
	var shared budget.Budget
	note := fmt.Sprintf("MaxAttempts %d, Exponential %v·2^n ≤ %v, %v jitter", outageMaxAttempts, outageBase, outageCap, j)
	if b != nil {
		shared = b()
		note += ", token-bucket budget shared by all callers (starts full: 200 credits = 20 retries)"
	}
	return httpClient{
		name: name,
		note: note,
		do: func(ctx context.Context, method, url, id string) (bool, int) {
			var attempts atomic.Int64
			p := &retry.Policy{
				MaxAttempts: outageMaxAttempts,
				Schedule:    backoff.Exponential{Base: outageBase, Cap: outageCap, Jitter: j},
				Budget:      shared,
				Hooks:       retry.Hooks{OnAttempt: func(retry.Event) { attempts.Add(1) }},
			}
			client := &http.Client{Transport: retryhttp.New(base, p)}
			req, _ := http.NewRequestWithContext(ctx, method, url, strings.NewReader("{}"))
			req.Header.Set(labkit.HeaderRequestID, id)
			resp, err := client.Do(req)
			if err != nil {
				return false, int(attempts.Load())
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode == 200, int(attempts.Load())
		},
	}
}

type outageRow struct {
	client, method           string
	attempts, clientAttempts int
	peak, served, callers    int
	lastAccepted             time.Duration
}

// runOutage lets callers start together against a gateway that is down for
// the first outage of its timeline, and returns what the gateway counted.
func runOutage(t *testing.T, c httpClient, f labkit.Faults, callers int, method string) outageRow {
	t.Helper()
	start := time.Now().Add(50 * time.Millisecond)
	g, err := labkit.NewGateway(f, start)
	if err != nil {
		t.Fatal(err)
	}
	url, err := g.Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var served, clientAttempts atomic.Int64
	gate := make(chan struct{})
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			ok, n := c.do(ctx, method, url+"/orders", fmt.Sprintf("%s-%d", c.name, i))
			if ok {
				served.Add(1)
			}
			clientAttempts.Add(int64(n))
		}()
	}
	time.Sleep(time.Until(start))
	close(gate)
	wg.Wait()
	if err := g.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s := g.Recorder().Stats(labkit.DefaultWindow)
	return outageRow{client: c.name, method: method, attempts: s.Total, clientAttempts: int(clientAttempts.Load()),
		peak: s.Peak, served: int(served.Load()), callers: callers, lastAccepted: s.LastAccepted}
}

// TestHTTPOutage runs the comparison and prints its table. It asserts what
// must hold whatever the machine's timing: both sides count the same
// attempts, each library stays within its attempt cap, and stagger never
// retries a POST without an Idempotency-Key (go-retryablehttp does).
func TestHTTPOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("real-time outage runs")
	}
	const callers = 20
	scenarios := []struct {
		name   string
		faults labkit.Faults
	}{
		{"down 700ms, latency 20ms", labkit.Outage(700*time.Millisecond, 20*time.Millisecond)},
		{"down 700ms, latency 20ms, then at most 4 in flight", func() labkit.Faults {
			// The recovering dependency has little room: attempts that
			// arrive together beyond 4 in flight are refused at once.
			f := labkit.Outage(700*time.Millisecond, 20*time.Millisecond)
			f.Capacity = 4
			return f
		}()},
		{"down 700ms, latency 20ms, Retry-After: 1", func() labkit.Faults {
			f := labkit.Outage(700*time.Millisecond, 20*time.Millisecond)
			f.RetryAfter = time.Second
			return f
		}()},
	}
	base := pooledTransport()
	defer base.CloseIdleConnections()
	clients := []httpClient{
		retryablehttpClient(base),
		staggerClient("stagger", base, nil),
		staggerJitter("stagger-equal", base, backoff.Equal, nil),
		staggerClient("stagger+budget", base, func() budget.Budget { return &budget.TokenBucket{Initial: budget.DefaultMax} }),
	}
	var out strings.Builder
	for _, sc := range scenarios {
		fmt.Fprintf(&out, "\n%s, %d callers starting together:\n", sc.name, callers)
		fmt.Fprintf(&out, "  %-18s %-6s %9s %6s %8s %15s\n", "client", "method", "attempts", "peak", "served", "last accepted")
		for _, c := range clients {
			for _, method := range []string{"GET", "POST"} {
				if strings.HasSuffix(c.name, "+budget") && method == "POST" {
					continue
				}
				// A fresh budget per scenario and method.
				if c.name == "stagger+budget" {
					c = staggerClient(c.name, base, func() budget.Budget { return &budget.TokenBucket{Initial: budget.DefaultMax} })
				}
				r := runOutage(t, c, sc.faults, callers, method)
				last := "-"
				if r.served > 0 {
					last = fmt.Sprintf("%d ms", r.lastAccepted.Milliseconds())
				}
				fmt.Fprintf(&out, "  %-18s %-6s %9d %6d %5d/%-2d %15s\n", r.client, r.method, r.attempts, r.peak, r.served, r.callers, last)
				if r.attempts != r.clientAttempts {
					t.Errorf("%s %s: the gateway counted %d attempts, the client %d", c.name, method, r.attempts, r.clientAttempts)
				}
				if r.attempts > callers*outageMaxAttempts {
					t.Errorf("%s %s: %d attempts exceed %d callers × %d", c.name, method, r.attempts, callers, outageMaxAttempts)
				}
				if strings.HasPrefix(c.name, "stagger") && method == "POST" && r.attempts != callers {
					t.Errorf("stagger POST without Idempotency-Key: %d attempts, want one per caller (%d)", r.attempts, callers)
				}
				if c.name == "go-retryablehttp" && method == "POST" && r.attempts <= callers {
					t.Errorf("go-retryablehttp POST: %d attempts; it retries POSTs, so more than %d expected", r.attempts, callers)
				}
			}
		}
	}
	for _, c := range clients {
		fmt.Fprintf(&out, "%s: %s\n", c.name, c.note)
	}
	t.Log(out.String())
}

// BenchmarkHTTPSuccess is one successful GET over loopback through each
// library, configured as above.
func BenchmarkHTTPSuccess(b *testing.B) {
	g, err := labkit.NewGateway(labkit.Faults{}, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	url, err := g.Listen()
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close(context.Background())
	base := pooledTransport()
	defer base.CloseIdleConnections()

	rc := newRetryablehttp(base)
	sc := &http.Client{Transport: retryhttp.New(base, &retry.Policy{MaxAttempts: outageMaxAttempts})}
	// With a deadline for the call, as the package documentation configures it.
	st := &http.Client{Transport: retryhttp.New(base, &retry.Policy{MaxAttempts: outageMaxAttempts, Timeout: 10 * time.Second})}
	plain := &http.Client{Transport: base}
	// Every library sends the same logical request ID, so the gateway
	// parses the same headers and records one ID (a new ID per request
	// would charge its recording to whichever library sends IDs).
	// retryhttp's cost of making an ID is in its BenchmarkOverhead.
	newReq := func() *http.Request {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header[labkit.HeaderRequestID] = []string{"bench"}
		return req
	}
	// net/http alone sending the ledger a stagger call sends (attempt 1 of
	// outageMaxAttempts, the request ID above): what the wire format costs
	// both sides, with none of stagger's code.
	attempt, budget := []string{"1"}, []string{strconv.Itoa(outageMaxAttempts)}
	newLedgerReq := func() *http.Request {
		req := newReq()
		req.Header[retryhttp.AttemptHeader] = attempt
		req.Header[retryhttp.MaxAttemptsHeader] = budget
		return req
	}
	for _, c := range []struct {
		name string
		get  func() (*http.Response, error)
	}{
		{"net-http", func() (*http.Response, error) { return plain.Do(newReq()) }},
		{"net-http+ledger", func() (*http.Response, error) { return plain.Do(newLedgerReq()) }},
		{"stagger", func() (*http.Response, error) { return sc.Do(newReq()) }},
		{"stagger-timeout", func() (*http.Response, error) { return st.Do(newReq()) }},
		{"go-retryablehttp", func() (*http.Response, error) {
			req, err := retryablehttp.FromRequest(newReq())
			if err != nil {
				return nil, err
			}
			return rc.Do(req)
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				resp, err := c.get()
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}
