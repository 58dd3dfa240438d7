package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/staggerhq/stagger/internal/simkit"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retryhttp"
)

// helpCommands is every command line that has a --help of its own.
func helpCommands() [][]string {
	var cmds [][]string
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		cmds = append(cmds, []string{n})
	}
	for n := range queueSubcommands {
		cmds = append(cmds, []string{"queue", n})
	}
	cmds = append(cmds, []string{"broker", "redrive"})
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
		noFlags := map[string]bool{"version": true, "queue": true, "broker": true, "sim": true, "sim list": true}
		if !noFlags[strings.Join(args, " ")] && !ourStyle.MatchString(out) {
			t.Errorf("%q --help lists no --flag:\n%s", args, out)
		}
	}
}

// The read-only queue subcommands neither list nor accept the flags that
// only matter to writing or running jobs.
func TestQueueReadOnlyFlags(t *testing.T) {
	writeOnly := []string{"--sqlite-sync", "--max-payload", "--base", "--cap", "--lease", "--timeout"}
	for _, sub := range []string{"stats", "dead", "show"} {
		_, out, _ := runCLI(t, "queue", sub, "--help")
		for _, f := range writeOnly {
			if strings.Contains(out, f) {
				t.Errorf("queue %s --help lists %s:\n%s", sub, f, out)
			}
		}
		code, _, errOut := runCLI(t, "queue", sub, "--sqlite-sync", "NORMAL")
		if code != exitUsage || !strings.Contains(errOut, "unknown flag --sqlite-sync") {
			t.Errorf("queue %s --sqlite-sync: exit %d, %q; want exit 2", sub, code, errOut)
		}
	}
	for sub, want := range map[string][]string{
		"enqueue":  {"--sqlite-sync", "--max-payload"},
		"requeue":  {"--sqlite-sync"},
		"run-once": {"--sqlite-sync", "--base", "--cap", "--lease", "--timeout"},
		"work":     {"--sqlite-sync", "--base", "--cap", "--lease", "--timeout"},
	} {
		_, out, _ := runCLI(t, "queue", sub, "--help")
		for _, f := range want {
			if !strings.Contains(out, "  "+f+" ") {
				t.Errorf("queue %s --help does not list %s", sub, f)
			}
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
// ends a run that has an end of its own with 143, and is the ordinary stop
// of a worker.
func TestSignalExitCodes(t *testing.T) {
	db := tempDB(t)
	if code, _, e := cli(t, "", "enqueue", "--db", db, "--id", "x"); code != exitOK {
		t.Fatal(e)
	}
	for _, tc := range []struct {
		sig  os.Signal
		args []string
		want int
	}{
		{os.Interrupt, []string{"lab", "--outage", "10m", "--callers", "1", "--report", ""}, exitInterrupted},
		{syscall.SIGTERM, []string{"lab", "--outage", "10m", "--callers", "1", "--report", ""}, exitTerminated},
		{os.Interrupt, []string{"queue", "work", "--db", db, "--exec", "true", "--poll", "1h"}, exitInterrupted},
		{syscall.SIGTERM, []string{"queue", "work", "--db", db, "--exec", "true", "--poll", "1h"}, exitOK},
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

// The --http handler classes every failure status as retryhttp's
// DefaultClassify does, and --retry-status overrides it per endpoint.
func TestQueueHTTPClassifiesAsRetryhttp(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code := 0
		for _, c := range r.URL.Query()["code"] {
			code, _ = strconv.Atoi(c)
		}
		if r.URL.Query().Get("noretry") == "1" {
			w.Header().Set(retryhttp.NoRetryHeader, "1")
		}
		w.WriteHeader(code)
	}))
	defer srv.Close()
	classOf := func(classify retryhttp.Classifier, code int, noRetry bool) retry.Class {
		t.Helper()
		url := srv.URL + "/?code=" + strconv.Itoa(code)
		if noRetry {
			url += "&noretry=1"
		}
		h := &httpHandler{client: srv.Client(), url: url, contentType: "text/plain", classify: classify, now: time.Now}
		err := h.handle(context.Background(), []byte("x"))
		if err == nil {
			t.Fatalf("%d: no error", code)
		}
		c, _ := retry.Classify(err)
		return c
	}
	for code := 400; code < 600; code++ {
		want, _ := retryhttp.StatusClass(code)
		if got := classOf(nil, code, false); got != want {
			t.Errorf("%d: %v, retryhttp says %v", code, got, want)
		}
	}
	if got := classOf(nil, 503, true); got != retry.ClassPermanent {
		t.Errorf("503 with %s: %v, want permanent", retryhttp.NoRetryHeader, got)
	}
	// Where the queue must differ: a 3xx the client does not follow ends
	// the job (the Transport hands it to its caller as a response).
	if got := classOf(nil, 304, false); got != retry.ClassPermanent {
		t.Errorf("304: %v, want permanent", got)
	}
	set, err := parseStatusSet("500,520-530")
	if err != nil {
		t.Fatal(err)
	}
	custom := statusClassifier(set)
	for code, want := range map[int]retry.Class{
		500: retry.ClassRetryable, 525: retry.ClassRetryable, // listed
		503: retry.ClassPermanent, 429: retry.ClassPermanent, // retryable by default, not listed
		404: retry.ClassPermanent, 505: retry.ClassUnknown, // untouched
	} {
		if got := classOf(custom, code, false); got != want {
			t.Errorf("--retry-status 500,520-530: %d is %v, want %v", code, got, want)
		}
	}
	for _, bad := range []string{"200", "399", "600", "abc", "503-502"} {
		if _, err := parseStatusSet(bad); err == nil || !strings.Contains(err.Error(), "--retry-status") {
			t.Errorf("--retry-status %s: %v, want an error naming the flag", bad, err)
		}
	}
}
