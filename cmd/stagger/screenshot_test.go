package main

import (
	"context"
	"image/png"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/staggerhq/stagger/internal/report/browser"
	"github.com/staggerhq/stagger/internal/simkit"
)

// Every report the command writes — lab, each sim scenario, proxy — renders
// in a real headless Chromium at 1400×2000. STAGGER_SCREENSHOTS=DIR keeps
// the PNGs there to be looked at.
func TestEveryReportScreenshot(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every scenario and a browser")
	}
	chromium := browser.Require(t)
	bin := buildStagger(t)
	dir := os.Getenv("STAGGER_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The proxy's report needs traffic: a client sends through it while it
	// runs (an upstream that answers 200, a fault schedule that drops the
	// first 500 ms).
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer up.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	proxyAddr := ln.Addr().String()
	ln.Close()
	runs := map[string][]string{
		"lab": {"lab", "--quiet"},
		"proxy": {"proxy", "--listen", proxyAddr, "--upstream", up.URL, "--duration", "3s", "--quiet",
			"--fault", "down 500ms at 0s"},
	}
	for _, s := range simkit.Scenarios() {
		runs["sim-"+s.Name] = []string{"sim", s.Name, "--quiet"}
	}
	for name, args := range runs {
		t.Run(name, func(t *testing.T) {
			html := filepath.Join(dir, name+".html")
			if name == "proxy" {
				stop := make(chan struct{})
				defer close(stop)
				go func() {
					for {
						select {
						case <-stop:
							return
						case <-time.After(20 * time.Millisecond):
						}
						if resp, err := http.Get("http://" + proxyAddr + "/"); err == nil {
							resp.Body.Close()
						}
					}
				}()
			}
			// The built binary, not run in process: under -race the
			// scenarios at their defaults take minutes.
			cmd := exec.Command(bin, append(args, "--report", html)...)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%v: %v: %s", args, err, out)
			}
			shot := filepath.Join(dir, name+".png")
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := browser.Screenshot(ctx, chromium, html, shot, 1400, 2000); err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(shot)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			img, err := png.Decode(f)
			if err != nil {
				t.Fatalf("%s: %v", shot, err)
			}
			if b := img.Bounds(); b.Dx() != 1400 || b.Dy() != 2000 {
				t.Fatalf("%s: %v, want 1400×2000", shot, b)
			}
		})
	}
}
