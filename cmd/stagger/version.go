package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
)

func init() {
	register(command{name: "version", summary: "print the build's module version", run: runVersion})
}

func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("stagger version", flag.ContinueOnError)
	help := func(w io.Writer) {
		fmt.Fprintln(w, "Usage: stagger version")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Prints the module version of this build ((devel) for a source build).")
	}
	if code, ok := parseFlags(fs, args, stdout, stderr, help); !ok {
		return code
	}
	v := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		v = bi.Main.Version
	}
	fmt.Fprintln(stdout, "stagger", v)
	return exitOK
}
