// Package brokertest is the conformance suite every stagger broker adapter
// (RabbitMQ, Kafka, NATS JetStream) passes. An adapter's test supplies a
// [Factory] that builds a broker-backed pipeline — a producer of original
// messages and a retrying consumer running the given handler — on a topology
// of its own; [Run] drives it through the contract:
//
//   - success: acknowledged after one attempt, nothing dead-lettered;
//   - transient then success: attempts 1, 2, 3 on the same ID, each after
//     the delay the shared decision chose, never earlier;
//   - permanent: dead-lettered at once with attempt, reason, error, origin
//     and first-failure time;
//   - unknown (an error of no class): dead-lettered at once, reason unknown;
//   - exhausted: dead-lettered after MaxAttempts attempts;
//   - handler runs are counted once the broker has settled (Pipeline.Settle:
//     nothing left to deliver): a success, a permanent or an unknown
//     failure ran once, an exhausted message exactly MaxAttempts times,
//     nothing ran after the dead letter, and each message was
//     dead-lettered once;
//   - delay never early, also for After(d) errors;
//   - crash between forward (to a delay tier or the DLQ) and
//     acknowledgement: a duplicate, never a loss;
//   - inbox: a crash after the effect and before the acknowledgement
//     redelivers the message; a queue.Inbox keyed by message ID applies
//     the effect once.
//
// One handler value is used throughout: the suite first runs it in-process
// with retry.Handler.Run and then on the broker, and requires the same
// attempts and the same outcome from both.
//
// Time asserts are one-sided ("not earlier than"); waits for the broker use
// generous timeouts that only bound a hung test.
package brokertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/retry"
)

// Setup is what the suite asks a Factory to build.
type Setup struct {
	// Name is unique to this test: use it for every queue, topic, stream
	// and consumer name, so tests run in parallel and repeatedly.
	Name string
	// Handler is the handler the consumer must run, unchanged.
	Handler retry.Handler
	// Policy is the retry policy the consumer must decide with.
	Policy *retry.Policy
	// Tiers are the delay tiers to declare (short ones, for tests).
	Tiers broker.Tiers
	// Inbox, if not nil, must wrap the handler keyed by message ID.
	Inbox queue.Inbox
	// Trace, if not nil, must be the consumer's Options.Trace.
	Trace retry.Propagator
	// Crash asks the pipeline to crash once after it forwarded a message
	// (to a delay tier or the DLQ, confirmed by the broker) and before the
	// broker learned the original was acknowledged, and to let a fresh
	// consumer take over, as a restarted process would. A broker whose
	// retries are not forwards (JetStream's NakWithDelay) crashes after the
	// first outcome it applied instead. One that can hold a retry in
	// process unacknowledged (RabbitMQ's Options.WaitInPlace) also crashes
	// once a retry is held, if that comes first: the held delivery is
	// redelivered with the state it was last forwarded with.
	Crash bool
	// CrashAfterSuccess asks the pipeline to crash once after the handler
	// succeeded and before the acknowledgement reached the broker.
	CrashAfterSuccess bool
}

// Pipeline is a broker-backed consumer and producer built by a Factory. The
// Factory registers its own cleanup (consumers stopped, topology deleted)
// with t.Cleanup.
type Pipeline interface {
	// Publish sends an original message with the given ID.
	Publish(ctx context.Context, id string, payload []byte) error
	// NextDeadLetter blocks until the next dead letter arrives in the DLQ
	// and returns it decoded, or returns ctx's error.
	NextDeadLetter(ctx context.Context) (broker.DeadLetter, error)
	// Settle blocks until the broker will deliver nothing more of what was
	// published: no message waiting in the pipeline's queues, topics or
	// delay tiers, none delivered and not yet acknowledged (JetStream: the
	// consumer's pending and ack-pending counts are 0; Kafka: every group
	// committed up to the end of its topic). It returns ctx's error when
	// that does not happen in time. The suite counts handler runs after it.
	Settle(ctx context.Context) error
}

// Factory builds a Pipeline for s. It calls t.Skip or t.Fatal itself when
// the broker is unreachable.
type Factory func(t *testing.T, s Setup) Pipeline

// Tiers are the short tiers the suite runs with.
var Tiers = broker.Tiers{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond}

