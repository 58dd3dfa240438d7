package brokertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/retry"
)

// RedrivePipeline is a broker-backed consumer whose dead letters stay in
// the DLQ, and the means to redrive them.
type RedrivePipeline interface {
	// Publish sends an original message with the given ID.
	Publish(ctx context.Context, id string, payload []byte) error
	// WaitDeadLetters blocks until n messages were dead-lettered.
	WaitDeadLetters(ctx context.Context, n int) error
	// Source opens the adapter's RedriveSource on the DLQ, and the function
	// that closes it.
	Source(ctx context.Context) (broker.RedriveSource, func(), error)
	// Settle is Pipeline.Settle.
	Settle(ctx context.Context) error
}

// TracePublisher is implemented by a pipeline that can publish a message
// with a W3C trace context (the traceparent and tracestate headers).
// RunRedrive then publishes one of its messages so, with Setup.Trace set,
// and checks that every handler run of it, before and after the redrive,
// ran in that trace context: the dead letter and its redrive kept the
// headers.
type TracePublisher interface {
	PublishTraced(ctx context.Context, id string, payload []byte, traceparent, tracestate string) error
}

// RedriveFactory builds a RedrivePipeline running s.Handler, as Factory.
type RedriveFactory func(t *testing.T, s Setup) RedrivePipeline

// RunRedrive dead-letters three messages while the handler is broken, fixes
// it, and redrives them with broker.Redrive through the adapter's source:
//
//   - a dry run reports all three, with their origin, and moves nothing;
//   - a reason filter that matches none moves nothing;
//   - a run killed between a republish and its removal (AfterRepublish)
//     leaves that message in the DLQ: the next run moves all three again;
//   - a run after that finds nothing to read;
//   - once the broker settled, every message succeeded once, the killed one
//     once or twice (a duplicate, never a loss), each under its original ID.
func RunRedrive(t *testing.T, f RedriveFactory) {
	var (
		broken atomic.Bool
		mu     sync.Mutex
		ok     = map[string]int{}
		traces = map[string][]string{}
	)
	broken.Store(true)
	h := func(ctx context.Context, _ []byte) error {
		d, _ := retry.DeliveryFrom(ctx)
		tc := traceOf(ctx)
		mu.Lock()
		traces[d.ID] = append(traces[d.ID], tc)
		mu.Unlock()
		if broken.Load() {
			return retry.Permanent(errors.New("dependency rejected it"))
		}
		mu.Lock()
		ok[d.ID]++
		mu.Unlock()
		return nil
	}
	prefix := uniquePrefix()
	p := f(t, Setup{Name: prefix + "-redrive", Handler: h, Policy: Policy(), Tiers: Tiers, Trace: Trace{}})
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	ids := []string{prefix + "-a", prefix + "-b", prefix + "-c"}
	tp, traced := p.(TracePublisher)
	for i, id := range ids {
		var err error
		if traced && i == 0 {
			err = tp.PublishTraced(ctx, id, []byte("x"), TraceParent, TraceState)
		} else {
			err = p.Publish(ctx, id, []byte("x"))
		}
		if err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	if err := p.WaitDeadLetters(ctx, len(ids)); err != nil {
		t.Fatalf("waiting for %d dead letters: %v", len(ids), err)
	}
	broken.Store(false)

	redrive := func(o broker.RedriveOptions) (broker.RedriveResult, []broker.RedriveEvent, error) {
		t.Helper()
		src, closeSrc, err := p.Source(ctx)
		if err != nil {
			t.Fatalf("open the redrive source: %v", err)
		}
		defer closeSrc()
		var evs []broker.RedriveEvent
		o.Report = func(e broker.RedriveEvent) { evs = append(evs, e) }
		res, err := broker.Redrive(ctx, src, o)
		return res, evs, err
	}
	res, evs, err := redrive(broker.RedriveOptions{Rate: 1000, DryRun: true, Reasons: []string{"permanent"}})
	if err != nil || res.Matched != 3 || res.Moved != 0 || len(evs) != 3 {
		t.Fatalf("dry run: %+v, %v, %d events; want 3 matched, none moved", res, err, len(evs))
	}
	for _, e := range evs {
		if e.Moved || e.To == "" || e.Reason != "permanent" {
			t.Errorf("dry run event %+v: want not moved, an origin, reason permanent", e)
		}
	}
	if res, _, err := redrive(broker.RedriveOptions{Rate: 1000, Reasons: []string{"exhausted"}}); err != nil || res.Matched != 0 {
		t.Fatalf("reason filter exhausted: %+v, %v; want no permanent dead letter to match", res, err)
	}
	crash := errors.New("killed")
	var killed string
	_, _, err = redrive(broker.RedriveOptions{Rate: 1000, AfterRepublish: func(dl broker.DeadLetter) error { killed = dl.ID; return crash }})
	if !errors.Is(err, crash) {
		t.Fatalf("killed run returned %v, want the kill", err)
	}
	if res, _, err = redrive(broker.RedriveOptions{Rate: 50, Burst: 1}); err != nil || res.Moved != 3 {
		t.Fatalf("run after the kill: %+v, %v; want all 3 moved (the dry run and the kill removed none)", res, err)
	}
	if res, _, err = redrive(broker.RedriveOptions{Rate: 50}); err != nil || res.Read != 0 {
		t.Fatalf("run after everything moved: %+v, %v; want nothing left to read", res, err)
	}
	if err := p.Settle(ctx); err != nil {
		t.Fatalf("the broker did not settle: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if traced {
		for i, id := range ids {
			for n, got := range traces[id] {
				if (i == 0) != (got == published) {
					t.Errorf("run %d of %s had trace context %q (published with one: %v)", n+1, id, got, i == 0)
				}
			}
		}
		if len(traces[ids[0]]) < 2 {
			t.Errorf("%s ran %d times: want a run before and one after the redrive", ids[0], len(traces[ids[0]]))
		}
	}
	for _, id := range ids {
		lo, hi := 1, 1
		if id == killed {
			hi = 2 // republished twice: the second may be deduplicated
		}
		if n := ok[id]; n < lo || n > hi {
			t.Errorf("%s succeeded %d times after the redrive, want %s (killed: %s; all: %v)", id, n, fmt.Sprint(lo, "..", hi), killed, ok)
		}
	}
}
