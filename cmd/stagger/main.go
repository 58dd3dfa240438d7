// Command stagger is the command line of the stagger toolkit: the retry lab,
// the simulator, the policy check, the counting fault proxy and the durable queue.
//
// Each subcommand lives in its own file and registers itself in init, so the
// dispatcher here never changes when a subcommand is added.
package main

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
	exitOK          = 0   // success
	exitFail        = 1   // the run failed, or its verdict is failure (a check failed)
	exitUsage       = 2   // bad flags or input: nothing was done
	exitInterrupted = 130 // SIGINT (Ctrl-C) stopped the run: 128 + 2, as shells report it
	exitTerminated  = 143 // SIGTERM stopped a run that has an end of its own: 128 + 15
)

// command is one subcommand.
type command struct {
	name    string
	summary string
	// run executes the subcommand with its arguments (after the name) and
	// returns the process exit code.
	run func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

var commands = map[string]command{}

func register(c command) {
	if _, dup := commands[c.name]; dup {
		panic("stagger: duplicate command " + c.name)
	}
	commands[c.name] = c
}

func main() {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	// After the first signal the command shuts down cleanly (the proxy writes
	// its report, a worker lets in-flight jobs finish); a second one ends the
	// process at once (see runSignals). The second signal is caught, not left
	// to its default action: a process started with SIGINT ignored (a
	// background job of a script) would otherwise never see it.
	os.Exit(runSignals(sigs, func() {}, os.Args[1:], os.Stdout, os.Stderr))
}

// exitNow ends the process at once on a second signal: it kills the process
// groups of running --exec commands and exits with the signal's code.
var exitNow = func(s os.Signal) {
	killExecGroups()
	os.Exit(signalCode(s))
}

// signalCode is the exit code of a process stopped by s: 130 for SIGINT,
// 143 for SIGTERM.
func signalCode(s os.Signal) int {
	if s == syscall.SIGTERM {
		return exitTerminated
	}
	return exitInterrupted
}

// stopsOnSIGTERM are the commands that run until they are stopped: SIGTERM
// is their ordinary end (a service manager stopping them), so they exit with
// their own code, 0 after a clean shutdown.
var stopsOnSIGTERM = map[string]bool{"proxy": true, "queue work": true, "ui": true}

// runSignals runs the command line with a context that the first signal
// from sigs cancels (after calling onSignal), and returns the process exit
// code: the command's own, exitInterrupted if SIGINT stopped it, whatever
// the command's verdict, and exitTerminated if SIGTERM stopped a command
// not in stopsOnSIGTERM.
//
// A second signal while the command shuts down calls exitNow, which does
// not return.
func runSignals(sigs <-chan os.Signal, onSignal func(), args []string, stdout, stderr io.Writer) int {
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
	code := run(ctx, args, stdout, stderr)
	close(finished)
	cancel()
	<-done
	select {
	case s := <-caught:
		switch {
		case s == os.Interrupt:
			return exitInterrupted
		case s == syscall.SIGTERM && !stopsOnSIGTERM[commandPath(args)]:
			return exitTerminated
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

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(stdout)
		return exitOK
	case "help":
		return runHelp(ctx, args[1:], stdout, stderr)
	case "-version", "--version":
		return commands["version"].run(ctx, args[1:], stdout, stderr)
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "stagger: unknown command %q\n\n", redact.String(args[0]))
		usage(stderr)
		return exitUsage
	}
	return c.run(ctx, args[1:], stdout, stderr)
}

// runHelp is "stagger help [command [subcommand]]": the overview, or the
// command's own --help.
func runHelp(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" {
		usage(stdout)
		return exitOK
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "stagger help: unknown command %q\n\n", redact.String(args[0]))
		usage(stderr)
		return exitUsage
	}
	return c.run(ctx, append(append([]string(nil), args[1:]...), "--help"), stdout, stderr)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "stagger — retries that do not stampede")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: stagger <command> [flags]")
	fmt.Fprintln(w, "       stagger help <command>   (or stagger <command> --help): the command's flags")
	fmt.Fprintln(w, "       stagger --version")
	fmt.Fprintln(w)
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-8s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Exit status: 0 ok; 1 the run failed or a check failed; 2 bad flags or input,")
	fmt.Fprintln(w, "nothing was done; 130 interrupted (SIGINT); 143 terminated (SIGTERM), except")
	fmt.Fprintln(w, "that proxy, queue work and ui stop on SIGTERM as their ordinary end.")
}
