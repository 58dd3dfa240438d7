package stagger_test

import (
	"os"
	"os/exec"
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
