package proxytest_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/proxytest"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retryhttp"
)

// A retrying client (retryhttp) through a proxy that answers 503 to every
// POST to /pay: the client makes its four attempts and gives up; with the
// fault removed, one attempt does. In a test, proxytest.Start(t, …) starts
// and closes the proxy, and each Check… error goes to t.Error.
func Example() {
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "paid")
	}))
	defer svc.Close()
	p, err := proxytest.New(svc.URL, proxytest.WithWindow(time.Minute))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	name, _ := p.AddFault("status 503 method=POST path=/pay")

	client := &http.Client{Transport: retryhttp.New(nil, &retry.Policy{
		MaxAttempts: 4,
		Schedule:    backoff.Exponential{Base: time.Millisecond, Cap: 10 * time.Millisecond, Jitter: backoff.Full},
		Timeout:     10 * time.Second,
	})}
	pay := func(id string) int {
		req, _ := http.NewRequest("POST", p.URL+"/pay", nil)
		req.Header.Set(retryhttp.RequestIDHeader, id)
		req.Header.Set(retryhttp.IdempotencyKeyHeader, id)
		resp, err := client.Do(req)
		if err != nil {
			fmt.Println(err)
			return 0
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	fmt.Println("with the fault:", pay("order-1"))
	fmt.Println(p.CheckAttempts("order-1", 4))
	fmt.Println(p.CheckAttempts("order-1", 1))

	p.RemoveFault(name)
	fmt.Println("without it:", pay("order-2"))
	fmt.Println(p.CheckAttempts("order-2", 1))
	fmt.Println(p.CheckAmplification(2))
	fmt.Println(p.CheckPeak(5))
	// Output:
	// with the fault: 503
	// <nil>
	// proxytest: request "order-1" made 4 attempts, want 1 (all requests: 4 attempts, by attempt number map[1:1 2:1 3:1 4:1])
	// without it: 200
	// <nil>
	// proxytest: 2.5 attempts per request, over 2: 5 attempts for 2 requests, the most 4 by one (by attempt number map[1:2 2:1 3:1 4:1])
	// <nil>
}

// An outage switched on and off while the test runs: a clause of the
// fault schedule (times count from the proxy's start, so "down 1h at 0s"
// is down from now until removed), then a cap of one attempt in flight.
func ExampleProxy_AddSchedule() {
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer svc.Close()
	p, err := proxytest.New(svc.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	get := func() int {
		resp, err := http.Get(p.URL + "/")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	name, _ := p.AddSchedule("outage", "down 1h at 0s")
	fmt.Println(name, get())
	p.RemoveSchedule(name)
	fmt.Println("removed", get())
	p.AddSchedule("", "cap 1")
	clauses, _ := p.Schedule()
	fmt.Println(clauses)
	s, _ := p.Stats()
	fmt.Println(s.Total, s.Down, s.Accepted)
	// Output:
	// outage 503
	// removed 200
	// [{cap cap 1}]
	// 2 1 1
}
