package retry

// CountOn makes d, the ledger of a call about to make its first attempt,
// the next hop of the work prev describes (DeliveryFrom of the call's
// context): the rule by which a client call made inside a queue job, a
// broker message or a handler's work continues that work's ledger
// instead of starting a budget over.
//
// When prev has made attempts (Attempt > 0) and has a budget
// (MaxAttempts > 0), the call's attempts count on from prev.Attempt — its
// first attempt is prev.Attempt+1 — up to the smaller of own (the call's
// Policy.MaxAttempts; 0 or less means DefaultMaxAttempts) and prev's
// budget, within prev's deadline; a d.MaxAttempts set before the call
// (1 for a request that cannot be sent twice) caps the attempts the call
// itself makes. CountOn then returns prev.MaxAttempts, the budget the call
// carries on the wire. Otherwise the call starts a ledger of its own: d is
// left as it is and CountOn returns own.
//
// [Delivery.Exhausted] then says whether the call may start at all.
func (d *Delivery) CountOn(prev Delivery, own int) (budget int) {
	if own <= 0 {
		own = DefaultMaxAttempts
	}
	if prev.MaxAttempts <= 0 || prev.Attempt <= 0 {
		return own
	}
	last := min(own, prev.MaxAttempts) // the highest attempt number the call may make
	if d.MaxAttempts > 0 {
		last = min(last, prev.Attempt+d.MaxAttempts)
	}
	d.Attempt, d.MaxAttempts = prev.Attempt, last
	if !prev.Deadline.IsZero() && (d.Deadline.IsZero() || prev.Deadline.Before(d.Deadline)) {
		d.Deadline = prev.Deadline
	}
	return prev.MaxAttempts
}

// Exhausted returns the error of a call whose ledger d, before its first
// attempt, has no attempt left — it counts on from work (CountOn) that
// already made d.MaxAttempts attempts: a [*Error] with reason Exhausted,
// and nothing may be sent. It returns nil for a ledger with attempts
// left or one that starts afresh (Attempt 0).
func (d *Delivery) Exhausted() error {
	if d.Attempt == 0 || d.Attempt < d.MaxAttempts {
		return nil
	}
	return &Error{Reason: Exhausted, Attempts: d.Attempt}
}
