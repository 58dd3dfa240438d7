package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/staggerhq/stagger/cmd/stagger/internal/clikit"
)

func TestFormatVersion(t *testing.T) {
	setting := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		want string
	}{
		{"module download", &debug.BuildInfo{GoVersion: "go1.25.0", Main: debug.Module{Version: "v0.1.0"},
			Settings: setting("GOOS", "linux", "GOARCH", "amd64")},
			"stagger v0.1.0\nrevision unknown (not recorded: a module download, or built with -buildvcs=false)\ngo1.25.0 linux/amd64\n"},
		{"clean checkout", &debug.BuildInfo{GoVersion: "go1.25.3", Main: debug.Module{Version: "v0.1.1-0.20261201090452-fb0cc94ed7b0"},
			Settings: setting("vcs", "git", "vcs.revision", "fb0cc94ed7b0b99744ca77406a1ca6ce7c679c56", "vcs.time", "2026-12-01T09:04:52Z", "vcs.modified", "false", "GOOS", "darwin", "GOARCH", "arm64")},
			"stagger v0.1.1-0.20261201090452-fb0cc94ed7b0\nrevision fb0cc94ed7b0b99744ca77406a1ca6ce7c679c56 2026-12-01T09:04:52Z\ngo1.25.3 darwin/arm64\n"},
		{"changed tree", &debug.BuildInfo{GoVersion: "go1.25.3", Main: debug.Module{Version: "v0.0.0-20261201090452-fb0cc94ed7b0+dirty"},
			Settings: setting("vcs.revision", "fb0cc94", "vcs.modified", "true")},
			"stagger v0.0.0-20261201090452-fb0cc94ed7b0+dirty\nrevision fb0cc94 (modified)\ngo1.25.3\n"},
		{"no version", &debug.BuildInfo{GoVersion: "go1.25.0"},
			"stagger (devel)\nrevision unknown (not recorded: a module download, or built with -buildvcs=false)\ngo1.25.0\n"},
		{"no build info", nil,
			"stagger (devel)\nrevision unknown (not recorded: a module download, or built with -buildvcs=false)\nunknown Go release\n"},
	} {
		if got := clikit.FormatVersion(tc.bi); got != tc.want {
			t.Errorf("%s:\ngot  %q\nwant %q", tc.name, got, tc.want)
		}
	}
}

func TestVersionFlagAndCommandAgree(t *testing.T) {
	_, want, _ := runCLI(t, "version")
	for _, args := range [][]string{{"--version"}, {"-version"}} {
		code, out, errOut := runCLI(t, args...)
		if code != exitOK || out != want || errOut != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 0 and %q", args, code, out, errOut, want)
		}
	}
	if code, _, errOut := runCLI(t, "--version", "extra"); code != exitUsage || !strings.Contains(errOut, "unexpected argument") {
		t.Errorf("--version extra: exit %d, stderr %q; want exit 2", code, errOut)
	}
}

// TestVersionReportsRevision builds the CLI from a git checkout with VCS
// stamping on and checks that `stagger version` names the commit the
// checkout is at, and (modified) exactly when the tree has changes.
//
// Go stamps nothing in a linked git worktree (its .git is a file,
// golang/go#58218); there the test builds a clone of HEAD instead, so it
// checks HEAD's code rather than the worktree's changes.
func TestVersionReportsRevision(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the CLI")
	}
	git := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("git %s: %v", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out))
	}
	if _, err := exec.LookPath("git"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("git is not installed (CI=true)")
		}
		t.Skip("git is not installed")
	}
	root := git(".", "rev-parse", "--show-toplevel")
	if git(root, "rev-parse", "--absolute-git-dir") != git(root, "rev-parse", "--path-format=absolute", "--git-common-dir") {
		clone := filepath.Join(t.TempDir(), "clone")
		git(root, "clone", "--quiet", "--shared", root, clone)
		root = clone
	}
	head := git(root, "rev-parse", "HEAD")
	modified := git(root, "status", "--porcelain") != ""

	bin := filepath.Join(t.TempDir(), "stagger")
	build := exec.Command("go", "build", "-buildvcs=true", "-o", bin, "./cmd/stagger")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("stagger --version: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 3 {
		t.Fatalf("stagger --version printed %q, want three lines", out)
	}
	// A build in a checkout gets a pseudo-version naming the commit, with
	// +dirty for a changed tree.
	pseudo := regexp.MustCompile(`^stagger v[0-9]+\.[0-9]+\.[0-9]+-[0-9.]*[0-9]{14}-` + head[:12] + `(\+dirty)?$`)
	if !pseudo.MatchString(lines[0]) || strings.HasSuffix(lines[0], "+dirty") != modified {
		t.Errorf("version line %q: want a pseudo-version of %s (modified %v)", lines[0], head[:12], modified)
	}
	if !strings.HasPrefix(lines[1], "revision "+head+" ") || strings.HasSuffix(lines[1], " (modified)") != modified {
		t.Errorf("revision line %q: want revision %s (modified %v)", lines[1], head, modified)
	}
}
