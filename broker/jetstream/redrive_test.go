package jetstream

import (
	"context"
	"testing"
	"time"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/broker/brokertest"
	"github.com/staggerhq/stagger/internal/wait"
)

type redrivePipeline struct{ *pipeline }

// WaitDeadLetters polls until the DLQ stream holds n messages.
func (p redrivePipeline) WaitDeadLetters(ctx context.Context, n int) error {
	var w wait.Waiter
	defer w.Stop()
	for {
		st, err := p.js.Stream(ctx, p.stream+"_DLQ")
		if err != nil {
			return err
		}
		if st.CachedInfo().State.Msgs >= uint64(n) {
			return nil
		}
		if err := w.Wait(ctx, nil, 20*time.Millisecond); err != nil {
			return err
		}
	}
}

func (p redrivePipeline) Source(ctx context.Context) (broker.RedriveSource, func(), error) {
	src, err := NewRedriveSource(ctx, p.js, p.stream+"_DLQ", "")
	return src, func() {}, err
}

func TestRedrive(t *testing.T) {
	brokertest.RunRedrive(t, func(t *testing.T, s brokertest.Setup) brokertest.RedrivePipeline {
		return redrivePipeline{start(t, s, nil)}
	})
}
