package retryhttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retryhttp"
)

// countingServer answers each request with status(path) and counts the
// attempts per path.
func countingServer(status func(path string) int) (*httptest.Server, func(path string) int) {
	var mu sync.Mutex
	seen := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.URL.Path]++
		mu.Unlock()
		w.WriteHeader(status(r.URL.Path))
	}))
	return srv, func(path string) int {
		mu.Lock()
		defer mu.Unlock()
		return seen[path]
	}
}

// Routes gives endpoints their own classifier. By default a 500 is of no
// class: handed to the caller after one attempt. Here the payments API's
// 500s are known to be transient, so requests under /payments/ retry them;
// every other path keeps the default.
func ExampleRoutes() {
	srv, attempts := countingServer(func(string) int { return http.StatusInternalServerError })
	defer srv.Close()

	tr := retryhttp.New(nil, &retry.Policy{MaxAttempts: 3, Schedule: backoff.Constant(time.Millisecond)})
	tr.Classify = retryhttp.Routes(nil, retryhttp.Route{
		PathPrefix: "/payments/",
		Classify:   retryhttp.Statuses(nil, map[int]retry.Class{500: retry.ClassRetryable}),
	})
	client := &http.Client{Transport: tr}

	for _, path := range []string{"/payments/charge", "/search"} {
		resp, err := client.Get(srv.URL + path)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Printf("%s: %d after %d attempts\n", path, resp.StatusCode, attempts(path))
	}
	// Output:
	// /payments/charge: 500 after 3 attempts
	// /search: 500 after 1 attempts
}

// Statuses overrides single statuses of a classifier. By default a 500 is
// of no class (handed to the caller after one attempt) and a 503 is
// retryable. For a service whose 500s are transient and whose 503 means
// "closed for maintenance, do not insist", swap them.
func ExampleStatuses() {
	srv, attempts := countingServer(func(path string) int { // /<client>/<status>
		status, _ := strconv.Atoi(path[strings.LastIndexByte(path, '/')+1:])
		return status
	})
	defer srv.Close()

	fast := &retry.Policy{MaxAttempts: 3, Schedule: backoff.Constant(time.Millisecond)}
	swapped := retryhttp.New(nil, fast)
	swapped.Classify = retryhttp.Statuses(nil, map[int]retry.Class{
		500: retry.ClassRetryable,
		503: retry.ClassUnknown, // an answer: returned to the caller at once
	})
	for _, c := range []struct {
		name string
		tr   http.RoundTripper
	}{{"default", retryhttp.New(nil, fast)}, {"swapped", swapped}} {
		for _, status := range []string{"500", "503"} {
			path := "/" + c.name + "/" + status
			resp, err := (&http.Client{Transport: c.tr}).Get(srv.URL + path)
			if err != nil {
				fmt.Println(err)
				return
			}
			resp.Body.Close()
			fmt.Printf("%s: %d after %d attempts\n", c.name, resp.StatusCode, attempts(path))
		}
	}
	// Output:
	// default: 500 after 1 attempts
	// default: 503 after 3 attempts
	// swapped: 500 after 3 attempts
	// swapped: 503 after 1 attempts
}

// Guard makes the outermost stagger layer the owner of retries. An API
// behind a Guard calls a database service through its own retrying
// Transport; the client retries the API. Without the rule 3 attempts × 3
// attempts would reach the database 9 times; with it, the API's Transport
// makes one attempt per incoming attempt, so the database sees 3.
func ExampleGuard_singleOwner() {
	db, dbAttempts := countingServer(func(string) int { return http.StatusServiceUnavailable })
	defer db.Close()

	policy := &retry.Policy{MaxAttempts: 3, Schedule: backoff.Constant(time.Millisecond)}
	toDB := &http.Client{Transport: retryhttp.New(nil, policy)}
	api := httptest.NewServer(&retryhttp.Guard{Next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, _ := http.NewRequestWithContext(r.Context(), http.MethodGet, db.URL+"/rows", nil)
		resp, err := toDB.Do(req)
		if err != nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
	})})
	defer api.Close()

	resp, err := (&http.Client{Transport: retryhttp.New(nil, policy)}).Get(api.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Printf("client got %d; the database saw %d attempts\n", resp.StatusCode, dbAttempts("/rows"))
	// Output:
	// client got 503; the database saw 3 attempts
}