// Policy is the suite's policy: 3 attempts, waits 200 ms then 400 ms, After
// requests honoured up to the longest tier.
func Policy() *retry.Policy {
	return &retry.Policy{
		MaxAttempts: 3,
		Schedule:    backoff.Sequence(Tiers),
		MaxAfter:    Tiers[len(Tiers)-1],
		ClampAfter:  true,
	}
}

// waitLimit bounds every wait for the broker: a hung test fails after it.
// It is not a performance assert.
const waitLimit = 60 * time.Second

// Run runs the conformance suite against the pipelines f builds. Subtests
// run in parallel, each on its own topology.
func Run(t *testing.T, f Factory) {
	rec := newRecorder()
	h := rec.Handler() // the one handler value, in-process and on the broker
	prefix := uniquePrefix()

	cases := []struct {
		name    string
		payload string
	}{
		{"Success", "ok"},
		{"TransientThenSuccess", "transient 2"},
		{"Permanent", "permanent"},
		{"Unknown", "unknown"},
		{"Exhausted", "always"},
		{"AfterNeverEarly", "after 500ms 1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			id := prefix + "-" + c.name
			want := inProcess(t, rec, h, id, c.payload)
			p := f(t, Setup{Name: id, Handler: h, Policy: Policy(), Tiers: Tiers})
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			published := time.Now()
			if err := p.Publish(ctx, id, []byte(c.payload)); err != nil {
				t.Fatalf("publish: %v", err)
			}
			switch c.payload {
			case "permanent", "unknown":
				if want.attempts != 1 {
					t.Fatalf("retry.Handler.Run ran %q %d times, want once", c.payload, want.attempts)
				}
			case "always":
				if want.attempts != Policy().MaxAttempts {
					t.Fatalf("retry.Handler.Run ran %q %d times, want MaxAttempts = %d", c.payload, want.attempts, Policy().MaxAttempts)
				}
			}
			got := rec.wait(t, ctx, id, want.attempts)
			checkAttempts(t, got, want)
			checkNeverEarly(t, got, c.payload)
			if want.reason != "" {
				dl := next(t, ctx, p)
				checkDeadLetter(t, dl, id, c.payload, want, got, published, time.Now())
			}
			// A permanent sentinel published now must be the next dead
			// letter: the message was not dead-lettered (again).
			sentinel := id + "-sentinel"
			if err := p.Publish(ctx, sentinel, []byte("permanent")); err != nil {
				t.Fatalf("publish sentinel: %v", err)
			}
			if dl := next(t, ctx, p); dl.ID != sentinel {
				t.Fatalf("next dead letter is %q (reason %q), want the sentinel %q: %s was dead-lettered again, or after a success", dl.ID, dl.Reason, sentinel, id)
			}
			if err := p.Settle(ctx); err != nil {
				t.Fatalf("the broker did not settle: %v", err)
			}
			// Nothing is left to deliver: every run has happened.
			if n := len(rec.attempts(id)); n != want.attempts {
				t.Errorf("handler ran %d times for %s, want %d as retry.Handler.Run (%s)", n, id, want.attempts, rec.describe(id))
			}
			if n := len(rec.attempts(sentinel)); n != 1 {
				t.Errorf("handler ran %d times for the permanent sentinel, want once (%s)", n, rec.describe(sentinel))
			}
			if want.reason == "" {
				if n := rec.successes(id); n != 1 {
					t.Errorf("handler succeeded %d times for %s, want 1", n, id)
				}
			}
		})
	}

	t.Run("CrashBetweenForwardAndAck", func(t *testing.T) {
		t.Parallel()
		id := prefix + "-crash"
		p := f(t, Setup{Name: id, Handler: h, Policy: Policy(), Tiers: Tiers, Crash: true})
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		if err := p.Publish(ctx, id, []byte("transient 1")); err != nil {
			t.Fatalf("publish: %v", err)
		}
		// Without a crash: two deliveries (a failure, a success). The crash
		// leaves the original unacknowledged, so it is delivered again (a
		// duplicate), and the message still succeeds (not a loss).
		rec.waitFor(t, ctx, func() bool { return rec.successes(id) >= 1 && len(rec.attempts(id)) >= 3 },
			func() string {
				return fmt.Sprintf("want a success and >= 3 deliveries of %s after a crash at the seam (a duplicate, not a loss); got %s", id, rec.describe(id))
			})
		checkNeverEarly(t, rec.attempts(id), "transient 1")
	})

	t.Run("CrashBeforeDeadLetterAck", func(t *testing.T) {
		t.Parallel()
		id := prefix + "-crashdlq"
		p := f(t, Setup{Name: id, Handler: h, Policy: Policy(), Tiers: Tiers, Crash: true})
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		if err := p.Publish(ctx, id, []byte("permanent")); err != nil {
			t.Fatalf("publish: %v", err)
		}
		dl := next(t, ctx, p) // not lost: dead-lettered (once or, duplicated, twice)
		if dl.ID != id || dl.Reason != "permanent" {
			t.Fatalf("dead letter %+v, want %s with reason permanent", dl, id)
		}
		rec.waitFor(t, ctx, func() bool { return len(rec.attempts(id)) >= 2 },
			func() string {
				return fmt.Sprintf("want the crash to redeliver %s (>= 2 deliveries); got %s", id, rec.describe(id))
			})
	})

	t.Run("InboxAppliesOnce", func(t *testing.T) {
		t.Parallel()
		id := prefix + "-inbox"
		inbox := &countingInbox{Inbox: queue.NewMemoryInbox(), rec: rec}
		p := f(t, Setup{Name: id, Handler: h, Policy: Policy(), Tiers: Tiers, CrashAfterSuccess: true, Inbox: inbox})
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		if err := p.Publish(ctx, id, []byte("ok")); err != nil {
			t.Fatalf("publish: %v", err)
		}
		// The effect was applied, the acknowledgement lost with the crash:
		// the message comes back, and the inbox recognises it.
		rec.waitFor(t, ctx, func() bool { return inbox.duplicates(id) >= 1 },
			func() string {
				return fmt.Sprintf("want the crash's redelivery of %s to reach the inbox; inbox saw %d duplicates; handler: %s", id, inbox.duplicates(id), rec.describe(id))
			})
		if n := rec.successes(id); n != 1 {
			t.Errorf("with an inbox the effect of %s was applied %d times, want once (%s)", id, n, rec.describe(id))
		}
	})
}

