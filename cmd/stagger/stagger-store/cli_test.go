package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retryhttp"
)

// runCLI runs the command line in process and returns its exit code and
// output.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// runWithSignal runs the command line through runSignals and delivers sig
// once the command has started.
func runWithSignal(t *testing.T, sig os.Signal, args ...string) (code int, stderr string) {
	t.Helper()
	sigs := make(chan os.Signal, 1)
	sigs <- sig
	var out, errb bytes.Buffer
	code = runSignals(sigs, func() {}, args, &out, &errb)
	return code, errb.String()
}

// SIGINT ends `queue work` with 130; SIGTERM is a worker's ordinary stop,
// exit 0.
func TestQueueSignalExitCodes(t *testing.T) {
	db := tempDB(t)
	if code, _, e := cli(t, "", "enqueue", "--db", db, "--id", "x"); code != exitOK {
		t.Fatal(e)
	}
	for _, tc := range []struct {
		sig  os.Signal
		want int
	}{{os.Interrupt, exitInterrupted}, {syscall.SIGTERM, exitOK}} {
		args := []string{"queue", "work", "--db", db, "--exec", "true", "--poll", "1h"}
		if code, errOut := runWithSignal(t, tc.sig, args...); code != tc.want {
			t.Errorf("%v to %q: exit %d, want %d (%s)", tc.sig, args, code, tc.want, errOut)
		}
	}
}

// Every --help of the queue and broker commands lists its flags in the one
// style ("  --name ARG  usage"), and `stagger help CMD SUB` prints the same.
func TestStoreHelp(t *testing.T) {
	cmds := [][]string{{"queue"}, {"broker"}, {"broker", "redrive"}}
	for n := range queueSubcommands {
		cmds = append(cmds, []string{"queue", n})
	}
	ourStyle := regexp.MustCompile(`(?m)^  --[a-z][a-z-]*`)
	for _, args := range cmds {
		code, out, errOut := runCLI(t, append(args, "--help")...)
		if code != exitOK || errOut != "" {
			t.Errorf("%q --help: exit %d, stderr %q", args, code, errOut)
			continue
		}
		if len(args) == 2 && !ourStyle.MatchString(out) {
			t.Errorf("%q --help lists no --flag:\n%s", args, out)
		}
		if code, got, _ := runCLI(t, append([]string{"help"}, args...)...); code != exitOK || got != out {
			t.Errorf("help %q: exit %d, output differs from --help", args, code)
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

// docs/cli.md's command table names every queue subcommand.
func TestCLIDocListsQueueCommands(t *testing.T) {
	text, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "cli.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(text)
	cmdTable := doc[strings.Index(doc, "| command |"):]
	cmdTable = cmdTable[:strings.Index(cmdTable, "\n\n")]
	for name := range queueSubcommands {
		if !strings.Contains(cmdTable, "`"+name+"`") && !strings.Contains(cmdTable, "`stagger queue "+name) {
			t.Errorf("docs/cli.md's command table does not list stagger queue %s", name)
		}
	}
}
