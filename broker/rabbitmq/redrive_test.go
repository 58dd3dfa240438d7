package rabbitmq

import (
	"context"
	"testing"
	"time"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/broker/brokertest"
	"github.com/staggerhq/stagger/internal/wait"
)

type redrivePipeline struct{ *pipeline }

// WaitDeadLetters polls until the DLQ holds n messages.
func (p redrivePipeline) WaitDeadLetters(ctx context.Context, n int) error {
	ch, err := p.conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	var w wait.Waiter
	defer w.Stop()
	for {
		qi, err := ch.QueueDeclarePassive(p.topo.DLQ, true, false, false, false, nil)
		if err != nil {
			return err
		}
		if qi.Messages >= n {
			return nil
		}
		if err := w.Wait(ctx, nil, 20*time.Millisecond); err != nil {
			return err
		}
	}
}

func (p redrivePipeline) Source(context.Context) (broker.RedriveSource, func(), error) {
	src, err := NewRedriveSource(p.conn, p.topo.DLQ)
	if err != nil {
		return nil, nil, err
	}
	return src, func() { _ = src.Close() }, nil
}

func TestRedrive(t *testing.T) {
	brokertest.RunRedrive(t, func(t *testing.T, s brokertest.Setup) brokertest.RedrivePipeline {
		p := start(t, s, nil)
		p.stopDLQ() // dead letters stay in the DLQ
		return redrivePipeline{p}
	})
}
