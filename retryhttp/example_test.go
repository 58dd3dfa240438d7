package retryhttp_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retryhttp"
)

func ExampleNew() {
	// A service that is down for its first two requests.
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		fmt.Printf("server: attempt %s\n", r.Header.Get(retryhttp.AttemptHeader))
		if n <= 2 {
			w.Header().Set("Retry-After", "0")
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "hello")
	}))
	defer srv.Close()

	client := &http.Client{Transport: retryhttp.New(nil, &retry.Policy{
		MaxAttempts:    4,
		Schedule:       backoff.Exponential{Base: 10 * time.Millisecond, Cap: 100 * time.Millisecond, Jitter: backoff.Full},
		Timeout:        5 * time.Second,        // one deadline for the whole call
		AttemptTimeout: 800 * time.Millisecond, // each attempt: min(this, time left)
	})}
	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, string(body))
	// Output:
	// server: attempt 1
	// server: attempt 2
	// server: attempt 3
	// 200 hello
}

func ExampleGuard() {
	// The service admits one request at a time and sheds the rest with
	// 503 + Retry-After + Stagger-No-Retry, which a stagger client does
	// not retry.
	release := make(chan struct{})
	started := make(chan struct{})
	guard := &retryhttp.Guard{
		MaxInFlight: 1,
		Next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			close(started)
			<-release
			io.WriteString(w, "done")
		}),
	}
	srv := httptest.NewServer(guard)
	defer srv.Close()
	client := &http.Client{Transport: retryhttp.New(nil, &retry.Policy{MaxAttempts: 3})}

	done := make(chan int)
	go func() {
		resp, err := client.Get(srv.URL)
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	<-started
	resp, err := client.Get(srv.URL) // the slot is taken
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println("second call:", resp.StatusCode, "Retry-After", resp.Header.Get("Retry-After"), "no-retry", resp.Header.Get(retryhttp.NoRetryHeader))
	close(release)
	fmt.Println("first call:", <-done)

	s := guard.Stats()
	fmt.Println("attempt 1:", s.ByAttempt[0], "retries:", s.Retries(), "shed:", s.Shed)
	// Output:
	// second call: 503 Retry-After 1 no-retry 1
	// first call: 200
	// attempt 1: 2 retries: 0 shed: 1
}
