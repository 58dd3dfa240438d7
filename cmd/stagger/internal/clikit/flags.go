package clikit

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/staggerhq/stagger/internal/redact"
)

// Flag values that check their rule when they are set, so that every bad
// flag is reported with its name and the rule it broke before anything runs.

// IntValue is a whole number in [Min, Max].
type IntValue struct {
	P        *int
	Min, Max int
}

func (v IntValue) String() string {
	if v.P == nil {
		return ""
	}
	return strconv.Itoa(*v.P)
}

func (v IntValue) Set(s string) error {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return fmt.Errorf("want a whole number between %d and %d", v.Min, v.Max)
	}
	if n < v.Min || n > v.Max {
		return fmt.Errorf("must be between %d and %d, got %d", v.Min, v.Max, n)
	}
	*v.P = n
	return nil
}

// UintValue is a non-negative 64-bit whole number.
type UintValue struct{ P *uint64 }

func (v UintValue) String() string {
	if v.P == nil {
		return ""
	}
	return strconv.FormatUint(*v.P, 10)
}

func (v UintValue) Set(s string) error {
	n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return fmt.Errorf("want a whole number between 0 and %d", uint64(math.MaxUint64))
	}
	*v.P = n
	return nil
}

// DurationValue is a Go duration up to Max: > 0 when Positive is set,
// otherwise >= 0.
type DurationValue struct {
	P        *time.Duration
	Positive bool
	Max      time.Duration
}

func (v DurationValue) String() string {
	if v.P == nil {
		return ""
	}
	return v.P.String()
}

func (v DurationValue) Set(s string) error {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return errors.New("want a duration with a unit, such as 700ms or 1.5s")
	}
	return v.set(d)
}

// set checks d against v's rule and stores it.
func (v DurationValue) set(d time.Duration) error {
	switch {
	case v.Positive && d <= 0:
		return fmt.Errorf("must be > 0, got %v", d)
	case d < 0:
		return fmt.Errorf("must be >= 0, got %v", d)
	case d > v.Max:
		return fmt.Errorf("must be <= %v, got %v", v.Max, d)
	}
	*v.P = d
	return nil
}

// LatencyValue is "auto" or a duration in [0, Max].
type LatencyValue struct {
	D    *time.Duration
	Auto *bool
	Max  time.Duration
}

func (v LatencyValue) String() string {
	if v.Auto == nil || *v.Auto {
		return "auto"
	}
	return v.D.String()
}

func (v LatencyValue) Set(s string) error {
	if strings.TrimSpace(s) == "auto" {
		*v.Auto = true
		return nil
	}
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return errors.New("want auto or a duration with a unit, such as 25ms")
	}
	if err := (DurationValue{P: v.D, Max: v.Max}).set(d); err != nil {
		return err
	}
	*v.Auto = false
	return nil
}

// ListValue collects a repeatable flag; each use may hold a comma-separated
// list. Check, if set, validates one element as it is set.
type ListValue struct {
	P     *[]string
	set   bool
	Check func(string) error
}

func (v *ListValue) String() string {
	if v.P == nil {
		return ""
	}
	return strings.Join(*v.P, ",")
}

func (v *ListValue) Set(s string) error {
	if !v.set { // the first use replaces the default
		*v.P, v.set = nil, true
	}
	for _, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		if v.Check != nil {
			if err := v.Check(e); err != nil {
				return err
			}
		}
		*v.P = append(*v.P, e)
	}
	return nil
}

// invalidValue matches the value in the flag package's "invalid value %q
// for flag -x".
var invalidValue = regexp.MustCompile(`invalid value "(?:[^"\\]|\\.)*" for`)

// parseError turns the flag package's "invalid value ... for flag -x: ..."
// into a message that names the flag as it is written on the command line.
func parseError(err error) string {
	// The flag package repeats a value it refuses: a value holding a
	// connection string is shown with its secrets hidden.
	msg := invalidValue.ReplaceAllStringFunc(err.Error(), func(m string) string {
		v, uerr := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(m, "invalid value "), " for"))
		if uerr != nil {
			return "invalid value (not shown) for"
		}
		return "invalid value " + strconv.Quote(redact.String(v)) + " for"
	})
	msg = redact.Text(msg)
	msg = strings.Replace(msg, "for flag -", "for flag --", 1)
	if i := strings.Index(msg, " for -"); i >= 0 { // invalid boolean value "x" for -json
		msg = msg[:i] + " for --" + msg[i+len(" for -"):]
	}
	msg = strings.Replace(msg, "flag provided but not defined: -", "unknown flag --", 1)
	msg = strings.Replace(msg, "flag needs an argument: -", "flag needs an argument: --", 1)
	// The flag package's own boolean and number flags say only "parse
	// error" or "value out of range".
	if strings.HasPrefix(msg, "invalid boolean value") {
		msg = strings.Replace(msg, ": parse error", ": want true or false", 1)
	}
	msg = strings.Replace(msg, ": parse error", ": want a whole number", 1)
	msg = strings.Replace(msg, ": value out of range", ": the number is too large", 1)
	return msg
}

