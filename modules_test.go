package stagger_test

import (
	"encoding/json"
	"os/exec"
	"path"
	"strings"
	"testing"
)

// modFile is the part of `go mod edit -json` and `go work edit -json` the
// release rules look at.
type modFile struct {
	Module  struct{ Path string }
	Require []struct{ Path, Version string }
	Use     []struct{ DiskPath string }
	Replace []struct {
		Old struct{ Path, Version string }
		New struct{ Path, Version string }
	}
}

func editJSON(t *testing.T, dir string, args ...string) modFile {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: go %s: %v", dir, strings.Join(args, " "), err)
	}
	var f modFile
	if err := json.Unmarshal(out, &f); err != nil {
		t.Fatalf("%s: go %s: %v", dir, strings.Join(args, " "), err)
	}
	return f
}

// TestLockStepModules enforces the release rules of docs/versioning.md: no
// go.mod holds a replace (dependents ignore it and `go install pkg@version`
// refuses it); every module requires the other stagger modules at one
// lock-step version; and go.work, which alone ties the modules for
// development, replaces that version of every module with its directory.
func TestLockStepModules(t *testing.T) {
	const self = "github.com/staggerhq/stagger"
	work := editJSON(t, ".", "work", "edit", "-json")
	if len(work.Use) < 2 {
		t.Fatalf("go.work uses %d modules", len(work.Use))
	}
	dirOf := map[string]string{} // module path -> go.work directory
	versions := map[string][]string{}
	for _, u := range work.Use {
		dir := path.Clean(u.DiskPath)
		m := editJSON(t, dir, "mod", "edit", "-json")
		dirOf[m.Module.Path] = dir
		for _, r := range m.Replace {
			t.Errorf("%s/go.mod: replace %s: go.work alone ties the modules", dir, r.Old.Path)
		}
		for _, r := range m.Require {
			if r.Path == self || strings.HasPrefix(r.Path, self+"/") {
				versions[r.Version] = append(versions[r.Version], dir+" requires "+r.Path)
			}
		}
	}
	if len(versions) != 1 {
		t.Fatalf("the stagger modules are required at %d versions, want one: %v", len(versions), versions)
	}
	var version string
	for v := range versions {
		version = v
	}
	if !strings.HasPrefix(version, "v") || strings.Count(version, ".") != 2 || strings.Contains(version, "-0.") {
		t.Errorf("lock-step version %s: want a release version vX.Y.Z, not a pseudo-version", version)
	}
	replaced := map[string]bool{}
	for _, r := range work.Replace {
		dir, ok := dirOf[r.Old.Path]
		switch {
		case !ok:
			t.Errorf("go.work replaces %s, which is not a module of the workspace", r.Old.Path)
		case r.Old.Version != version:
			t.Errorf("go.work replaces %s at %q, want only the lock-step version %s", r.Old.Path, r.Old.Version, version)
		case path.Clean(r.New.Path) != dir || r.New.Version != "":
			t.Errorf("go.work replaces %s %s with %s, want its directory %s", r.Old.Path, version, r.New.Path, dir)
		}
		replaced[r.Old.Path] = true
	}
	for p := range dirOf {
		if !replaced[p] {
			t.Errorf("go.work does not replace %s %s => %s", p, version, dirOf[p])
		}
	}
}
