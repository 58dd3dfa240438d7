package main

import (
	"context"
	"io"

	"github.com/staggerhq/stagger/cmd/stagger/internal/clikit"
)

// The names this package's files use for the code stagger and stagger-store
// share (internal/clikit): the files kept them when that code moved, so their
// history and the changes made to them elsewhere still apply.

const (
	exitOK          = clikit.ExitOK
	exitFail        = clikit.ExitFail
	exitUsage       = clikit.ExitUsage
	exitInterrupted = clikit.ExitInterrupted
	exitTerminated  = clikit.ExitTerminated
)

type (
	command       = clikit.Command
	intValue      = clikit.IntValue
	durationValue = clikit.DurationValue
	listValue     = clikit.ListValue
)

var (
	register   = clikit.Register
	parseFlags = clikit.ParseFlags
	usageError = clikit.UsageError
	printFlags = clikit.PrintFlags
	flagWasSet = clikit.FlagWasSet
	runSignals = clikit.RunSignals
)

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return clikit.Run(ctx, args, stdout, stderr)
}
