package brokertest_test

import (
	"context"
	"hash/fnv"
	"strconv"
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
}

type memMsg struct {
	id      string
	payload []byte
	st      broker.State
}

func (m *memPipeline) Publish(_ context.Context, id string, payload []byte) error {
	go m.deliver(memMsg{id: id, payload: payload, st: broker.State{}})
	return nil
}

func (m *memPipeline) deliver(msg memMsg) {
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
			go m.deliver(msg)
		}
	case broker.Retry, broker.Park:
		o.State.Origin = "mem"
		d := m.tiers[m.tiers.For(o.Delay)]
		next := memMsg{id: msg.id, payload: msg.payload, st: o.State}
		time.AfterFunc(d, func() { m.deliver(next) })
		if crashOnce(m.crash) { // forwarded, not acknowledged: the original comes back
			go m.deliver(msg)
		}
	case broker.Dead:
		o.State.Origin = "mem"
		m.dlq <- broker.DeadLetter{ID: msg.id, Payload: msg.payload, State: o.State}
		if crashOnce(m.crash) {
			go m.deliver(msg)
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
	brokertest.Run(t, func(t *testing.T, s brokertest.Setup) brokertest.Pipeline {
		return &memPipeline{
			proc:    &broker.Processor{Handler: s.Handler, Policy: s.Policy, Inbox: s.Inbox, Source: "memory"},
			tiers:   s.Tiers,
			crash:   s.Crash,
			crashOK: s.CrashAfterSuccess,
			dlq:     make(chan broker.DeadLetter, 16),
		}
	})
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
