// Command stagger is the command line of the stagger toolkit: the retry lab,
// the simulator, the counting fault proxy and the durable queue.
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
)

// Exit codes shared by every subcommand.
const (
	exitOK    = 0 // success
	exitFail  = 1 // the run worked but its verdict is failure (a check failed)
	exitUsage = 2 // bad flags or input: nothing was done
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
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	if args[0] == "--version" || args[0] == "-version" {
		return commands["version"].run(ctx, args[1:], stdout, stderr)
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "stagger: unknown command %q\n\n", args[0])
		usage(stderr)
		return exitUsage
	}
	return c.run(ctx, args[1:], stdout, stderr)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "stagger — retries that do not stampede")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: stagger <command> [flags]   (stagger <command> --help for its flags)")
	fmt.Fprintln(w)
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-8s %s\n", n, commands[n].summary)
	}
}