// CheckReportPath refuses a report path whose directory does not exist or
// that names a directory, so that the lab, the simulator and the proxy say
// so before they run instead of losing the run's report at the end.
func CheckReportPath(path string) error {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("%s is a directory", path)
	}
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("directory of %s: %w", path, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	return nil
}

// FlagWasSet reports whether name was given on the command line.
func FlagWasSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			set = true
		}
	})
	return set
}

// ParseFlags is how every subcommand reads its flags. The flag package
// prints nothing: --help prints help(stdout) and ends with ExitOK; a bad
// flag prints one line naming it (as written on the command line) and a
// hint, and ends with ExitUsage; positional arguments are refused, since
// every setting is a flag. ok is true when the command should go on.
func ParseFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer, help func(io.Writer)) (code int, ok bool) {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			help(stdout)
			return ExitOK, false
		}
		return UsageError(stderr, fs.Name(), "%s", parseError(err)), false
	}
	if fs.NArg() > 0 {
		return UsageError(stderr, fs.Name(), "unexpected argument %q (every setting is a flag)", redact.String(fs.Arg(0))), false
	}
	return ExitOK, true
}

// UsageError prints "<command>: <message>" and the --help hint on stderr
// and returns ExitUsage.
func UsageError(stderr io.Writer, command, format string, a ...any) int {
	fmt.Fprintf(stderr, "%s: %s\nRun '%s --help' for the flags.\n", command, fmt.Sprintf(format, a...), command)
	return ExitUsage
}

// PrintFlags prints fs's flags in the one style of every --help:
//
//	--name ARG  usage (default value)
//
// sorted by name, then a line that says what D, N and X stand for, if a flag
// uses them. ARG is placeholders[name] if set, else it follows from the
// flag: none for a boolean, D for a duration, N for a whole number, X for a
// decimal number, VALUE otherwise. The default is left out when it is
// empty, false or zero, or when the usage states it.
func PrintFlags(w io.Writer, fs *flag.FlagSet, placeholders map[string]string) {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	used := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) {
		kind, usage := flag.UnquoteUsage(f)
		arg := placeholders[f.Name]
		if arg == "" {
			arg = flagArg(kind, f)
		}
		for _, p := range strings.Split(arg, "|") {
			used[p] = true
		}
		if arg != "" {
			arg = " " + arg
		}
		def := ""
		switch f.DefValue {
		case "", "false", "0", "0s":
		default:
			if !strings.Contains(usage, "(default") {
				def = " (default " + f.DefValue + ")"
			}
		}
		// A usage of several lines continues in the usage column.
		usage = strings.ReplaceAll(usage, "\n", "\n\t")
		fmt.Fprintf(tw, "  --%s%s\t%s%s\n", f.Name, arg, usage, def)
	})
	tw.Flush()
	var legend []string
	for _, l := range []struct{ p, means string }{
		{"D", "D: a duration with a unit (700ms, 1.5s, 2m)"},
		{"N", "N: a whole number"},
		{"X", "X: a decimal number"},
	} {
		if used[l.p] {
			legend = append(legend, l.means)
		}
	}
	if len(legend) > 0 {
		fmt.Fprintf(w, "\n%s.\n", strings.Join(legend, "; "))
	}
}

// flagArg is the placeholder of a flag that takes a value; kind is the type
// name flag.UnquoteUsage found ("value" for a flag.Value of this package).
func flagArg(kind string, f *flag.Flag) string {
	if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
		return ""
	}
	switch f.Value.(type) {
	case DurationValue:
		return "D"
	case IntValue, UintValue:
		return "N"
	case LatencyValue:
		return "auto|D"
	}
	if ph, ok := f.Value.(interface{ Placeholder() string }); ok && ph.Placeholder() != "" {
		return ph.Placeholder()
	}
	switch kind {
	case "duration":
		return "D"
	case "int", "int64", "uint", "uint64":
		return "N"
	case "float":
		return "X"
	case "value": // a flag.Value from elsewhere: judge by its default
		if _, err := time.ParseDuration(f.DefValue); err == nil && f.DefValue != "0" {
			return "D"
		}
		if _, err := strconv.ParseInt(f.DefValue, 10, 64); err == nil {
			return "N"
		}
		if _, err := strconv.ParseFloat(f.DefValue, 64); err == nil {
			return "X"
		}
	}
	return "VALUE"
}
