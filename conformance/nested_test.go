package conformance_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retryhttp"
)

// TestNestedCallInJob: the rule for a call a job's handler makes
// (docs/architecture.md, "Calls inside a job"). A job with a budget of 5
// attempts calls a dependency that always fails, and fails in turn.
//
// By default the call is the work's next hop: on job attempt k its tries
// are attempts k+1 … 5, so the dependency gets 4+3+2+1 = 10 sends and the
// job's last attempt sends nothing (retry.ErrExhausted). Marked as one
// attempt of the job (retryhttp.WithUpstreamAttempt(ctx, d.Attempt)), the
// call is sent once per job attempt, numbered as that attempt, the last
// included: 5 sends for a budget of 5, attempts 1 … 5.
func TestNestedCallInJob(t *testing.T) {
	for _, c := range []struct {
		name     string
		owned    bool // the job owns the call's retries
		want     []int
		refusals int
	}{
		{"NextHop", false, []int{2, 3, 4, 5, 3, 4, 5, 4, 5, 5}, 1},
		{"OneAttemptOfTheJob", true, []int{1, 2, 3, 4, 5}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			var (
				mu   sync.Mutex
				sent []int
			)
			dep := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n, _ := strconv.Atoi(r.Header.Get(retryhttp.AttemptHeader))
				mu.Lock()
				sent = append(sent, n)
				mu.Unlock()
				w.WriteHeader(http.StatusServiceUnavailable)
			}))
			defer dep.Close()
			client := &http.Client{Transport: retryhttp.New(nil, &retry.Policy{MaxAttempts: own, Schedule: tick})}
			now := time.Now().UnixMilli()
			q, err := queue.New(queue.NewMemoryStore(), queue.Config{Policy: &retry.Policy{MaxAttempts: own, Schedule: tick},
				Now: func() int64 { return now }})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if _, _, err := q.Enqueue(ctx, queue.NewJob{ID: "job", MaxAttempts: budget}); err != nil {
				t.Fatal(err)
			}
			refusals := 0
			h := func(ctx context.Context, _ []byte) error {
				if c.owned {
					d, _ := retry.DeliveryFrom(ctx)
					ctx = retryhttp.WithUpstreamAttempt(ctx, d.Attempt)
				}
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, dep.URL, nil)
				resp, err := client.Do(req)
				if errors.Is(err, retry.ErrExhausted) {
					refusals++
				} else if err == nil {
					resp.Body.Close()
				}
				return retry.Retryable(errors.New("the dependency failed"))
			}
			for range budget {
				j, err := q.RunOnce(ctx, h)
				if err != nil || j == nil {
					t.Fatalf("RunOnce: job %v, %v", j, err)
				}
				now += 60_000
			}
			j, err := q.Get(ctx, "job")
			if err != nil || j.State != queue.Dead || j.Attempts != budget {
				t.Fatalf("job %+v, %v: want dead after %d attempts", j, err, budget)
			}
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(sent, c.want) || refusals != c.refusals {
				t.Errorf("the dependency got attempts %v with %d refused calls, want %v and %d", sent, refusals, c.want, c.refusals)
			}
		})
	}
}
