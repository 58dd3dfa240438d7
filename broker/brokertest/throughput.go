package brokertest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/staggerhq/stagger/retry"
)

// Throughput is the handler of the adapters' throughput benchmarks: it
// fails a fixed FailPct% of message IDs transiently on their first attempt
// (the same IDs in every run), succeeds otherwise, and measures the time
// from its first call to its N-th success.
type Throughput struct {
	n       int64
	failPct uint32
	ok      atomic.Int64
	first   sync.Once
	start   time.Time
	end     time.Time
	done    chan struct{}
}

// NewThroughput expects n successes; failPct of the IDs (0..100) fail once.
func NewThroughput(n int, failPct uint32) *Throughput {
	return &Throughput{n: int64(n), failPct: failPct, done: make(chan struct{})}
}

// FailsOnce reports whether id is one of the pct% that fail once: its
// FNV-1a hash modulo 100 is below pct. It neither allocates nor locks, so
// the benchmark's handler costs next to nothing beside the adapter.
func FailsOnce(id string, pct uint32) bool {
	const offset32, prime32 = 2166136261, 16777619
	h := uint32(offset32)
	for i := 0; i < len(id); i++ {
		h ^= uint32(id[i])
		h *= prime32
	}
	return h%100 < pct
}

var errTransient = retry.Retryable(errors.New("brokertest: transient"))

// Handler returns the benchmark's handler.
func (t *Throughput) Handler() retry.Handler {
	return func(ctx context.Context, _ []byte) error {
		t.first.Do(func() { t.start = time.Now() })
		d, _ := retry.DeliveryFrom(ctx)
		if d.Attempt == 1 && FailsOnce(d.ID, t.failPct) {
			return errTransient
		}
		if t.ok.Add(1) == t.n {
			t.end = time.Now()
			close(t.done)
		}
		return nil
	}
}

// Done is closed at the N-th success.
func (t *Throughput) Done() <-chan struct{} { return t.done }

// Rate is N successes per second of the measured span; call it after Done.
func (t *Throughput) Rate() float64 {
	return float64(t.n) / t.end.Sub(t.start).Seconds()
}
