package staggerotel

import (
	"context"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/staggerhq/stagger/retry"
)

// loopCounts are the counts of Metrics.Hooks by name. The hot path is an
// atomic add on a loopCount found when the hooks were made; the map is
// read only by a collection and written only by Hooks.
type loopCounts struct {
	mu     sync.Mutex
	byName map[string]*loopCount
	order  []*loopCount
}

type loopCount struct {
	attempts  atomic.Int64
	_         [56]byte // the count every attempt adds to, on its own cache line
	retries   atomic.Int64
	successes atomic.Int64
	giveups   [256]atomic.Int64 // by retry.Reason (a uint8)

	set      metric.ObserveOption
	byReason [256]metric.ObserveOption // made on first use by a collection
	name     string
}

func (l *loopCounts) get(name string) *loopCount {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.byName[name]; c != nil {
		return c
	}
	if l.byName == nil {
		l.byName = map[string]*loopCount{}
	}
	c := &loopCount{name: name, set: metric.WithAttributeSet(attribute.NewSet(KeyName.String(name)))}
	l.byName[name] = c
	l.order = append(l.order, c)
	return c
}

// observeLoops reports the counts of every name Hooks was called with;
// a count still 0 is not reported, as a counter never added to.
func (m *Metrics) observeLoops(_ context.Context, o metric.Observer) error {
	m.loops.mu.Lock()
	defer m.loops.mu.Unlock()
	for _, c := range m.loops.order {
		for _, x := range []struct {
			inst metric.Int64ObservableCounter
			n    int64
		}{{m.attempts, c.attempts.Load()}, {m.retries, c.retries.Load()}, {m.successes, c.successes.Load()}} {
			if x.n > 0 {
				o.ObserveInt64(x.inst, x.n, c.set)
			}
		}
		for r := range c.giveups {
			if n := c.giveups[r].Load(); n > 0 {
				if c.byReason[r] == nil {
					c.byReason[r] = reasonSet(c.name, retry.Reason(r))
				}
				o.ObserveInt64(m.giveups, n, c.byReason[r])
			}
		}
	}
	return nil
}

func reasonSet(name string, r retry.Reason) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(KeyName.String(name), KeyReason.String(r.String())))
}
