package broker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/staggerhq/stagger/broker"
)

// memDLQ is an in-memory DLQ and origin for Redrive.
type memDLQ struct {
	dlq     []broker.DeadLetter
	next    int
	origin  []broker.DeadLetter // republished, with the state they carried
	at      []time.Time         // when each republish happened
	removed map[string]bool
}

type memMsg struct {
	q  *memDLQ
	dl broker.DeadLetter
}

func (q *memDLQ) Next(context.Context) (broker.RedriveMessage, error) {
	for q.next < len(q.dlq) {
		dl := q.dlq[q.next]
		q.next++
		if !q.removed[dl.ID] {
			return memMsg{q, dl}, nil
		}
	}
	return nil, io.EOF
}

func (m memMsg) DeadLetter() broker.DeadLetter { return m.dl }
func (m memMsg) Destination() string           { return m.dl.Origin }
func (m memMsg) Republish(_ context.Context, st broker.State) error {
	m.q.origin = append(m.q.origin, broker.DeadLetter{ID: m.dl.ID, Payload: m.dl.Payload, State: st})
	m.q.at = append(m.q.at, time.Now())
	return nil
}
func (m memMsg) Remove(context.Context) error {
	if m.q.removed == nil {
		m.q.removed = map[string]bool{}
	}
	m.q.removed[m.dl.ID] = true
	return nil
}

func newMemDLQ(now time.Time) *memDLQ {
	q := &memDLQ{}
	for i, r := range []string{"permanent", "exhausted", "permanent", "unknown", "permanent", "permanent"} {
		q.dlq = append(q.dlq, broker.DeadLetter{ID: string(rune('a' + i)), Payload: []byte("p"),
			State: broker.State{Attempts: 3, Reason: r, Error: "e", Origin: "orders",
				FirstFailure: now.Add(-time.Duration(i+1) * time.Hour)}})
	}
	return q
}

func ids(dls []broker.DeadLetter) string {
	var b strings.Builder
	for _, d := range dls {
		b.WriteString(d.ID)
	}
	return b.String()
}

// TestRedrivePacedAndFiltered moves the permanent dead letters older than
// 2 h at 2 per second with a burst of 2, in virtual time.
func TestRedrivePacedAndFiltered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		q := newMemDLQ(start)
		var events []broker.RedriveEvent
		res, err := broker.Redrive(context.Background(), q, broker.RedriveOptions{
			Reasons: []string{"permanent"}, MinAge: 2 * time.Hour, Rate: 2, Burst: 2,
			Report: func(e broker.RedriveEvent) { events = append(events, e) },
		})
		if err != nil {
			t.Fatal(err)
		}
		// permanent: a (1h, too young), c (3h), e (5h), f (6h).
		if got := ids(q.origin); got != "cef" {
			t.Fatalf("moved %q, want cef", got)
		}
		if res != (broker.RedriveResult{Read: 6, Matched: 3, Moved: 3}) {
			t.Errorf("result %+v", res)
		}
		// Two at once, the third half a second later.
		if d := q.at[1].Sub(start); d != 0 {
			t.Errorf("second move after %v, want at once (burst 2)", d)
		}
		if d := q.at[2].Sub(start); d != 500*time.Millisecond {
			t.Errorf("third move after %v, want 500ms (2 per second)", d)
		}
		for _, o := range q.origin {
			if o.State != (broker.State{}) {
				t.Errorf("%s republished with state %+v, want it reset", o.ID, o.State)
			}
		}
		if len(events) != 3 || !events[0].Moved || events[0].To != "orders" {
			t.Errorf("events %+v", events)
		}
		if len(q.removed) != 3 {
			t.Errorf("removed %v from the DLQ", q.removed)
		}
	})
}

func TestRedriveDryRunAndLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newMemDLQ(time.Now())
		var seen []string
		res, err := broker.Redrive(context.Background(), q, broker.RedriveOptions{
			Rate: 1, Limit: 4, DryRun: true,
			Report: func(e broker.RedriveEvent) { seen = append(seen, e.ID) },
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(q.origin) != 0 || len(q.removed) != 0 {
			t.Fatalf("a dry run moved %d and removed %d", len(q.origin), len(q.removed))
		}
		if strings.Join(seen, "") != "abcd" || res.Matched != 4 || res.Moved != 0 {
			t.Fatalf("dry run reported %v, result %+v; want abcd (limit 4)", seen, res)
		}
	})
}

