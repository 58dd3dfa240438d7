package brokertest_test

import (
	"context"
	"hash/fnv"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/broker/brokertest"
)

// memPipeline is an in-memory broker: delay tiers are timers, the DLQ a
// channel. It runs broker.Processor like the real adapters and proves the
// suite against a pipeline that has no broker to blame.
type memPipeline struct {
	proc    *broker.Processor
	tiers   broker.Tiers
	crash   bool
	crashOK bool
	mu      sync.Mutex
	crashed bool
	dlq     chan broker.DeadLetter
	// ignoreTerm redelivers a dead-lettered message until MaxAttempts
	// deliveries, as a server ignoring the termination would.
	ignoreTerm bool
	inFlight   sync.WaitGroup // messages published, parked or redelivered, not yet settled
}

type memMsg struct {
	id      string
	payload []byte
	st      broker.State
}

func (m *memPipeline) Publish(_ context.Context, id string, payload []byte) error {
	m.inFlight.Add(1)
	go m.deliver(memMsg{id: id, payload: payload, st: broker.State{}})
	return nil
}

// again delivers msg once more, counted in flight.
func (m *memPipeline) again(msg memMsg) {
	m.inFlight.Add(1)
	go m.deliver(msg)
}

func (m *memPipeline) Settle(ctx context.Context) error {
	done := make(chan struct{})
	go func() { m.inFlight.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (m *memPipeline) deliver(msg memMsg) {
	defer m.inFlight.Done()
	o := m.proc.Process(context.Background(), msg.id, msg.payload, msg.st)
	crashOnce := func(armed bool) bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		crash := armed && !m.crashed
		m.crashed = m.crashed || crash
		return crash
	}
	switch o.Action {
	case broker.Ack:
		if crashOnce(m.crashOK) { // applied, not acknowledged: it comes back
			m.again(msg)
		}
	case broker.Retry, broker.Park:
		o.State.Origin = "mem"
		d := m.tiers[m.tiers.For(o.Delay)]
		next := memMsg{id: msg.id, payload: msg.payload, st: o.State}
		m.inFlight.Add(1)
		time.AfterFunc(d, func() { m.deliver(next) })
		if crashOnce(m.crash) { // forwarded, not acknowledged: the original comes back
			m.again(msg)
		}
	case broker.Dead:
		o.State.Origin = "mem"
		first := msg.st.Reason == ""
		if first {
			m.dlq <- broker.DeadLetter{ID: msg.id, Payload: msg.payload, State: o.State}
		}
		if crashOnce(m.crash) {
			m.again(msg)
		} else if m.ignoreTerm && o.State.Attempts < m.proc.MaxAttempts() {
			// Not terminated: delivered again, counting as an attempt; the
			// copy is deduplicated (reason set), as JetStream's DLQ would.
			next := msg
			next.st.Attempts, next.st.Reason = o.State.Attempts, o.State.Reason
			m.again(next)
		}
	}
}

func (m *memPipeline) NextDeadLetter(ctx context.Context) (broker.DeadLetter, error) {
	select {
	case dl := <-m.dlq:
		return dl, nil
	case <-ctx.Done():
		return broker.DeadLetter{}, ctx.Err()
	}
}

func TestSuiteInMemory(t *testing.T) {
	fault := os.Getenv("STAGGER_MEM_FAULT") == "ignore-term"
	brokertest.Run(t, func(t *testing.T, s brokertest.Setup) brokertest.Pipeline {
		return &memPipeline{
			proc:       &broker.Processor{Handler: s.Handler, Policy: s.Policy, Inbox: s.Inbox, Source: "memory"},
			tiers:      s.Tiers,
			crash:      s.Crash,
			crashOK:    s.CrashAfterSuccess,
			dlq:        make(chan broker.DeadLetter, 16),
			ignoreTerm: fault,
		}
	})
}

// TestSuiteCatchesRunsAfterDeadLetter runs the suite on an in-memory broker
// that ignores the termination of a dead-lettered message (redelivering it,
// its DLQ copy deduplicated, as JetStream 2.9 did with TermWithReason): the
// suite must fail on the handler runs it counts.
func TestSuiteCatchesRunsAfterDeadLetter(t *testing.T) {
	if os.Getenv("STAGGER_MEM_FAULT") != "" {
		t.Skip("inside the faulty run")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSuiteInMemory$", "-test.count=1")
	cmd.Env = append(os.Environ(), "STAGGER_MEM_FAULT=ignore-term")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the suite passed on a broker that runs dead-lettered messages again:\n%s", out)
	}
	for _, want := range []string{"Permanent", "Unknown", "handler ran 3 times"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the failing suite's output lacks %q:\n%s", want, out)
		}
	}
}

func TestFailsOnceIsFNV1a(t *testing.T) {
	n := 0
	for i := range 10000 {
		id := "m" + strconv.Itoa(i)
		h := fnv.New32a()
		h.Write([]byte(id))
		if want := h.Sum32()%100 < 10; brokertest.FailsOnce(id, 10) != want {
			t.Fatalf("FailsOnce(%q, 10) = %v, want %v", id, !want, want)
		}
		if brokertest.FailsOnce(id, 10) {
			n++
		}
	}
	if n < 900 || n > 1100 {
		t.Fatalf("%d of 10000 IDs fail once at 10%%", n)
	}
}
