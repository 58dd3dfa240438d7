package limit

// Gauge is implemented by limiters that can report what they hold, for a
// gauge: InFlight is what is in use now and Limit what may be, in the
// same unit (slots for [Bulkhead] and [AIMD], starts of the current burst
// for [Rate]); a limiter refuses while InFlight >= Limit. Both read one or
// two atomic words: no lock, no allocation, safe to call from any
// goroutine (a metrics callback, a dashboard) while the limiter is in use.
type Gauge interface {
	InFlight() int
	Limit() int
}

var (
	_ Gauge = (*Bulkhead)(nil)
	_ Gauge = (*AIMD)(nil)
	_ Gauge = (*Rate)(nil)
)

// Limit returns the number of slots (Size).
func (b *Bulkhead) Limit() int { return int(b.size) }

// InFlight returns the starts counted against the burst at the clock's
// time: 0 after a quiet spell, Burst when the next start must wait. It
// rounds up, so a start that is partly earned back still counts.
func (r *Rate) InFlight() int {
	ahead := r.tat.Load() - r.now()
	if ahead <= 0 {
		return 0
	}
	return int(min(r.limit, ahead+r.interval-1) / r.interval)
}

// Limit returns Burst: the starts admitted at once after a quiet spell.
func (r *Rate) Limit() int { return r.Burst() }
