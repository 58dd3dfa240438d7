package stagger_test

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestStdlibOnly enforces the architecture rule: the root module
// github.com/staggerhq/stagger (its packages and their tests) imports only
// the standard library and its own packages.
func TestStdlibOnly(t *testing.T) {
	gomod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(gomod), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == "require" {
			t.Errorf("go.mod has a require line %q: the root module must need nothing but the standard library", line)
		}
	}

	cmd := exec.Command("go", "list", "-deps", "-test",
		"-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "./...")
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	const self = "github.com/staggerhq/stagger"
	var n int
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		n++
		// Test variants print as "pkg [pkg.test]", test mains as "pkg.test",
		// external test packages as "pkg_test".
		p, _, _ := strings.Cut(line, " ")
		p = strings.TrimSuffix(strings.TrimSuffix(p, ".test"), "_test")
		if p != self && !strings.HasPrefix(p, self+"/") {
			t.Errorf("root module depends on non-standard package %s", p)
		}
	}
	if n == 0 {
		t.Fatal("go list returned no packages: the check would pass vacuously")
	}
}

// TestGoVersionLines: every go.mod of the repository, and go.work, declare
// go 1.25, so the whole workspace builds with Go 1.25 (dependencies whose
// newest releases need a newer Go are pinned to older releases).
func TestGoVersionLines(t *testing.T) {
	var files []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != "." {
			return filepath.SkipDir
		}
		if !d.IsDir() && (d.Name() == "go.mod" || d.Name() == "go.work") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 2 {
		t.Fatalf("found only %v", files)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var goLine string
		for _, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(line, "go ") {
				goLine = strings.TrimSpace(line)
			}
			if strings.HasPrefix(line, "toolchain ") {
				t.Errorf("%s: has a toolchain line %q; machines start on their own Go", f, line)
			}
		}
		if goLine != "go 1.25" && goLine != "go 1.25.0" {
			t.Errorf("%s: %q, want go 1.25", f, goLine)
		}
	}
}