// outcome is what a message ended with.
type outcome struct {
	attempts int
	reason   string // "" for success
	err      string // last error text
}

// inProcess runs h under retry.Handler.Run with the suite's policy (waits
// skipped by an instant clock) and returns the outcome the broker must
// reproduce.
func inProcess(t *testing.T, rec *recorder, h retry.Handler, id, payload string) outcome {
	t.Helper()
	pol := Policy()
	pol.Clock = instantClock{}
	local := "retry.Handler.Run:" + id
	err := h.Run(context.Background(), pol, local, []byte(payload))
	got := rec.attempts(local)
	o := outcome{attempts: len(got)}
	for i, a := range got {
		if a.d.Attempt != i+1 || a.d.Source != "retry" || a.d.ID != local {
			t.Fatalf("retry.Handler.Run attempt %d: delivery %+v", i+1, a.d)
		}
	}
	if err != nil {
		o.reason = retry.UnknownError.String()
		var re *retry.Error
		if errors.As(err, &re) {
			o.reason = re.Reason.String()
		}
		o.err = got[len(got)-1].err.Error()
	}
	return o
}

func checkAttempts(t *testing.T, got []attempt, want outcome) {
	t.Helper()
	if len(got) != want.attempts {
		t.Fatalf("broker made %d attempts, retry.Handler.Run made %d with the same handler and policy", len(got), want.attempts)
	}
	for i, a := range got {
		if a.d.Attempt != i+1 {
			t.Errorf("attempt %d: Delivery.Attempt = %d", i+1, a.d.Attempt)
		}
		if a.d.MaxAttempts != Policy().MaxAttempts {
			t.Errorf("attempt %d: Delivery.MaxAttempts = %d, want %d", i+1, a.d.MaxAttempts, Policy().MaxAttempts)
		}
		if a.d.Source == "" || a.d.Source == "retry" {
			t.Errorf("attempt %d: Delivery.Source = %q, want the adapter's name", i+1, a.d.Source)
		}
	}
	last := got[len(got)-1]
	if (last.err == nil) != (want.reason == "") {
		t.Errorf("broker's last attempt error %v; retry.Handler.Run gave up with %q", last.err, want.reason)
	}
}

