package ui_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/budget"
	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/ui"
)

// Mount the dashboard under a prefix, give a policy its hooks and show its
// budget; Run would sample every second, here one Sample is taken by hand.
func ExampleDashboard() {
	d, _ := ui.New(ui.Config{})
	hooks, _ := d.Hooks("payments")
	tb := &budget.TokenBucket{}
	d.Budget("payments", tb)
	mux := http.NewServeMux()
	mux.Handle("/debug/stagger/", http.StripPrefix("/debug/stagger", d))
	// go d.Run(ctx)

	p := &retry.Policy{MaxAttempts: 3, Schedule: backoff.Constant(0), Hooks: hooks, Budget: tb}
	retry.Do(context.Background(), p, func(context.Context) error { return retry.Retryable(errors.New("503")) })
	d.Sample(time.Now())

	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/debug/stagger/api/dependencies", nil))
	var deps []ui.Dependency
	json.Unmarshal(rec.Body.Bytes(), &deps)
	s := deps[0].Now
	fmt.Println(deps[0].Name, s.AttemptsPerSec, s.RetriesPerSec, s.Amplification, s.Level, deps[0].GiveUps)
	// Output: payments 3 2 3 0.9 map[exhausted:1]
}

// Show a durable queue's jobs: every named queue of its store, counted by
// state, with a job search and the operator's actions.
func ExampleNewQueues() {
	q, _ := queue.New(queue.NewMemoryStore(), queue.Config{})
	q.Enqueue(context.Background(), queue.NewJob{ID: "order-1"})
	q.Enqueue(context.Background(), queue.NewJob{ID: "mail-1", Queue: "mail"})
	d, _ := ui.New(ui.Config{Queues: ui.NewQueues(q), ReadOnly: true})
	mux := http.NewServeMux()
	mux.Handle("/ops/", http.StripPrefix("/ops", d))
	// go d.Run(ctx)
	d.SampleQueues(context.Background(), time.Now())

	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/ops/api/queues", nil))
	var st struct{ Queues []ui.QueueInfo }
	json.Unmarshal(rec.Body.Bytes(), &st)
	for _, x := range st.Queues {
		fmt.Println(x.Name, "due", x.Due, "paused", x.Paused)
	}
	// Output:
	// default due 1 paused false
	// mail due 1 paused false
}
