package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/staggerhq/stagger/internal/redact"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retryhttp"
)

// statusSet is a set of HTTP statuses written as "503,520-599".
type statusSet [600]bool

// parseStatusSet parses a comma-separated list of failure statuses and
// ranges (400-599).
func parseStatusSet(s string) (*statusSet, error) {
	var set statusSet
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		b := a
		if err == nil && isRange {
			b, err = strconv.Atoi(hi)
		}
		if err != nil || a < 400 || b > 599 || a > b {
			return nil, fmt.Errorf("--retry-status: %q is not a failure status or range within 400-599", part)
		}
		for c := a; c <= b; c++ {
			set[c] = true
		}
	}
	return &set, nil
}

// statusClassifier is the --http handler's classifier: retryhttp's
// DefaultClassify, or, with --retry-status, the listed statuses retryable
// and the statuses DefaultClassify retries that are not listed permanent.
func statusClassifier(retryable *statusSet) retryhttp.Classifier {
	if retryable == nil {
		return retryhttp.DefaultClassify
	}
	classes := map[int]retry.Class{}
	for code := 400; code < len(retryable); code++ {
		switch def, _ := retryhttp.StatusClass(code); {
		case retryable[code]:
			classes[code] = retry.ClassRetryable
		case def == retry.ClassRetryable:
			classes[code] = retry.ClassPermanent
		}
	}
	return retryhttp.Statuses(nil, classes)
}

// httpHandler POSTs the payload to one endpoint.
type httpHandler struct {
	client      *http.Client
	url         string
	contentType string
	classify    retryhttp.Classifier // statuses; nil: retryhttp.DefaultClassify
	now         func() time.Time
}

// maxErrorBody bounds how much of a response body goes into an error.
const maxErrorBody = 512

// handle is a retry.Handler that classes what it gets as a retryhttp
// Transport does. A 2xx is done. Transport errors are classed by
// retryhttp.ErrorClass: refused and reset connections and timeouts
// retryable, an unknown host and certificate errors permanent, anything
// else (a canceled attempt) of no class. Statuses are classed by h.classify:
// by default 408, 429, 502, 503 and 504 retryable, honouring Retry-After;
// 501 and the other 4xx permanent; 500 and the other 5xx of no class, which
// the queue hands back when the job's lease runs out. Stagger-No-Retry makes
// any answer permanent.
//
// Where it must differ: a Transport hands a 1xx or 3xx answer to its caller
// as a response, but a job has to end done or not, and a POST answered with
// a redirect the client did not follow is not done however often it is
// repeated, so those are permanent.
func (h *httpHandler) handle(ctx context.Context, payload []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(payload))
	if err != nil {
		return retry.Permanent(err)
	}
	req.Header.Set("Content-Type", h.contentType)
	if d, ok := retry.DeliveryFrom(ctx); ok {
		// The receiver's inbox deduplicates on this key.
		req.Header.Set("Idempotency-Key", d.ID)
		req.Header.Set("Stagger-Attempt", strconv.Itoa(d.Attempt))
	}
	resp, err := h.client.Do(req)
	if err != nil {
		err = fmt.Errorf("POST %s: %w", redact.String(h.url), redact.Error(err, h.url))
		switch retryhttp.ErrorClass(err) {
		case retry.ClassRetryable:
			return retry.Retryable(err)
		case retry.ClassPermanent:
			return retry.Permanent(err)
		}
		return err // canceled by the worker: no class, the job is released
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	err = fmt.Errorf("POST %s: %s", redact.String(h.url), resp.Status)
	if tail := strings.TrimSpace(string(body)); tail != "" {
		err = fmt.Errorf("%w: %s", err, tail)
	}
	classify := h.classify
	if classify == nil {
		classify = retryhttp.DefaultClassify
	}
	class := retry.ClassPermanent // a 1xx or 3xx: see above
	if cerr := classify(req, resp, nil); cerr != nil {
		class, _ = retry.Classify(cerr)
	}
	if resp.Header.Get(retryhttp.NoRetryHeader) == "1" {
		class = retry.ClassPermanent
	}
	switch class {
	case retry.ClassRetryable:
		if d, ok := retryhttp.ParseRetryAfter(resp.Header.Get("Retry-After"), h.now()); ok {
			return retry.After(err, d)
		}
		return retry.Retryable(err)
	case retry.ClassPermanent:
		return retry.Permanent(err)
	}
	return err
}

// Exit codes of an --exec command (sysexits.h).
const (
	exitTempFail = 75 // EX_TEMPFAIL: retryable
	exitDataErr  = 65 // EX_DATAERR: permanent
)

// execHandler runs a shell command with the payload on stdin.
type execHandler struct {
	cmd string
}

// handle is a retry.Handler: exit 0 done, 75 retryable, 65 permanent,
// anything else (other codes, signals, a failure to start) unknown. When
// ctx ends while the command runs, its process group is killed and the
// error wraps ctx's: the worker releases the job at shutdown, as it does
// for --http.
func (h *execHandler) handle(ctx context.Context, payload []byte) error {
	c := exec.CommandContext(ctx, "/bin/sh", "-c", h.cmd)
	c.Stdin = bytes.NewReader(payload)
	var stderr tailBuffer
	c.Stderr = &stderr
	c.Stdout = io.Discard
	c.Env = os.Environ()
	if d, ok := retry.DeliveryFrom(ctx); ok {
		c.Env = append(c.Env, "STAGGER_JOB_ID="+d.ID, "STAGGER_ATTEMPT="+strconv.Itoa(d.Attempt),
			"STAGGER_MAX_ATTEMPTS="+strconv.Itoa(d.MaxAttempts))
	}
	// Kill the whole process group when the attempt is canceled.
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
	c.WaitDelay = time.Second
	if err := c.Start(); err != nil {
		return fmt.Errorf("exec %q: %w", h.cmd, err)
	}
	execGroups.Store(c.Process.Pid, struct{}{})
	err := c.Wait()
	execGroups.Delete(c.Process.Pid)
	if err == nil {
		return nil
	}
	if cerr := ctx.Err(); cerr != nil {
		// The worker canceled the attempt (shutdown, or the attempt's own
		// timeout) and the command was killed: the failure says nothing
		// about the job. Wrapping the context's error lets the attempt step
		// see it: at shutdown the job is released, not judged.
		return fmt.Errorf("exec %q: %w (%v)", h.cmd, cerr, err)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		msg := fmt.Errorf("exec %q: %v", h.cmd, ee)
		if tail := strings.TrimSpace(stderr.String()); tail != "" {
			msg = fmt.Errorf("%w: %s", msg, tail)
		}
		switch ee.ExitCode() {
		case exitTempFail:
			return retry.Retryable(msg)
		case exitDataErr:
			return retry.Permanent(msg)
		}
		return msg
	}
	return fmt.Errorf("exec %q: %w", h.cmd, err)
}

// execGroups holds the process groups of the --exec commands running now,
// which a second signal kills before the process exits (killExecGroups).
var execGroups sync.Map // pid (= pgid) → struct{}

// killExecGroups kills every running --exec command's process group.
func killExecGroups() {
	execGroups.Range(func(pid, _ any) bool {
		syscall.Kill(-pid.(int), syscall.SIGKILL)
		return true
	})
}

// tailBuffer keeps the last 1 KiB written to it.
type tailBuffer struct{ b []byte }

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > 1024 {
		t.b = append(t.b[:0], t.b[len(t.b)-1024:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(t.b) }