// checkNeverEarly requires every attempt k+1 to start no sooner than the
// delay the shared decision chose after attempt k failed. When a crash
// duplicated a message, attempt k has several deliveries; attempt k+1 is
// measured from the earliest failure of attempt k, which bounds them all.
func checkNeverEarly(t *testing.T, got []attempt, payload string) {
	t.Helper()
	first := map[int]attempt{} // attempt number → its earliest failure
	for _, a := range got {
		if f, ok := first[a.d.Attempt]; a.err != nil && (!ok || a.end.Before(f.end)) {
			first[a.d.Attempt] = a
		}
	}
	pol := Policy()
	var prev time.Duration
	delays := map[int]time.Duration{}
	for k := 1; ; k++ {
		a, ok := first[k]
		if !ok {
			break
		}
		dec := pol.Decide(k, a.err, a.end, time.Time{}, prev)
		delays[k], prev = dec.Delay, dec.Delay
	}
	for _, b := range got {
		k := b.d.Attempt - 1
		if k < 1 {
			continue
		}
		a, ok := first[k]
		if !ok {
			// Attempt k succeeded and its acknowledgement was lost (a
			// crash): a broker that counts deliveries (JetStream) calls the
			// redelivery attempt k+1. No delay was decided for it.
			if !slices.ContainsFunc(got, func(x attempt) bool { return x.d.Attempt == k }) {
				t.Errorf("attempt %d of %q ran without an attempt %d before it", b.d.Attempt, payload, k)
			}
			continue
		}
		if gap := b.start.Sub(a.end); gap < delays[k] {
			t.Errorf("attempt %d of %q started %v after attempt %d failed: earlier than the decided delay %v",
				b.d.Attempt, payload, gap, k, delays[k])
		}
	}
}

func checkDeadLetter(t *testing.T, dl broker.DeadLetter, id, payload string, want outcome, got []attempt, published, received time.Time) {
	t.Helper()
	if dl.ID != id {
		t.Fatalf("dead letter ID = %q, want %q", dl.ID, id)
	}
	if string(dl.Payload) != payload {
		t.Errorf("dead letter payload = %q, want %q", dl.Payload, payload)
	}
	if dl.Reason != want.reason {
		t.Errorf("dead letter reason = %q, want %q (as retry.Handler.Run)", dl.Reason, want.reason)
	}
	if dl.Attempts != want.attempts {
		t.Errorf("dead letter attempt header = %d, want %d", dl.Attempts, want.attempts)
	}
	if dl.Error != want.err {
		t.Errorf("dead letter error = %q, want %q", dl.Error, want.err)
	}
	if dl.Origin == "" {
		t.Error("dead letter has no origin (original destination) header")
	}
	// First-failure time: stamped by the consumer after the first
	// attempt's handler returned and before anything that follows it (the
	// second attempt, or the dead letter read), stored in whole ms.
	upper := received
	if len(got) > 1 {
		upper = got[1].start
	}
	if dl.FirstFailure.Before(published.Add(-time.Millisecond)) || dl.FirstFailure.After(upper.Add(time.Millisecond)) {
		t.Errorf("dead letter first-failure time %v is not within [publish %v, the next attempt or the dead letter's read %v]",
			dl.FirstFailure.Format(time.RFC3339Nano), published.Format(time.RFC3339Nano), upper.Format(time.RFC3339Nano))
	}
}

func next(t *testing.T, ctx context.Context, p Pipeline) broker.DeadLetter {
	t.Helper()
	dl, err := p.NextDeadLetter(ctx)
	if err != nil {
		t.Fatalf("waiting for a dead letter: %v", err)
	}
	return dl
}

