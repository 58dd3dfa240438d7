// Package browser runs a headless Chromium for tests of the HTML report:
// it loads a local file and returns the DOM as the browser parsed it, or
// renders it to a PNG.
//
// Chromium is started as its own process group with a fresh profile
// directory and with the flags that keep it off the network (no background
// networking, component updates, sync or QUIC), so it needs nothing but
// the file. When the context ends the whole process group is killed and
// the profile removed.
package browser

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// EnvChromium names the environment variable that overrides the Chromium
// executable (a path or a name looked up in $PATH).
const EnvChromium = "STAGGER_CHROMIUM"

// candidates are the executable names tried, in order, when EnvChromium is
// not set.
var candidates = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}

// Find returns the path of a headless-capable Chromium (chromium,
// chromium-browser, google-chrome; $STAGGER_CHROMIUM overrides) or "".
func Find() string {
	if v := os.Getenv(EnvChromium); v != "" {
		p, err := exec.LookPath(v)
		if err != nil {
			return ""
		}
		return p
	}
	for _, name := range candidates {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// Require returns the Chromium path or skips the test with a clear message;
// under CI=true it fails instead of skipping.
func Require(t testing.TB) string {
	t.Helper()
	if p := Find(); p != "" {
		return p
	}
	msg := "no headless Chromium found (tried " + strings.Join(candidates, ", ") + " in $PATH); install Debian's chromium package or set " + EnvChromium
	if v := os.Getenv(EnvChromium); v != "" {
		msg = fmt.Sprintf("%s=%q is not an executable", EnvChromium, v)
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (CI=true: browser tests must run)", msg)
		return ""
	}
	t.Skipf("skipping browser test: %s", msg)
	return ""
}

// flags are passed on every run: headless, as root in a container, and off
// the network (without the background-networking flags Chromium's own
// connections are refused on a closed network and it may stall).
var flags = []string{
	"--headless",
	"--no-sandbox",
	"--disable-gpu",
	"--disable-quic",
	"--no-first-run",
	"--no-default-browser-check",
	"--disable-background-networking",
	"--disable-component-update",
	"--disable-sync",
	"--disable-extensions",
	"--disable-breakpad",
	"--disable-dev-shm-usage",
	"--mute-audio",
	"--hide-scrollbars",
	"--force-device-scale-factor=1",
}

// maxDOM bounds the DOM read back from Chromium.
const maxDOM = 64 << 20

// DumpDOM loads file:// path in headless Chromium and returns the serialized
// DOM (--headless --no-sandbox --disable-gpu --dump-dom, plus the flags
// that keep it off the network).
func DumpDOM(ctx context.Context, chromium, path string) (string, error) {
	u, err := fileURL(path)
	if err != nil {
		return "", err
	}
	var out bytes.Buffer
	if err := run(ctx, chromium, &out, "--dump-dom", u); err != nil {
		return "", err
	}
	if out.Len() > maxDOM {
		return "", fmt.Errorf("browser: DOM of %s is larger than %d bytes", path, maxDOM)
	}
	if out.Len() == 0 {
		return "", fmt.Errorf("browser: chromium printed no DOM for %s", path)
	}
	return out.String(), nil
}

// Screenshot renders path to a PNG file of width×height CSS pixels (the
// top of the page when it is taller).
func Screenshot(ctx context.Context, chromium, path, png string, width, height int) error {
	if width <= 0 || height <= 0 || width > 10000 || height > 20000 {
		return fmt.Errorf("browser: screenshot size %dx%d: want 1..10000 x 1..20000", width, height)
	}
	u, err := fileURL(path)
	if err != nil {
		return err
	}
	abs, err := filepath.Abs(png)
	if err != nil {
		return fmt.Errorf("browser: %w", err)
	}
	// Chromium writes the file itself; a stale one must not pass for a
	// fresh screenshot.
	if err := os.Remove(abs); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("browser: %w", err)
	}
	if err := run(ctx, chromium, nil, "--screenshot="+abs, fmt.Sprintf("--window-size=%d,%d", width, height), u); err != nil {
		return err
	}
	if fi, err := os.Stat(abs); err != nil || fi.Size() == 0 {
		return fmt.Errorf("browser: chromium wrote no screenshot to %s", abs)
	}
	return nil
}

func fileURL(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("browser: %w", err)
	}
	if fi, err := os.Stat(abs); err != nil {
		return "", fmt.Errorf("browser: %w", err)
	} else if fi.IsDir() {
		return "", fmt.Errorf("browser: %s is a directory, want an HTML file", abs)
	}
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(abs)}).String(), nil
}

// tail keeps the last bytes written to it: enough of Chromium's stderr to
// explain a failure.
type tail struct{ b []byte }

func (t *tail) Write(p []byte) (int, error) {
	const keep = 4 << 10
	t.b = append(t.b, p...)
	if len(t.b) > keep {
		t.b = append(t.b[:0], t.b[len(t.b)-keep:]...)
	}
	return len(p), nil
}

// run starts Chromium in its own process group with a fresh profile, waits
// for it, and kills the whole group when ctx ends or when it exits (helper
// processes must not outlive it).
func run(ctx context.Context, chromium string, stdout *bytes.Buffer, args ...string) error {
	if chromium == "" {
		return errors.New("browser: no chromium executable given (see Find)")
	}
	profile, err := os.MkdirTemp("", "stagger-chromium-*")
	if err != nil {
		return fmt.Errorf("browser: %w", err)
	}
	defer os.RemoveAll(profile)

	all := append(append(append([]string{}, flags...), "--user-data-dir="+profile), args...)
	cmd := exec.CommandContext(ctx, chromium, all...)
	cmd.Env = append(os.Environ(), "HOME="+profile) // nothing of the user's profile
	cmd.Stdin = nil
	if stdout != nil {
		cmd.Stdout = &limitWriter{w: stdout, n: maxDOM + 1}
	}
	var stderr tail
	cmd.Stderr = &stderr
	setGroup(cmd)
	// Grandchildren may keep the output pipes open after the group is
	// killed; do not wait for them forever.
	cmd.WaitDelay = 5 * time.Second

	if err := cmd.Start(); err != nil {
		return fmt.Errorf("browser: start %s: %w", chromium, err)
	}
	err = cmd.Wait()
	killGroup(cmd)
	if ctx.Err() != nil {
		return fmt.Errorf("browser: %s: %w", chromium, ctx.Err())
	}
	if err != nil {
		return fmt.Errorf("browser: %s: %w; stderr: %s", chromium, err, lastLines(stderr.b, 8))
	}
	return nil
}

// limitWriter stops storing after n bytes (the caller reports the overflow).
type limitWriter struct {
	w *bytes.Buffer
	n int
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if room := l.n - l.w.Len(); room > 0 {
		l.w.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
