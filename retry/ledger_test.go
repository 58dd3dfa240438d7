package retry

import (
	"errors"
	"testing"
	"time"
)

func TestDeliveryCountOn(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, c := range []struct {
		name      string
		d, prev   Delivery
		own       int
		want      Delivery
		budget    int
		exhausted bool
	}{
		{name: "no work: a ledger of its own", own: 5, budget: 5},
		{name: "own 0 is the default", budget: DefaultMaxAttempts},
		{name: "work without a budget", prev: Delivery{Attempt: 2}, own: 4, budget: 4},
		{name: "a budget but no attempt made", prev: Delivery{MaxAttempts: 6}, own: 4, budget: 4},
		{name: "counts on, own smaller", prev: Delivery{Attempt: 2, MaxAttempts: 6}, own: 4,
			want: Delivery{Attempt: 2, MaxAttempts: 4}, budget: 6},
		{name: "counts on, budget smaller", prev: Delivery{Attempt: 2, MaxAttempts: 3}, own: 5,
			want: Delivery{Attempt: 2, MaxAttempts: 3}, budget: 3},
		{name: "capped to one attempt of its own", d: Delivery{MaxAttempts: 1}, prev: Delivery{Attempt: 2, MaxAttempts: 6}, own: 5,
			want: Delivery{Attempt: 2, MaxAttempts: 3}, budget: 6},
		{name: "none left", prev: Delivery{Attempt: 3, MaxAttempts: 3}, own: 5,
			want: Delivery{Attempt: 3, MaxAttempts: 3}, budget: 3, exhausted: true},
		{name: "own already spent", prev: Delivery{Attempt: 4, MaxAttempts: 9}, own: 3,
			want: Delivery{Attempt: 4, MaxAttempts: 3}, budget: 9, exhausted: true},
		{name: "the earlier deadline", d: Delivery{Deadline: t0.Add(time.Second)}, prev: Delivery{Attempt: 1, MaxAttempts: 3, Deadline: t0}, own: 3,
			want: Delivery{Attempt: 1, MaxAttempts: 3, Deadline: t0}, budget: 3},
		{name: "its own deadline is earlier", d: Delivery{Deadline: t0}, prev: Delivery{Attempt: 1, MaxAttempts: 3, Deadline: t0.Add(time.Second)}, own: 3,
			want: Delivery{Attempt: 1, MaxAttempts: 3, Deadline: t0}, budget: 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := c.d
			if b := d.CountOn(c.prev, c.own); b != c.budget {
				t.Errorf("budget %d, want %d", b, c.budget)
			}
			if d != c.want {
				t.Errorf("ledger %+v, want %+v", d, c.want)
			}
			err := d.Exhausted()
			if (err != nil) != c.exhausted {
				t.Fatalf("Exhausted() = %v, want exhausted %v", err, c.exhausted)
			}
			var e *Error
			if err != nil && (!errors.Is(err, ErrExhausted) || !errors.As(err, &e) || e.Attempts != c.want.Attempt) {
				t.Errorf("Exhausted() = %#v, want an Error with reason Exhausted and %d attempts", err, c.want.Attempt)
			}
		})
	}
}
