package staggerotel

import (
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/staggerhq/stagger/budget"
)

// KeyState is the attribute of stagger.circuit.changes: the state a
// circuit breaker entered ("closed", "open", "half-open").
const KeyState = attribute.Key("stagger.state")

// CircuitStateChanges returns a callback for budget.CircuitConfig's
// OnStateChange that counts the changes of the circuit called name, by
// the state entered: counter stagger.circuit.changes, attributes
// stagger.name and stagger.state. It does not allocate per change.
func (m *Metrics) CircuitStateChanges(name string) (func(from, to budget.CircuitState, now time.Time), error) {
	c, err := m.meter.Int64Counter("stagger.circuit.changes", metric.WithUnit("{change}"),
		metric.WithDescription("Circuit-breaker state changes, by the state entered."))
	if err != nil {
		return nil, err
	}
	var byState [len(circuitStates)][]metric.AddOption
	for s, set := range stateSets(name) {
		byState[s] = []metric.AddOption{set}
	}
	return func(_, to budget.CircuitState, _ time.Time) {
		if int(to) < len(byState) {
			c.Add(bg, 1, byState[to]...)
		}
	}, nil
}
