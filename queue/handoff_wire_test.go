package queue_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/retry"
)

// TestHandoffWireIDCannotPreempt: a client chooses its Stagger-Request-Id,
// so a handoff once enqueued under it as sent, and a client reusing
// another's ID enqueued first — the other's handoff was then deduplicated
// away. An ID from the wire is no longer taken as the job ID: the handler
// scopes it to a caller it knows (ScopedID), and two callers sending the
// same ID get two jobs.
func TestHandoffWireIDCannotPreempt(t *testing.T) {
	ctx := context.Background()
	q, err := queue.New(queue.NewMemoryStore(), queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, src := range []string{"http", "grpc", "kafka", "rabbitmq", "jetstream", ""} {
		d := retry.Delivery{ID: "order-7", Attempt: 1, MaxAttempts: 3, Source: src}
		if _, err := queue.Handoff(d, queue.NewJob{Payload: []byte("x")}); !errors.Is(err, queue.ErrInvalid) || !strings.Contains(err.Error(), "NewJob.ID") {
			t.Errorf("source %q: a wire ID taken as the job ID (err %v)", src, err)
		}
	}
	enqueue := func(caller, payload string) string {
		d := retry.Delivery{ID: "order-7", Attempt: 1, MaxAttempts: 3, Source: "http"}
		id, err := queue.ScopedID(caller, d.ID)
		if err != nil {
			t.Fatal(err)
		}
		j, err := queue.Handoff(d, queue.NewJob{ID: id, Payload: []byte(payload)})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := q.Enqueue(ctx, j); err != nil {
			t.Fatal(err)
		}
		return j.ID
	}
	mallory, alice := enqueue("mallory", "forged"), enqueue("alice", "real")
	if mallory == alice {
		t.Fatalf("two callers, one job ID %q", alice)
	}
	if j, err := q.Get(ctx, alice); err != nil || string(j.Payload) != "real" {
		t.Errorf("alice's job: %v, payload %q", err, j.Payload)
	}
	// In-process IDs (retry.Handler.Run, a queue job) are the server's own.
	for _, src := range []string{"retry", "queue"} {
		j, err := queue.Handoff(retry.Delivery{ID: "mine", Source: src}, queue.NewJob{})
		if err != nil || j.ID != "mine" {
			t.Errorf("source %q: job ID %q, %v; want mine", src, j.ID, err)
		}
	}
}

func TestScopedID(t *testing.T) {
	a, _ := queue.ScopedID("a:b", "c")
	b, _ := queue.ScopedID("a", "b:c")
	if a == b {
		t.Errorf("scopes a:b + c and a + b:c collide: %q", a)
	}
	for _, c := range [][2]string{{"", "x"}, {"x", ""}, {"x", strings.Repeat("y", queue.MaxIDLen)}, {"a\nb", "x"}, {"x", "\xff"}} {
		if id, err := queue.ScopedID(c[0], c[1]); !errors.Is(err, queue.ErrInvalid) {
			t.Errorf("ScopedID(%q, %.20q) = %q, %v; want ErrInvalid", c[0], c[1], id, err)
		}
	}
	if id, err := queue.ScopedID("tenant-4", "order-7"); err != nil || queue.ValidateID(id) != nil {
		t.Errorf("ScopedID = %q, %v", id, err)
	}
}
