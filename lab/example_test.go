package lab_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/staggerhq/stagger/lab"
)

// Count the attempts that reach a service: two logical requests, the first
// retried twice after refusals.
func ExampleRecorder() {
	start := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	rec := lab.NewRecorder(start)
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	rec.Record(at(0), "order-1", 1, lab.Down)
	rec.Record(at(10), "order-2", 1, lab.Accepted)
	rec.Record(at(60), "order-1", 2, lab.Down)
	rec.Record(at(500), "order-1", 3, lab.Accepted)

	s := rec.Stats(lab.DefaultWindow)
	fmt.Printf("%d attempts, %d accepted, %d rejected\n", s.Total, s.Accepted, s.Rejected)
	fmt.Printf("peak %d in 200ms from %v\n", s.Peak, s.PeakAt)
	fmt.Printf("%.1f attempts per request, at most %d\n", s.AttemptsPerRequest(), s.MaxAttempts)
	for _, b := range s.Timeline {
		fmt.Printf("%v: %d accepted, %d down\n", b.Start, b.Accepted, b.Down)
	}
	// Output:
	// 4 attempts, 2 accepted, 2 rejected
	// peak 3 in 200ms from 0s
	// 2.0 attempts per request, at most 3
	// 0s: 1 accepted, 2 down
	// 200ms: 0 accepted, 0 down
	// 400ms: 1 accepted, 0 down
}

// Count every request a handler serves: the request ID and attempt number
// come from the headers retryhttp sends, the outcome from the answer.
func ExampleRecorder_Handler() {
	rec := lab.NewRecorder(time.Now())
	calls := 0
	h := rec.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		if calls == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	for attempt := range 2 {
		req := httptest.NewRequest("POST", "/orders", nil)
		req.Header.Set(lab.HeaderRequestID, "order-1")
		req.Header.Set(lab.HeaderAttempt, fmt.Sprint(attempt+1))
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	s := rec.Stats(0)
	fmt.Printf("%d attempts of %d request: %d accepted, %d failed\n", s.Total, s.Requests, s.Accepted, s.Failed)
	// Output:
	// 2 attempts of 1 request: 1 accepted, 1 failed
}

// A long-running counter keeps an hour of 200 ms windows and a bounded
// number of request IDs.
func ExampleWindowedRecorder() {
	start := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	rec, err := lab.NewWindowedRecorder(start, lab.WindowedConfig{Horizon: time.Hour})
	if err != nil {
		fmt.Println(err)
		return
	}
	for i := range 10 {
		rec.Record(start.Add(time.Duration(i)*30*time.Millisecond), fmt.Sprint("req-", i%5), i/5+1, lab.Accepted)
	}
	s := rec.Stats(false)
	fmt.Printf("%d attempts, %d requests, peak %d\n", s.Total, s.Requests, s.Peak)
	// Output:
	// 10 attempts, 5 requests, peak 7
}

// Run the lab's experiment from Go: two callers against a gateway down for
// 100 ms, retrying with exponential backoff and full jitter.
func ExampleRun() {
	res, err := lab.Run(context.Background(), lab.Options{
		Callers:    2,
		Strategies: []string{"expo-full"},
		Outage:     100 * time.Millisecond,
		Latency:    time.Millisecond,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range res.Strategies {
		fmt.Printf("%s: %d of %d callers accepted, %d attempts accepted\n",
			s.Strategy, s.Accepted, s.Callers, s.Gateway.Accepted)
	}
	fmt.Println("checks:", res.Check())
	// Output:
	// expo-full: 2 of 2 callers accepted, 2 attempts accepted
	// checks: <nil>
}
