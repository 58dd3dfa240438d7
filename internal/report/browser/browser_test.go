package browser

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func writeFile(t *testing.T, dir, name, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestFindOverride(t *testing.T) {
	dir := t.TempDir()
	fake := writeFile(t, dir, "my-chromium", "#!/bin/sh\nexit 0\n", 0o755)
	t.Setenv(EnvChromium, fake)
	if got := Find(); got != fake {
		t.Errorf("Find with %s=%s = %q", EnvChromium, fake, got)
	}
	t.Setenv(EnvChromium, filepath.Join(dir, "missing"))
	if got := Find(); got != "" {
		t.Errorf("Find with a missing override = %q, want \"\"", got)
	}
	t.Setenv(EnvChromium, "")
	t.Setenv("PATH", dir) // my-chromium is not one of the candidate names
	if got := Find(); got != "" {
		t.Errorf("Find on a PATH without Chromium = %q, want \"\"", got)
	}
	writeFile(t, dir, "chromium-browser", "#!/bin/sh\nexit 0\n", 0o755)
	if got, want := Find(), filepath.Join(dir, "chromium-browser"); got != want {
		t.Errorf("Find = %q, want %q", got, want)
	}
}

// fakeTB records Skip/Fatal instead of stopping the test; the embedded
// interface is nil, so any other method used by Require would panic.
type fakeTB struct {
	testing.TB
	skipped, failed string
}

func (f *fakeTB) Helper()                           {}
func (f *fakeTB) Skipf(format string, args ...any)  { f.skipped = fmt.Sprintf(format, args...) }
func (f *fakeTB) Fatalf(format string, args ...any) { f.failed = fmt.Sprintf(format, args...) }

func TestRequireSkipsOrFails(t *testing.T) {
	t.Setenv(EnvChromium, filepath.Join(t.TempDir(), "missing"))

	t.Setenv("CI", "")
	var f fakeTB
	if got := Require(&f); got != "" || f.failed != "" || !strings.Contains(f.skipped, "skipping browser test") || !strings.Contains(f.skipped, EnvChromium) {
		t.Errorf("without CI: Require = %q, skipped %q, failed %q; want a clear skip", got, f.skipped, f.failed)
	}

	t.Setenv("CI", "true")
	f = fakeTB{}
	if got := Require(&f); got != "" || f.skipped != "" || !strings.Contains(f.failed, "CI=true") {
		t.Errorf("under CI=true: Require = %q, skipped %q, failed %q; want a failure", got, f.skipped, f.failed)
	}
}

func TestBadArguments(t *testing.T) {
	dir := t.TempDir()
	page := writeFile(t, dir, "p.html", "<p>x</p>", 0o644)
	ctx := testContext(t)
	if _, err := DumpDOM(ctx, "", page); err == nil {
		t.Error("DumpDOM without a chromium path succeeded")
	}
	if _, err := DumpDOM(ctx, "/bin/true", filepath.Join(dir, "missing.html")); err == nil {
		t.Error("DumpDOM of a missing file succeeded")
	}
	if _, err := DumpDOM(ctx, "/bin/true", dir); err == nil || !strings.Contains(err.Error(), "directory") {
		t.Errorf("DumpDOM of a directory = %v", err)
	}
	if _, err := DumpDOM(ctx, "/bin/true", page); err == nil || !strings.Contains(err.Error(), "no DOM") {
		t.Errorf("DumpDOM with a browser that prints nothing = %v", err)
	}
	if err := Screenshot(ctx, "/bin/true", page, filepath.Join(dir, "x.png"), 0, 100); err == nil {
		t.Error("Screenshot of width 0 succeeded")
	}
	if err := Screenshot(ctx, "/bin/true", page, filepath.Join(dir, "x.png"), 100, 100); err == nil || !strings.Contains(err.Error(), "no screenshot") {
		t.Errorf("Screenshot with a browser that writes nothing = %v", err)
	}
	fail := writeFile(t, dir, "failing", "#!/bin/sh\necho 'it broke' >&2\nexit 3\n", 0o755)
	if _, err := DumpDOM(ctx, fail, page); err == nil || !strings.Contains(err.Error(), "it broke") {
		t.Errorf("DumpDOM with a failing browser = %v, want its stderr in the error", err)
	}
}

func TestDumpDOMChromium(t *testing.T) {
	chromium := Require(t)
	page := writeFile(t, t.TempDir(), "p.html",
		`<!DOCTYPE html><title>t</title><p id=x>a &amp; b<svg class="chart" data-title="&lt;c&gt;"><rect class="bar"/></svg>`, 0o644)
	dom, err := DumpDOM(testContext(t), chromium, page)
	if err != nil {
		t.Fatal(err)
	}
	// The browser's serialization, not the file: it closed the <p> and
	// the <rect> and added <html>, <head> and <body>.
	for _, want := range []string{"<html>", "<body>", `<p id="x">a &amp; b`, `data-title="&lt;c&gt;"`, `<rect class="bar"></rect></svg></p>`} {
		if !strings.Contains(dom, want) {
			t.Errorf("DOM lacks %q:\n%s", want, dom)
		}
	}
}