// Script is the suite handler's behaviour, read from the payload:
//
//	ok               succeed
//	transient N      Retryable error on attempts 1..N, then succeed
//	after D N        After(err, D) on attempts 1..N, then succeed
//	always           Retryable error on every attempt
//	permanent        Permanent error
//	unknown          an error of no class
func script(payload []byte, attempt int) error {
	f := strings.Fields(string(payload))
	if len(f) == 0 {
		return retry.Permanent(errors.New("brokertest: empty script"))
	}
	n := func(i int) int {
		if len(f) <= i {
			return 0
		}
		v, _ := strconv.Atoi(f[i])
		return v
	}
	switch f[0] {
	case "ok":
		return nil
	case "transient":
		if attempt <= n(1) {
			return retry.Retryable(fmt.Errorf("transient failure on attempt %d", attempt))
		}
		return nil
	case "after":
		d, _ := time.ParseDuration(f[1])
		if attempt <= n(2) {
			return retry.After(fmt.Errorf("busy on attempt %d, retry after %v", attempt, d), d)
		}
		return nil
	case "always":
		return retry.Retryable(fmt.Errorf("still failing on attempt %d", attempt))
	case "permanent":
		return retry.Permanent(errors.New("malformed order: no customer"))
	case "unknown":
		return errors.New("something unclassified went wrong")
	}
	return retry.Permanent(fmt.Errorf("brokertest: unknown script %q", f[0]))
}

type attempt struct {
	d          retry.Delivery
	start, end time.Time
	err        error
}

// recorder is the suite's handler and its log of attempts per message ID.
type recorder struct {
	mu      sync.Mutex
	log     map[string][]attempt
	changed chan struct{}
}

func newRecorder() *recorder {
	return &recorder{log: map[string][]attempt{}, changed: make(chan struct{})}
}

// Handler returns the one handler value of a Run.
func (r *recorder) Handler() retry.Handler {
	return func(ctx context.Context, payload []byte) error {
		start := time.Now()
		d, ok := retry.DeliveryFrom(ctx)
		if !ok {
			return retry.Permanent(errors.New("brokertest: no retry.Delivery in the handler's context"))
		}
		err := script(payload, d.Attempt)
		end := time.Now()
		r.mu.Lock()
		r.log[d.ID] = append(r.log[d.ID], attempt{d: d, start: start, end: end, err: err})
		r.mu.Unlock()
		r.notify()
		return err
	}
}

// notify wakes every waitFor.
func (r *recorder) notify() {
	r.mu.Lock()
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

func (r *recorder) attempts(id string) []attempt {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]attempt(nil), r.log[id]...)
}

func (r *recorder) successes(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, a := range r.log[id] {
		if a.err == nil {
			n++
		}
	}
	return n
}

func (r *recorder) describe(id string) string {
	var b strings.Builder
	for _, a := range r.attempts(id) {
		fmt.Fprintf(&b, "[attempt %d err=%v] ", a.d.Attempt, a.err)
	}
	if b.Len() == 0 {
		return "no attempts"
	}
	return b.String()
}

// waitFor blocks until cond holds, failing the test with msg() when ctx ends.
func (r *recorder) waitFor(t *testing.T, ctx context.Context, cond func() bool, msg func() string) {
	t.Helper()
	for {
		r.mu.Lock()
		ch := r.changed
		r.mu.Unlock()
		if cond() {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatal(msg())
		}
	}
}

// wait waits until id has n attempts and returns them.
func (r *recorder) wait(t *testing.T, ctx context.Context, id string, n int) []attempt {
	t.Helper()
	r.waitFor(t, ctx, func() bool { return len(r.attempts(id)) >= n },
		func() string { return fmt.Sprintf("want %d attempts of %s; got %s", n, id, r.describe(id)) })
	return r.attempts(id)
}

// countingInbox counts the duplicates an Inbox reports.
type countingInbox struct {
	queue.Inbox
	rec  *recorder // notified on every duplicate
	mu   sync.Mutex
	dups map[string]int
}

func (c *countingInbox) Process(ctx context.Context, id string, fn func(context.Context) error) (bool, error) {
	dup, err := c.Inbox.Process(ctx, id, fn)
	if dup {
		c.mu.Lock()
		if c.dups == nil {
			c.dups = map[string]int{}
		}
		c.dups[id]++
		c.mu.Unlock()
		c.rec.notify()
	}
	return dup, err
}

func (c *countingInbox) duplicates(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dups[id]
}

// instantClock makes retry.Handler.Run's waits end at once; decisions still
// see the real time.
type instantClock struct{}

func (instantClock) Now() time.Time { return time.Now() }
func (instantClock) After(time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	ch <- time.Now()
	return ch
}

// uniquePrefix names one Run's topology apart from every other run's.
func uniquePrefix() string {
	return "stg" + strconv.FormatInt(time.Now().UnixNano()%1e12, 36)
}
