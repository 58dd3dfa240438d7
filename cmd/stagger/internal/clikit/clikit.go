// Package clikit is what the stagger command and its companion stagger-store
// share: the command registry and dispatcher, the exit codes, the signal
// handling, the flag style and the version command.
//
// Each subcommand lives in its own file of its program and registers itself
// in init, so the dispatcher here never changes when a subcommand is added.
package clikit

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"

	"github.com/staggerhq/stagger/internal/redact"
)

// Exit codes shared by every subcommand; docs/cli.md has the table.
const (
	ExitOK          = 0   // success
	ExitFail        = 1   // the run failed, or its verdict is failure (a check failed)
	ExitUsage       = 2   // bad flags or input: nothing was done
	ExitInterrupted = 130 // SIGINT (Ctrl-C) stopped the run: 128 + 2, as shells report it
	ExitTerminated  = 143 // SIGTERM stopped a run that has an end of its own: 128 + 15
)

// Command is one subcommand.
type Command struct {
	Name    string
	Summary string
	// Run executes the subcommand with its arguments (after the name) and
	// returns the process exit code.
	Run func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

// Commands are the registered commands of this program, by name.
var Commands = map[string]Command{}

// Register adds a command; it panics if the name is taken.
func Register(c Command) {
	if _, dup := Commands[c.Name]; dup {
		panic("stagger: duplicate command " + c.Name)
	}
	Commands[c.Name] = c
}

// Main runs the process's command line (os.Args) and exits with its code.
func Main() {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	// After the first signal the command shuts down cleanly (the proxy writes
	// its report, a worker lets in-flight jobs finish); a second one ends the
	// process at once (see runSignals). The second signal is caught, not left
	// to its default action: a process started with SIGINT ignored (a
	// background job of a script) would otherwise never see it.
	os.Exit(RunSignals(sigs, func() {}, os.Args[1:], os.Stdout, os.Stderr))
}

// OnExitNow, if set, runs when a second signal ends the process at once:
// stagger-store kills the process groups of running --exec commands there.
var OnExitNow func()

// exitNow ends the process at once on a second signal: it runs OnExitNow
// and exits with the signal's code.
var exitNow = func(s os.Signal) {
	if OnExitNow != nil {
		OnExitNow()
	}
	os.Exit(signalCode(s))
}

// signalCode is the exit code of a process stopped by s: 130 for SIGINT,
// 143 for SIGTERM.
func signalCode(s os.Signal) int {
	if s == syscall.SIGTERM {
		return ExitTerminated
	}
	return ExitInterrupted
}

// stopsOnSIGTERM are the commands that run until they are stopped: SIGTERM
// is their ordinary end (a service manager stopping them), so they exit with
// their own code, 0 after a clean shutdown.
var stopsOnSIGTERM = map[string]bool{"proxy": true, "queue work": true, "ui": true}

// RunSignals runs the command line with a context that the first signal
// from sigs cancels (after calling onSignal), and returns the process exit
// code: the command's own, ExitInterrupted if SIGINT stopped it, whatever
// the command's verdict, and ExitTerminated if SIGTERM stopped a command
// not in stopsOnSIGTERM.
//
// A second signal while the command shuts down calls exitNow, which does
// not return.
func RunSignals(sigs <-chan os.Signal, onSignal func(), args []string, stdout, stderr io.Writer) int {
	ctx, cancel := context.WithCancel(context.Background())
	caught := make(chan os.Signal, 1)
	finished := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case s := <-sigs:
			onSignal()
			caught <- s
			cancel()
		case <-finished:
			return
		}
		select {
		case s := <-sigs:
			exitNow(s)
		case <-finished:
		}
	}()
	code := Run(ctx, args, stdout, stderr)
	close(finished)
	cancel()
	<-done
	select {
	case s := <-caught:
		switch {
		case s == os.Interrupt:
			return ExitInterrupted
		case s == syscall.SIGTERM && !stopsOnSIGTERM[commandPath(args)]:
			return ExitTerminated
		}
	default:
	}
	return code
}

// commandPath is the command args name: "proxy", or "queue work" for a
// command with subcommands.
func commandPath(args []string) string {
	if len(args) == 0 {
		return ""
	}
	if len(args) > 1 && args[0] == "queue" {
		return args[0] + " " + args[1]
	}
	return args[0]
}

// Run runs the command line args (without the program's name) and returns
// the exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		Usage(stderr)
		return ExitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help":
		Usage(stdout)
		return ExitOK
	case "help":
		return runHelp(ctx, args[1:], stdout, stderr)
	case "-version", "--version":
		return Commands["version"].Run(ctx, args[1:], stdout, stderr)
	}
	c, ok := Commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "stagger: unknown command %q\n\n", redact.String(args[0]))
		Usage(stderr)
		return ExitUsage
	}
	return c.Run(ctx, args[1:], stdout, stderr)
}

// runHelp is "stagger help [command [subcommand]]": the overview, or the
// command's own --help.
func runHelp(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" {
		Usage(stdout)
		return ExitOK
	}
	c, ok := Commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "stagger help: unknown command %q\n\n", redact.String(args[0]))
		Usage(stderr)
		return ExitUsage
	}
	return c.Run(ctx, append(append([]string(nil), args[1:]...), "--help"), stdout, stderr)
}

// Usage prints the overview of the commands.
func Usage(w io.Writer) {
	fmt.Fprintln(w, "stagger — retries that do not stampede")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: stagger <command> [flags]")
	fmt.Fprintln(w, "       stagger help <command>   (or stagger <command> --help): the command's flags")
	fmt.Fprintln(w, "       stagger --version")
	fmt.Fprintln(w)
	names := make([]string, 0, len(Commands))
	for n := range Commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-8s %s\n", n, Commands[n].Summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Exit status: 0 ok; 1 the run failed or a check failed; 2 bad flags or input,")
	fmt.Fprintln(w, "nothing was done; 130 interrupted (SIGINT); 143 terminated (SIGTERM), except")
	fmt.Fprintln(w, "that proxy, queue work and ui stop on SIGTERM as their ordinary end.")
}