func TestRedriveKeepState(t *testing.T) {
	q := newMemDLQ(time.Now())
	if _, err := broker.Redrive(context.Background(), q, broker.RedriveOptions{Rate: 1e6, Limit: 1, KeepState: true}); err != nil {
		t.Fatal(err)
	}
	st := q.origin[0].State
	if st.Attempts != 3 || st.Error != "e" || st.Reason != "" || st.FirstFailure.IsZero() {
		t.Fatalf("kept state %+v: want attempts and history, no reason", st)
	}
}

// TestRedriveStopBeforeRemoval kills the run between the republish and the
// removal: the message is in both places, and the next run moves it again
// (a duplicate, not a loss).
func TestRedriveStopBeforeRemoval(t *testing.T) {
	q := newMemDLQ(time.Now())
	crash := errors.New("killed")
	_, err := broker.Redrive(context.Background(), q, broker.RedriveOptions{Rate: 1e6,
		AfterRepublish: func(broker.DeadLetter) error { return crash }})
	if !errors.Is(err, crash) {
		t.Fatalf("err %v, want the crash", err)
	}
	if ids(q.origin) != "a" || q.removed["a"] {
		t.Fatalf("after the crash: origin %q, removed %v; want a republished and still in the DLQ", ids(q.origin), q.removed)
	}
	q.next = 0
	if _, err := broker.Redrive(context.Background(), q, broker.RedriveOptions{Rate: 1e6}); err != nil {
		t.Fatal(err)
	}
	if ids(q.origin) != "aabcdef" || len(q.removed) != 6 {
		t.Fatalf("after the second run: origin %q, removed %d", ids(q.origin), len(q.removed))
	}
}

func TestRedriveBadOptions(t *testing.T) {
	for _, c := range []struct {
		o    broker.RedriveOptions
		want string
	}{
		{broker.RedriveOptions{}, "Rate must be in (0"},
		{broker.RedriveOptions{Rate: -1}, "Rate must be"},
		{broker.RedriveOptions{Rate: math.NaN()}, "Rate must be"},
		{broker.RedriveOptions{Rate: math.Inf(1)}, "Rate must be"},
		{broker.RedriveOptions{Rate: 1, Burst: -1}, "Burst must be"},
		{broker.RedriveOptions{Rate: 1, Limit: -1}, "Limit must be"},
		{broker.RedriveOptions{Rate: 1, MinAge: -time.Second}, "MinAge must be"},
		{broker.RedriveOptions{Rate: 1, MinAge: time.Hour, MaxAge: time.Minute}, "MaxAge must be above MinAge"},
		{broker.RedriveOptions{Rate: 1, Reasons: []string{""}}, "empty reason"},
	} {
		_, err := broker.Redrive(context.Background(), &memDLQ{}, c.o)
		if !errors.Is(err, broker.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err %v, want %q", c.o, err, c.want)
		}
	}
	if _, err := broker.Redrive(context.Background(), nil, broker.RedriveOptions{Rate: 1}); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("nil source: %v", err)
	}
}

// ExampleRedrive moves the permanent dead letters of a DLQ back to their
// origin, at most 10 a second; a broker adapter's RedriveSource
// (rabbitmq.NewRedriveSource, kafka.NewRedriveSource,
// jetstream.NewRedriveSource) takes the place of the in-memory one here.
func ExampleRedrive() {
	var src broker.RedriveSource = newMemDLQ(time.Now())
	res, err := broker.Redrive(context.Background(), src, broker.RedriveOptions{
		Reasons: []string{"permanent"},
		Rate:    10,
		Report: func(e broker.RedriveEvent) {
			fmt.Printf("moved %s (%s after %d attempts) to %s\n", e.ID, e.Reason, e.Attempts, e.To)
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("read %d, moved %d\n", res.Read, res.Moved)
	// Output:
	// moved a (permanent after 3 attempts) to orders
	// moved c (permanent after 3 attempts) to orders
	// moved e (permanent after 3 attempts) to orders
	// moved f (permanent after 3 attempts) to orders
	// read 6, moved 4
}
