package broker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/internal/brokerwire"
	"github.com/staggerhq/stagger/retry"
)

func TestCompactRoundTrip(t *testing.T) {
	for _, st := range []broker.State{
		{},
		{Attempts: 3, Prev: 2500 * time.Millisecond, Due: time.UnixMilli(1_700_000_002_500), FirstAttempt: time.UnixMilli(1_700_000_000_000),
			FirstFailure: time.UnixMilli(1_700_000_000_001), Error: "a\nb c"},
	} {
		for _, extra := range []string{"", "7 x.y"} {
			var ext func([]byte) []byte
			if extra != "" {
				ext = func(b []byte) []byte { return append(b, extra...) }
			}
			v := brokerwire.AppendCompact(nil, st, ext)
			got, rest, err := brokerwire.ParseCompact(v)
			if err != nil || got != st || string(rest) != extra {
				t.Errorf("%q: %+v %q %v; want %+v %q", v, got, rest, err, st, extra)
			}
		}
	}
	long := broker.State{Attempts: 1, Error: strings.Repeat("é", broker.MaxErrorLen)}
	if got, _, _ := brokerwire.ParseCompact(brokerwire.AppendCompact(nil, long, nil)); len(got.Error) > broker.MaxErrorLen {
		t.Errorf("error text of %d bytes read back, want at most %d", len(got.Error), broker.MaxErrorLen)
	}
}

// TestCompactDeadline: a state with a deadline is written as version 2 and
// read back; one without stays version 1, which older readers take.
func TestCompactDeadline(t *testing.T) {
	st := broker.State{Attempts: 2, FirstAttempt: time.UnixMilli(1000), Deadline: time.UnixMilli(9000), Error: "503"}
	v := brokerwire.AppendCompact(nil, st, func(b []byte) []byte { return append(b, "orders 3 17"...) })
	if v[0] != '2' {
		t.Fatalf("value %q: want version 2", v)
	}
	got, extra, err := brokerwire.ParseCompact(v)
	if err != nil || !got.Deadline.Equal(st.Deadline) || got.Attempts != 2 || string(extra) != "orders 3 17" || got.Error != "503" {
		t.Fatalf("read back %+v %q %v", got, extra, err)
	}
	st.Deadline = time.Time{}
	if v := brokerwire.AppendCompact(nil, st, nil); v[0] != '1' {
		t.Errorf("value %q without a deadline: want version 1", v)
	}
}

// TestProcessorCarriedDeadline: a message whose producer handed over a
// ledger (StateFrom) continues its attempts and is dead-lettered, unrun,
// once its carried deadline has passed.
func TestProcessorCarriedDeadline(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	runs := 0
	p := &broker.Processor{Now: func() time.Time { return now }, Source: "test",
		Handler: func(ctx context.Context, _ []byte) error {
			runs++
			d, _ := retry.DeliveryFrom(ctx)
			if d.Attempt != 3 || !d.Deadline.Equal(now.Add(time.Minute)) {
				t.Errorf("delivery %+v: want attempt 3 and the carried deadline", d)
			}
			return retry.Retryable(errors.New("busy"))
		}}
	st := broker.StateFrom(retry.Delivery{Attempt: 2, Deadline: now.Add(time.Minute)})
	hdr := map[string]string{}
	st.Encode(func(k, v string) { hdr[k] = v })
	enc, err := broker.DecodeState(func(k string) (string, bool) { v, ok := hdr[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	o := p.Process(context.Background(), "m", nil, enc)
	if runs != 1 || o.State.Attempts != 3 || !o.State.Deadline.Equal(now.Add(time.Minute)) {
		t.Fatalf("outcome %+v after %d runs", o, runs)
	}
	now = now.Add(2 * time.Minute)
	o.State.Due = time.Time{}
	if o = p.Process(context.Background(), "m", nil, o.State); o.Action != broker.Dead || o.Reason != retry.Deadline || runs != 1 {
		t.Errorf("after the carried deadline: %+v, %d runs; want dead (deadline) without a run", o, runs)
	}
}

func TestCompactMalformed(t *testing.T) {
	for _, c := range []struct{ v, field string }{
		{"", "version"}, {"4 0 0 0 0 0 0 0", "version"}, {"3 0 0 0 0 0 0", "max attempts"}, {"3 0 0 0 0 0 0 3000000000", "max attempts"}, {"2 0 0 0 0 0", "deadline"}, {"2 0 0 0 0 0 x", "deadline"}, {"1 a 0 0 0 0", "attempts"}, {"1 1 0 0 0", "first failure"},
		{"1 1 -5 0 0 0", "delay"}, {"1 3000000000 0 0 0 0", "attempts"}, {"1 1 0 0 0 99999999999999999999", "first failure"},
	} {
		_, _, err := brokerwire.ParseCompact([]byte(c.v))
		if err == nil || !strings.Contains(err.Error(), broker.HeaderState) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%q: err %v, want one naming %s and %s", c.v, err, broker.HeaderState, c.field)
		}
	}
}

// TestLedgerBudgetRoundTrip: the attempt budget survives both header forms.
func TestLedgerBudgetRoundTrip(t *testing.T) {
	st := broker.State{Attempts: 2, MaxAttempts: 5, Deadline: time.UnixMilli(1_700_000_000_000)}
	got, _, err := brokerwire.ParseCompact(brokerwire.AppendCompact(nil, st, nil))
	if err != nil || got.MaxAttempts != 5 || got.Attempts != 2 || !got.Deadline.Equal(st.Deadline) {
		t.Errorf("compact: %+v, %v", got, err)
	}
	h := map[string]string{}
	st.Encode(func(k, v string) { h[k] = v })
	got, err = broker.DecodeState(func(k string) (string, bool) { v, ok := h[k]; return v, ok })
	if err != nil || got.MaxAttempts != 5 || got.Attempts != 2 {
		t.Errorf("headers %v: %+v, %v", h, got, err)
	}
}
