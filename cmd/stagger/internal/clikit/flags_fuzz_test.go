package clikit

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

// FuzzParseFlags: any command line is parsed or refused with exit code 2
// (ExitUsage), or answered as help with 0; never a panic, never another code.
func FuzzParseFlags(f *testing.F) {
	for _, s := range []string{"--n 3 --d 1s", "--n=-1", "--n true", "-h", "--help", "--d NaN", "pos", "--x", "--l a,b --l c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var n int
		var d time.Duration
		var l []string
		fs := flag.NewFlagSet("fuzz", flag.ContinueOnError)
		fs.Var(IntValue{P: &n, Min: 0, Max: 100}, "n", "a number")
		fs.Var(DurationValue{P: &d, Max: time.Hour}, "d", "a duration")
		fs.Var(&ListValue{P: &l}, "l", "a list")
		code, ok := ParseFlags(fs, strings.Fields(s), io.Discard, io.Discard, func(io.Writer) {})
		if !ok && code != ExitUsage && code != ExitOK {
			t.Fatalf("%q: exit code %d", s, code)
		}
	})
}
