package retryhttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/staggerhq/stagger/retryhttp"
)

// A client cannot give a handler a deadline further away than the server
// allows: a Stagger-Timeout-Ms beyond Guard.MaxTimeout counts as
// MaxTimeout, and a malformed attempt number is counted, not trusted.
func ExampleGuard_maxTimeout() {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		dl, _ := r.Context().Deadline()
		_, marked := retryhttp.UpstreamAttempt(r.Context())
		fmt.Println("deadline within 30s:", time.Until(dl) <= 30*time.Second, "attempt trusted:", marked)
	})
	guard := &retryhttp.Guard{Next: mux, MaxTimeout: 30 * time.Second}

	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set(retryhttp.TimeoutHeader, "999999999999") // 31.7 years
	r.Header.Set(retryhttp.AttemptHeader, "9223372036854775807")
	guard.ServeHTTP(httptest.NewRecorder(), r)
	fmt.Println("malformed:", guard.Stats().Malformed)
	// Output:
	// deadline within 30s: true attempt trusted: false
	// malformed: 1
}
