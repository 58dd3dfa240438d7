package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/staggerhq/stagger/internal/simkit"
)

// helpCommands is every command line of this program that has a --help of
// its own (stagger-store's tests check the commands it runs).
func helpCommands() [][]string {
	var cmds [][]string
	names := make([]string, 0, len(commands))
	for n := range commands {
		if !slices.ContainsFunc(storeCommands, func(c command) bool { return c.Name == n }) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		cmds = append(cmds, []string{n})
	}
	cmds = append(cmds, []string{"sim", "list"})
	for _, s := range simkit.Scenarios() {
		cmds = append(cmds, []string{"sim", s.Name})
	}
	return cmds
}

// Every --help lists its flags in one style, "  --name ARG  usage": no flag
// is shown the flag package's way ("  -name type").
func TestHelpFlagStyle(t *testing.T) {
	goStyle := regexp.MustCompile(`(?m)^\s+-[a-z][a-z-]*( [a-z]+)?$`)
	ourStyle := regexp.MustCompile(`(?m)^  --[a-z][a-z-]*`)
	for _, args := range helpCommands() {
		code, out, errOut := runCLI(t, append(args, "--help")...)
		if code != exitOK || errOut != "" {
			t.Errorf("%q --help: exit %d, stderr %q", args, code, errOut)
			continue
		}
		if m := goStyle.FindString(out); m != "" {
			t.Errorf("%q --help shows %q in the flag package's style:\n%s", args, m, out)
		}
		// The command lists and "version" have no flags to list.
		noFlags := map[string]bool{"version": true, "sim": true, "sim list": true}
		if !noFlags[strings.Join(args, " ")] && !ourStyle.MatchString(out) {
			t.Errorf("%q --help lists no --flag:\n%s", args, out)
		}
	}
}

// `stagger help CMD [SUB]` prints what `stagger CMD [SUB] --help` prints.
func TestHelpCommand(t *testing.T) {
	for _, args := range helpCommands() {
		_, want, _ := runCLI(t, append(args, "--help")...)
		code, got, errOut := runCLI(t, append([]string{"help"}, args...)...)
		if code != exitOK || got != want || errOut != "" {
			t.Errorf("help %q: exit %d, stderr %q, output differs from --help: %v", args, code, errOut, got != want)
		}
	}
	_, overview, _ := runCLI(t, "--help")
	for _, args := range [][]string{{"help"}, {"help", "help"}} {
		if code, out, _ := runCLI(t, args...); code != exitOK || out != overview {
			t.Errorf("%q: exit %d, want the overview", args, code)
		}
	}
	code, out, errOut := runCLI(t, "help", "nope")
	if code != exitUsage || out != "" || !strings.Contains(errOut, `unknown command "nope"`) {
		t.Errorf("help nope: exit %d, stdout %q, stderr %q; want exit 2", code, out, errOut)
	}
	if code, _, errOut := runCLI(t); code != exitUsage || !strings.Contains(errOut, "Usage: stagger") {
		t.Errorf("no arguments: exit %d, stderr %q; want exit 2 and the usage", code, errOut)
	}
}

// runWithSignal runs the command line through runSignals and delivers sig
// once the command has started (for the lab: at once; it honours a
// cancelled context at any point).
func runWithSignal(t *testing.T, sig os.Signal, args ...string) (code int, stderr string) {
	t.Helper()
	sigs := make(chan os.Signal, 1)
	sigs <- sig
	var out, errb bytes.Buffer
	code = runSignals(sigs, func() {}, args, &out, &errb)
	return code, errb.String()
}

// SIGINT ends every command with 130, whatever its own verdict; SIGTERM
// ends a run that has an end of its own with 143 (stagger-store's tests
// check that it is the ordinary stop of a worker).
func TestSignalExitCodes(t *testing.T) {
	for _, tc := range []struct {
		sig  os.Signal
		args []string
		want int
	}{
		{os.Interrupt, []string{"lab", "--outage", "10m", "--callers", "1", "--report", ""}, exitInterrupted},
		{syscall.SIGTERM, []string{"lab", "--outage", "10m", "--callers", "1", "--report", ""}, exitTerminated},
	} {
		if code, errOut := runWithSignal(t, tc.sig, tc.args...); code != tc.want {
			t.Errorf("%v to %q: exit %d, want %d (%s)", tc.sig, tc.args, code, tc.want, errOut)
		}
	}
	// Without a signal the command's own code stands, whatever it is.
	var out, errb bytes.Buffer
	if code := runSignals(make(chan os.Signal), func() {}, []string{"lab", "--bogus"}, &out, &errb); code != exitUsage {
		t.Errorf("lab --bogus without a signal: exit %d, want 2", code)
	}
}

// cliChild makes the test binary act as `stagger` when it was started by
// startCLIChild: it runs main, which exits. Tests that start a child call
// it first.
func cliChild() {
	if args := os.Getenv("STAGGER_CLI_CHILD"); args != "" {
		os.Args = append([]string{"stagger"}, strings.Split(args, "\x1f")...)
		main()
	}
}

// startCLIChild runs `stagger args...` as a real process (the test binary
// running only test, which calls cliChild) and returns it with its stdout
// after the first line, which it returns too. The command must print a line
// once it is running.
func startCLIChild(t *testing.T, test string, args ...string) (*exec.Cmd, *bufio.Reader, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a process")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$")
	cmd.Env = append(os.Environ(), "STAGGER_CLI_CHILD="+strings.Join(args, "\x1f"))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	r := bufio.NewReader(stdout)
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("child said nothing: %v", err)
	}
	return cmd, r, line
}

// A real process: Ctrl-C (SIGINT) stops `stagger proxy` with exit 130,
// after it printed its summary and wrote its report.
func TestProxyProcessSIGINT(t *testing.T) {
	cliChild()
	up := newUpstream(t, nil)
	rep := filepath.Join(t.TempDir(), "proxy.html")
	// The first line (the address) comes once the proxy listens, after main
	// installed its signal handler.
	cmd, r, _ := startCLIChild(t, "TestProxyProcessSIGINT", "proxy", "--listen", "127.0.0.1:0", "--upstream", up.srv.URL, "--report", rep)
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(r)
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitInterrupted {
		t.Fatalf("child: %v, want exit status %d\n%s", err, exitInterrupted, rest)
	}
	if !strings.Contains(string(rest), "0 attempts") {
		t.Errorf("no summary after SIGINT: %s", rest)
	}
	if _, err := os.Stat(rep); err != nil {
		t.Errorf("no report after SIGINT: %v", err)
	}
}
