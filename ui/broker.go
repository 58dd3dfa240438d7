package ui

import (
	"context"
	"strings"

	"github.com/staggerhq/stagger/broker"
)

// BrokerDeadLetters adapts a broker's DLQ (rabbitmq, jetstream or kafka's
// RedriveSource, which live in modules of their own) to the dead-letters
// page: open connects and returns a fresh source and its close; each
// listing is a dry run of broker.Redrive, and a redrive is broker.Redrive,
// paced at the rate asked for. name names it on the page.
func BrokerDeadLetters(name string, open func(ctx context.Context) (broker.RedriveSource, func(), error)) DeadLetters {
	return brokerDead{name, open}
}

type brokerDead struct {
	name string
	open func(ctx context.Context) (broker.RedriveSource, func(), error)
}

func (b brokerDead) Name() string { return b.name }

func (b brokerDead) List(ctx context.Context, limit int) ([]DeadLetter, error) {
	var out []DeadLetter
	_, err := b.Redrive(ctx, Redrive{Limit: limit, Rate: broker.MaxRedriveRate, DryRun: true}, func(x DeadLetter) {
		out = append(out, x)
	})
	return out, err
}

func (b brokerDead) Redrive(ctx context.Context, r Redrive, each func(DeadLetter)) (RedriveResult, error) {
	src, closeSrc, err := b.open(ctx)
	if err != nil {
		return RedriveResult{}, err
	}
	defer closeSrc()
	opts := broker.RedriveOptions{Rate: r.Rate, Burst: 1, Limit: r.Limit, DryRun: r.DryRun,
		Report: func(e broker.RedriveEvent) {
			x := DeadLetter{Source: b.name, ID: e.ID, Reason: e.Reason, Attempts: e.Attempts, Error: e.Error,
				Size: len(e.Payload), To: strings.TrimSpace(e.To)}
			if !e.FirstFailure.IsZero() {
				x.At = e.FirstFailure.UnixMilli()
			}
			each(x)
		}}
	if r.Reason != "" {
		opts.Reasons = []string{r.Reason}
	}
	res, err := broker.Redrive(ctx, src, opts)
	return RedriveResult{Matched: res.Matched, Moved: res.Moved, Skipped: res.NoOrigin}, err
}
