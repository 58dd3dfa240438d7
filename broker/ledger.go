package broker

import (
	"context"
	"time"

	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retry/retrydriver"
)

// EncodeLedger writes, through set, the ledger of the work ctx carries
// ([retry.DeliveryFrom]) as the state headers a consumer continues from
// (StateFrom, State.Encode): the attempts made so far, the attempt budget
// and the deadline. It reports false, writing nothing, when ctx carries
// no work. The adapters' publishers call it, so a handler that hands its
// work to a broker publishes with the ledger in one call.
func EncodeLedger(ctx context.Context, set func(key, value string)) bool {
	d, ok := retry.DeliveryFrom(ctx)
	if !ok {
		return false
	}
	StateFrom(d).Encode(set)
	return true
}

// Budget is the attempt budget of a delivery whose state is st: the
// smaller of the Policy's MaxAttempts and the budget the message carries
// (State.MaxAttempts, from the producer's ledger), so a producer can
// shorten a consumer's budget but never extend it.
func (p *Processor) Budget(st State) int { return p.budget(st) }

// budget is the attempt budget of a delivery whose state is st: the
// smaller of the Policy's MaxAttempts and the budget the message carries
// (State.MaxAttempts, from the producer's ledger), so a producer can
// shorten a consumer's budget but never extend it.
func (p *Processor) budget(st State) int { return min1(p.MaxAttempts(), st.MaxAttempts) }

// min1 is the budget of a Policy allowing n attempts for a message that
// carries the budget carried (0: none).
func min1(n, carried int) int {
	if carried > 0 {
		return min(n, carried)
	}
	return n
}

// ledger applies the rules of a ledger from the wire before an attempt:
// a first-attempt time later than start (which would push Policy.Timeout's
// deadline later) is taken as start, and a message whose attempts already
// reached its budget is dead-lettered unhandled with reason "exhausted",
// as retry.Do would stop: no attempt is left for it. (A message without a
// carried budget, such as a redrive's, runs as before.) It returns
// true, with st set for the dead letter, when the message must not be
// handled. It changes nothing for a message that carries neither a first
// attempt nor a budget (ProcessAt skips the call for it).
func (p *Processor) ledger(s *retrydriver.Step, st *State, start time.Time) bool {
	if !st.FirstAttempt.IsZero() && st.FirstAttempt.After(start) {
		st.FirstAttempt = start
		s.Delivery.First = start
	}
	if st.MaxAttempts == 0 || st.Attempts < s.Delivery.MaxAttempts {
		return false // no ledger's budget, or attempts left
	}
	dl := st.Deadline
	if p.Policy != nil && p.Policy.Timeout > 0 && !st.FirstAttempt.IsZero() {
		if t := st.FirstAttempt.Add(p.Policy.Timeout); dl.IsZero() || t.Before(dl) {
			dl = t
		}
	}
	if !dl.IsZero() && !start.Before(dl) {
		return false // past its deadline: Begin gives that reason
	}
	st.Due = time.Time{}
	st.Reason = retry.Exhausted.String()
	if st.Error == "" {
		st.Error = "broker: the work has no attempt left (" + itoa(st.Attempts) + " of " + itoa(s.Delivery.MaxAttempts) + " made)"
	}
	return true
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	if n == 0 {
		return "0"
	}
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}
