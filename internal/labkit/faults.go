package labkit

import (
	"errors"
	"fmt"
	"time"
)

// ErrInvalid is wrapped by every validation error of this package; the
// message names the field and the rule it broke.
var ErrInvalid = errors.New("lab: invalid configuration")

// Span is a stretch [From, To) of a gateway's timeline, measured from the
// gateway's start.
type Span struct {
	From, To time.Duration // start (inclusive) and end (exclusive); 0 <= From < To
}

// Contains reports whether t falls inside the span.
func (s Span) Contains(t time.Duration) bool { return t >= s.From && t < s.To }

// Slow is a slow phase: inside the span the gateway's latency grows linearly
// from Latency (no extra) at From to Latency+Extra just before To; after To it
// is back to Latency. The dependency does not fail — it gets slower, which
// is what turns timeouts and retries into an outage.
type Slow struct {
	Span                // when the phase lasts
	Extra time.Duration // latency added by the end of the span; >= 0
}

// Flap alternates inside its span: down for Down, then up for Up, then down
// again, starting down at From.
type Flap struct {
	Span                   // when the gateway flaps
	Down, Up time.Duration // length of each down and each up phase; both > 0
}

// Faults is a gateway's scripted timeline. The zero value is a healthy
// gateway that answers at once.
type Faults struct {
	// Down lists outages: an attempt arriving inside any of them is
	// refused with 503 (Outcome Down).
	Down []Span
	// Latency is how long the gateway takes to answer an accepted or a down
	// attempt. It is the dependency's round trip as the callers see it, on
	// top of the loopback's own (a fraction of a millisecond).
	Latency time.Duration
	// Capacity, when > 0, caps the attempts in flight: one arriving while
	// Capacity attempts are being served is refused at once with 503
	// (Outcome Busy), without waiting out Latency.
	Capacity int
	// Slow lists slow phases (latency growing over a span).
	Slow []Slow
	// Flap lists flapping phases.
	Flap []Flap
	// RetryAfter, when > 0, is sent as a Retry-After header (whole seconds,
	// rounded up) with every refusal.
	RetryAfter time.Duration
}

// Outage returns a gateway down from the start for d, answering after
// latency: the timeline of [FourCallerOutage].
func Outage(d, latency time.Duration) Faults {
	f := Faults{Latency: latency}
	if d > 0 {
		f.Down = []Span{{From: 0, To: d}}
	}
	return f
}

// Validate checks every field and names the first one that is wrong.
func (f Faults) Validate() error {
	span := func(name string, s Span) error {
		switch {
		case s.From < 0:
			return fmt.Errorf("%w: %s.From must be >= 0, got %v", ErrInvalid, name, s.From)
		case s.To <= s.From:
			return fmt.Errorf("%w: %s.To (%v) must be after From (%v)", ErrInvalid, name, s.To, s.From)
		}
		return nil
	}
	for i, s := range f.Down {
		if err := span(fmt.Sprintf("Faults.Down[%d]", i), s); err != nil {
			return err
		}
	}
	switch {
	case f.Latency < 0:
		return fmt.Errorf("%w: Faults.Latency must be >= 0, got %v", ErrInvalid, f.Latency)
	case f.Capacity < 0:
		return fmt.Errorf("%w: Faults.Capacity must be >= 0 (0 means no cap), got %d", ErrInvalid, f.Capacity)
	case f.RetryAfter < 0:
		return fmt.Errorf("%w: Faults.RetryAfter must be >= 0, got %v", ErrInvalid, f.RetryAfter)
	}
	for i, s := range f.Slow {
		name := fmt.Sprintf("Faults.Slow[%d]", i)
		if err := span(name, s.Span); err != nil {
			return err
		}
		if s.Extra < 0 {
			return fmt.Errorf("%w: %s.Extra must be >= 0, got %v", ErrInvalid, name, s.Extra)
		}
	}
	for i, fl := range f.Flap {
		name := fmt.Sprintf("Faults.Flap[%d]", i)
		if err := span(name, fl.Span); err != nil {
			return err
		}
		if fl.Down <= 0 || fl.Up <= 0 {
			return fmt.Errorf("%w: %s.Down and .Up must be > 0, got %v and %v", ErrInvalid, name, fl.Down, fl.Up)
		}
	}
	return nil
}

// IsDown reports whether the timeline has the gateway down at t.
func (f Faults) IsDown(t time.Duration) bool {
	for _, s := range f.Down {
		if s.Contains(t) {
			return true
		}
	}
	for _, fl := range f.Flap {
		if fl.Contains(t) && (t-fl.From)%(fl.Down+fl.Up) < fl.Down {
			return true
		}
	}
	return false
}

// LatencyAt returns the latency of an answer to an attempt arriving at t:
// Latency plus the extra of every slow phase t falls in.
func (f Faults) LatencyAt(t time.Duration) time.Duration {
	d := f.Latency
	for _, s := range f.Slow {
		if s.Contains(t) {
			// Linear growth, computed in float64 to avoid overflowing
			// Extra·elapsed for long spans.
			frac := float64(t-s.From) / float64(s.To-s.From)
			d += time.Duration(frac * float64(s.Extra))
		}
	}
	return d
}

// Decide returns what the gateway does with an attempt that arrives at t
// while inFlight others are being served: its outcome and how long to wait
// before answering. A full gateway answers Busy at once; a down one Down
// after the latency; otherwise Accepted after the latency.
func (f Faults) Decide(t time.Duration, inFlight int) (Outcome, time.Duration) {
	if f.Capacity > 0 && inFlight >= f.Capacity {
		return Busy, 0
	}
	lat := f.LatencyAt(t)
	if f.IsDown(t) {
		return Down, lat
	}
	return Accepted, lat
}

// End returns the time the last scripted fault ends (0 for none).
func (f Faults) End() time.Duration {
	var end time.Duration
	for _, s := range f.Down {
		end = max(end, s.To)
	}
	for _, s := range f.Slow {
		end = max(end, s.To)
	}
	for _, s := range f.Flap {
		end = max(end, s.To)
	}
	return end
}
