package kafka

import (
	"context"
	"testing"
	"time"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/broker/brokertest"
)

type redrivePipeline struct {
	*pipeline
	group string
}

func (p redrivePipeline) WaitDeadLetters(ctx context.Context, n int) error {
	for range n {
		if _, err := p.NextDeadLetter(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (p redrivePipeline) Source(ctx context.Context) (broker.RedriveSource, func(), error) {
	src, err := NewRedriveSource(ctx, RedriveSourceOptions{Brokers: p.cluster.ListenAddrs(), DLQ: p.topics.DLQ, Group: p.group, Idle: 500 * time.Millisecond})
	if err != nil {
		return nil, nil, err
	}
	return src, src.Close, nil
}

func TestRedrive(t *testing.T) {
	brokertest.RunRedrive(t, func(t *testing.T, s brokertest.Setup) brokertest.RedrivePipeline {
		return redrivePipeline{start(t, s, nil), s.Name + "-redrive"}
	})
}

func TestRedriveTransactional(t *testing.T) {
	brokertest.RunRedrive(t, func(t *testing.T, s brokertest.Setup) brokertest.RedrivePipeline {
		p := start(t, s, func(o *Options) { o.Transactional, o.TransactionalID = true, s.Name })
		return redrivePipeline{p, s.Name + "-redrive"}
	})
}
