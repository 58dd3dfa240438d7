package retryhttp_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retryhttp"
)

// Every attempt of a call carries the same logical request ID; the Guard
// in front of the service puts it in the handler's context with the
// attempt number.
func ExampleRequestIDHeader() {
	var calls int
	srv := httptest.NewServer(&retryhttp.Guard{Next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, _ := retry.DeliveryFrom(r.Context())
		fmt.Printf("attempt %d of request %s\n", d.Attempt, d.ID)
		if calls++; calls == 1 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok")
	})})
	defer srv.Close()

	client := &http.Client{Transport: retryhttp.New(nil, &retry.Policy{Schedule: backoff.Constant(0)})}
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	req.Header.Set(retryhttp.RequestIDHeader, "order-42") // none set: the Transport makes one
	resp, err := client.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode)
	// Output:
	// attempt 1 of request order-42
	// attempt 2 of request order-42
	// 200
}

// A call with a deadline tells the service how long it has left; the
// Guard bounds the handler's context by it, so work the caller can no
// longer use stops, and work handed on (to a queue, a broker) keeps the
// deadline that is left.
func ExampleTimeoutHeader() {
	srv := httptest.NewServer(&retryhttp.Guard{Next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ms := r.Header.Get(retryhttp.TimeoutHeader)
		_, bounded := r.Context().Deadline()
		d, _ := retry.DeliveryFrom(r.Context())
		fmt.Println("time left sent:", ms != "", "context bounded:", bounded, "deadline carried:", !d.Deadline.IsZero())
	})})
	defer srv.Close()

	client := &http.Client{Transport: retryhttp.New(nil, &retry.Policy{Timeout: 2 * time.Second})}
	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	// Output:
	// time left sent: true context bounded: true deadline carried: true
}

// A client that retries without marking its attempts — here a loop
// re-sending the same request three times — shows up in Repeats when it
// sends a request ID (or an Idempotency-Key). MaxIDs bounds the table of
// IDs; Evicted counts the IDs it forgot.
func ExampleGuard_repeats() {
	guard := &retryhttp.Guard{MaxIDs: 1000, Next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "busy", http.StatusServiceUnavailable)
	})}
	srv := httptest.NewServer(guard)
	defer srv.Close()

	for range 3 {
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		req.Header.Set(retryhttp.IdempotencyKeyHeader, "charge-7")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
	}
	s := guard.Stats()
	fmt.Println("unmarked:", s.Unmarked, "repeats:", s.Repeats, "evicted:", s.Evicted)
	// Output:
	// unmarked: 3 repeats: 2 evicted: 0
}
