package retryhttp_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retryhttp"
)

// TestTransportCarriesBudget: every attempt sends the logical request's
// attempt budget, and a call inside work that has a budget counts on
// from that work's attempts — up to min(the Policy's, what is left) —
// rather than starting the budget over.
func TestTransportCarriesBudget(t *testing.T) {
	var mu sync.Mutex
	var seen [][2]string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, [2]string{r.Header.Get(retryhttp.AttemptHeader), r.Header.Get(retryhttp.MaxAttemptsHeader)})
		mu.Unlock()
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	tr := retryhttp.New(nil, &retry.Policy{MaxAttempts: 4, Schedule: backoff.Constant(0)})
	call := func(ctx context.Context) ([][2]string, error) {
		mu.Lock()
		seen = nil
		mu.Unlock()
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
		resp, err := tr.RoundTrip(req)
		if resp != nil {
			resp.Body.Close()
		}
		mu.Lock()
		defer mu.Unlock()
		return append([][2]string(nil), seen...), err
	}
	want := func(from, to, budget int) [][2]string {
		var w [][2]string
		for n := from; n <= to; n++ {
			w = append(w, [2]string{strconv.Itoa(n), strconv.Itoa(budget)})
		}
		return w
	}
	check := func(name string, got, want [][2]string) {
		t.Helper()
		if len(got) != len(want) {
			t.Errorf("%s: sent %q, want %q", name, got, want)
			return
		}
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("%s: sent %q, want %q", name, got, want)
				return
			}
		}
	}
	got, _ := call(context.Background())
	check("a fresh call", got, want(1, 4, 4))

	// Work at attempt 2 of 5: the call makes 3, 4 (the Policy's 4 is the
	// smaller bound) and sends the work's budget.
	ctx := retry.Delivery{ID: "w-1", Attempt: 2, MaxAttempts: 5, Source: "queue"}.NewContext(context.Background())
	got, _ = call(ctx)
	check("work at 2 of 5", got, want(3, 4, 5))

	// Work at attempt 1 of 3: the work's budget is the smaller: 2, 3.
	ctx = retry.Delivery{ID: "w-2", Attempt: 1, MaxAttempts: 3, Source: "queue"}.NewContext(context.Background())
	got, _ = call(ctx)
	check("work at 1 of 3", got, want(2, 3, 3))

	// Work with no attempt left: nothing is sent.
	ctx = retry.Delivery{ID: "w-3", Attempt: 3, MaxAttempts: 3, Source: "queue"}.NewContext(context.Background())
	got, err := call(ctx)
	if len(got) != 0 || !errors.Is(err, retry.ErrExhausted) {
		t.Errorf("work with no attempt left: sent %q, error %v; want nothing sent and ErrExhausted", got, err)
	}
}

// TestGuardToTransportLedger: a Guard-ed handler that calls further down
// sends one attempt numbered as its caller's, with its caller's budget.
func TestGuardToTransportLedger(t *testing.T) {
	var got [2]string
	bottom := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = [2]string{r.Header.Get(retryhttp.AttemptHeader), r.Header.Get(retryhttp.MaxAttemptsHeader)}
	}))
	defer bottom.Close()
	client := &http.Client{Transport: retryhttp.New(nil, &retry.Policy{MaxAttempts: 9, Timeout: 5 * time.Second})}
	mid := httptest.NewServer(&retryhttp.Guard{Next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, _ := http.NewRequestWithContext(r.Context(), "GET", bottom.URL, nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
	})})
	defer mid.Close()
	req, _ := http.NewRequest("GET", mid.URL, nil)
	req.Header.Set(retryhttp.AttemptHeader, "3")
	req.Header.Set(retryhttp.MaxAttemptsHeader, "5")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got != [2]string{"3", "5"} {
		t.Errorf("the bottom saw attempt %q of %q, want 3 of 5", got[0], got[1])
	}
}

// TestTransportOutsideLedger: a context whose Delivery has no budget
// calls under the Policy alone, even inside the last attempt of work.
func TestTransportOutsideLedger(t *testing.T) {
	var n int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n++
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	tr := retryhttp.New(nil, &retry.Policy{MaxAttempts: 2, Schedule: backoff.Constant(0)})
	work := retry.Delivery{ID: "w", Attempt: 3, MaxAttempts: 3, Source: "queue"}
	ctx := retry.Delivery{ID: work.ID}.NewContext(work.NewContext(context.Background()))
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if n != 2 {
		t.Errorf("sent %d requests, want the Policy's 2", n)
	}
}
