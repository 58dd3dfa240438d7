// Command modproxy writes a file-based Go module proxy that serves every
// module of this repository's go.work at one version, built from the working
// tree, so that installing and depending on a release can be tried before
// anything is tagged or published:
//
//	go run .ci/modproxy/main.go -version v0.1.0 -out /tmp/proxy
//	GOPROXY=file:///tmp/proxy,https://proxy.golang.org GONOSUMDB=github.com/staggerhq/* \
//	    GOWORK=off go install github.com/staggerhq/stagger/cmd/stagger@v0.1.0
//
// For each module it writes <out>/<escaped module path>/@v/{list,
// <version>.info, <version>.mod, <version>.zip}. The zip follows the module
// zip format the go command verifies: every file under module@version/,
// only files git tracks or would track (untracked files that .gitignore
// leaves out are not released), no nested module, no vendor directory, no
// VCS metadata, no symbolic links, and the repository's LICENSE added to a
// module that has none, as the go command does when it fetches a nested
// module from a repository.
//
// The modules require each other at the release version, and a tagged
// module's go.sum must hold the checksums of the other modules it needs, or
// `go install module@version` refuses to build it. Those checksums are known
// only once the required module's content is final, so modproxy writes the
// modules in dependency order and completes each module's go.sum (inside
// its zip; with -write-sums also in the working tree, which is the release
// step) with the h1: checksums of the stagger modules it requires.
package main

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
	"unicode"
)

func main() {
	version := flag.String("version", "", "the version every module is served at, such as v0.1.0")
	out := flag.String("out", "", "the directory the proxy is written to (created; must be empty or absent)")
	writeSums := flag.Bool("write-sums", false, "also write the completed go.sum files into the working tree (the release step)")
	flag.Parse()
	if err := run(*version, *out, *writeSums); err != nil {
		fmt.Fprintln(os.Stderr, "modproxy:", err)
		os.Exit(1)
	}
}

// semver accepts the release versions this repository tags: vMAJOR.MINOR.PATCH
// with an optional pre-release.
var semver = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)

// module is one module of the workspace.
type module struct {
	Path     string   // module path
	Dir      string   // directory relative to the repository root, "." for the root
	GoMod    []byte   // the go.mod file
	Requires []string // the stagger modules it requires
}

func run(version, out string, writeSums bool) error {
	if !semver.MatchString(version) {
		return fmt.Errorf("-version %q: want a semantic version such as v0.1.0", version)
	}
	if out == "" {
		return errors.New("-out: required")
	}
	if ents, err := os.ReadDir(out); err == nil && len(ents) > 0 {
		return fmt.Errorf("-out %s: not empty", out)
	}
	root, err := gitOutput(".", "rev-parse", "--show-toplevel")
	if err != nil {
		return err
	}
	root = strings.TrimSpace(root)
	mods, err := workspaceModules(root, version)
	if err != nil {
		return err
	}
	files, err := gitFiles(root)
	if err != nil {
		return err
	}
	order, err := dependencyOrder(mods)
	if err != nil {
		return err
	}
	licence, err := os.ReadFile(filepath.Join(root, "LICENSE"))
	if err != nil {
		return err
	}
	stamp := time.Now().UTC().Truncate(time.Second)
	sums := map[string][2]string{} // module path -> {zip h1, go.mod h1}
	for _, m := range order {
		content, err := moduleFiles(root, m, mods, files, licence)
		if err != nil {
			return err
		}
		if len(m.Requires) > 0 {
			gosum := completeSum(content["go.sum"], m.Requires, version, sums)
			content["go.sum"] = gosum
			if writeSums {
				if err := os.WriteFile(filepath.Join(root, m.Dir, "go.sum"), gosum, 0o644); err != nil {
					return err
				}
			}
		}
		zipData, zipSum, err := moduleZip(m.Path, version, content)
		if err != nil {
			return err
		}
		sums[m.Path] = [2]string{zipSum, hash1(map[string][]byte{"go.mod": m.GoMod})}
		dir := filepath.Join(out, filepath.FromSlash(escapePath(m.Path)), "@v")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		info, _ := json.Marshal(struct {
			Version string
			Time    time.Time
		}{version, stamp})
		for name, data := range map[string][]byte{
			"list":            []byte(version + "\n"),
			version + ".info": info,
			version + ".mod":  m.GoMod,
			version + ".zip":  zipData,
		} {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
				return err
			}
		}
		fmt.Printf("%s@%s %d files %s\n", m.Path, version, len(content), zipSum)
	}
	return nil
}

// workspaceModules reads go.work's use list and each module's go.mod. Every
// go.mod of the repository must be in go.work, no go.mod may hold a replace,
// and every requirement on another stagger module must be at version.
func workspaceModules(root, version string) (map[string]*module, error) {
	js, err := goOutput(root, "work", "edit", "-json")
	if err != nil {
		return nil, err
	}
	var work struct{ Use []struct{ DiskPath string } }
	if err := json.Unmarshal([]byte(js), &work); err != nil {
		return nil, fmt.Errorf("go work edit -json: %w", err)
	}
	mods := map[string]*module{}
	byDir := map[string]bool{}
	for _, u := range work.Use {
		dir := path.Clean(filepath.ToSlash(u.DiskPath))
		js, err := goOutput(filepath.Join(root, dir), "mod", "edit", "-json")
		if err != nil {
			return nil, err
		}
		var mf struct {
			Module  struct{ Path string }
			Require []struct{ Path, Version string }
			Replace []struct{ Old struct{ Path string } }
		}
		if err := json.Unmarshal([]byte(js), &mf); err != nil {
			return nil, fmt.Errorf("%s/go.mod: %w", dir, err)
		}
		if len(mf.Replace) > 0 {
			return nil, fmt.Errorf("%s/go.mod replaces %s: a replace is ignored for dependents and refused by go install pkg@version; go.work ties the modules", dir, mf.Replace[0].Old.Path)
		}
		gomod, err := os.ReadFile(filepath.Join(root, dir, "go.mod"))
		if err != nil {
			return nil, err
		}
		m := &module{Path: mf.Module.Path, Dir: dir, GoMod: gomod}
		for _, r := range mf.Require {
			if r.Path == rootModule || strings.HasPrefix(r.Path, rootModule+"/") {
				if r.Version != version {
					return nil, fmt.Errorf("%s/go.mod requires %s %s, want %s: the modules are versioned in lock-step", dir, r.Path, r.Version, version)
				}
				m.Requires = append(m.Requires, r.Path)
			}
		}
		mods[m.Path] = m
		byDir[dir] = true
	}
	if _, ok := mods[rootModule]; !ok {
		return nil, fmt.Errorf("go.work does not use the module %s", rootModule)
	}
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "vendor") {
			return filepath.SkipDir
		}
		if !d.IsDir() && d.Name() == "go.mod" {
			rel, _ := filepath.Rel(root, filepath.Dir(p))
			if !byDir[filepath.ToSlash(rel)] {
				return fmt.Errorf("%s is not in go.work", filepath.Join(rel, "go.mod"))
			}
		}
		return nil
	})
	return mods, err
}

const rootModule = "github.com/staggerhq/stagger"

// dependencyOrder sorts the modules so that each comes after every stagger
// module it requires.
func dependencyOrder(mods map[string]*module) ([]*module, error) {
	var order []*module
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(p string) error
	visit = func(p string) error {
		m, ok := mods[p]
		if !ok {
			return fmt.Errorf("%s is required but is not a module of go.work", p)
		}
		switch state[p] {
		case 1:
			return fmt.Errorf("the modules require each other in a cycle through %s", p)
		case 2:
			return nil
		}
		state[p] = 1
		for _, r := range m.Requires {
			if err := visit(r); err != nil {
				return err
			}
		}
		state[p] = 2
		order = append(order, m)
		return nil
	}
	paths := make([]string, 0, len(mods))
	for p := range mods {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		if err := visit(p); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// moduleFiles returns the content of module m by path relative to its
// directory: the listed files under m.Dir, less those of nested modules,
// vendor directories and VCS metadata, plus the repository's LICENSE when
// the module has none.
func moduleFiles(root string, m *module, mods map[string]*module, files []string, licence []byte) (map[string][]byte, error) {
	var nested []string
	for _, o := range mods {
		if o != m && (m.Dir == "." || strings.HasPrefix(o.Dir, m.Dir+"/")) {
			nested = append(nested, o.Dir+"/")
		}
	}
	prefix := m.Dir + "/"
	if m.Dir == "." {
		prefix = ""
	}
	content := map[string][]byte{}
	for _, f := range files {
		if !strings.HasPrefix(f, prefix) || inAny(f, nested) {
			continue
		}
		rel := strings.TrimPrefix(f, prefix)
		if excluded(rel) {
			continue
		}
		fi, err := os.Lstat(filepath.Join(root, f))
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted in the working tree
		}
		if err != nil {
			return nil, err
		}
		if !fi.Mode().IsRegular() {
			continue // the module zip format holds regular files only
		}
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return nil, err
		}
		content[rel] = data
	}
	if _, ok := content["go.mod"]; !ok {
		return nil, fmt.Errorf("%s: go.mod is not tracked by git", m.Dir)
	}
	if _, ok := content["LICENSE"]; !ok {
		content["LICENSE"] = licence
	}
	return content, nil
}

func inAny(f string, dirs []string) bool {
	for _, d := range dirs {
		if strings.HasPrefix(f, d) {
			return true
		}
	}
	return false
}

// excluded reports whether a file at rel (slash-separated, relative to its
// module) is left out of a module zip: anything in a vendor directory or
// under a VCS metadata directory.
func excluded(rel string) bool {
	for _, el := range strings.Split(path.Dir(rel), "/") {
		switch el {
		case "vendor", ".git", ".hg", ".svn", ".bzr":
			return true
		}
	}
	return false
}

// completeSum returns gosum with the h1: lines of the stagger modules in
// requires at version (from sums), replacing any stale lines for them.
func completeSum(gosum []byte, requires []string, version string, sums map[string][2]string) []byte {
	var lines []string
	for _, l := range strings.Split(string(gosum), "\n") {
		if f := strings.Fields(l); len(f) == 0 || f[0] == rootModule || strings.HasPrefix(f[0], rootModule+"/") {
			continue
		}
		lines = append(lines, l)
	}
	for _, r := range requires {
		s := sums[r]
		lines = append(lines, r+" "+version+" "+s[0], r+" "+version+"/go.mod "+s[1])
	}
	sort.Strings(lines)
	return []byte(strings.Join(lines, "\n") + "\n")
}

// moduleZip writes the module zip and returns it with its h1: checksum.
func moduleZip(modPath, version string, content map[string][]byte) ([]byte, string, error) {
	prefix := modPath + "@" + version + "/"
	names := make([]string, 0, len(content))
	for n := range content {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	prefixed := map[string][]byte{}
	folded := map[string]string{}
	for _, n := range names {
		lower := strings.ToLower(n)
		if other, dup := folded[lower]; dup {
			return nil, "", fmt.Errorf("%s: %s and %s differ only in case", modPath, other, n)
		}
		folded[lower] = n
		if strings.IndexFunc(n, func(r rune) bool { return r > unicode.MaxASCII }) >= 0 {
			return nil, "", fmt.Errorf("%s: file name %q is not ASCII", modPath, n)
		}
		w, err := zw.Create(prefix + n)
		if err != nil {
			return nil, "", err
		}
		if _, err := w.Write(content[n]); err != nil {
			return nil, "", err
		}
		prefixed[prefix+n] = content[n]
	}
	if err := zw.Close(); err != nil {
		return nil, "", err
	}
	return buf.Bytes(), hash1(prefixed), nil
}

// hash1 is the go command's h1: checksum (golang.org/x/mod/sumdb/dirhash
// Hash1): SHA-256 over the sorted lines "<hex sha256>  <name>\n".
func hash1(files map[string][]byte) string {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	summary := sha256.New()
	for _, n := range names {
		fmt.Fprintf(summary, "%x  %s\n", sha256.Sum256(files[n]), n)
	}
	return "h1:" + base64.StdEncoding.EncodeToString(summary.Sum(nil))
}

// escapePath is the module proxy's case encoding: each upper-case letter
// becomes '!' and its lower case.
func escapePath(p string) string {
	var b strings.Builder
	for _, r := range p {
		if unicode.IsUpper(r) {
			b.WriteByte('!')
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// gitFiles lists the files git tracks or would track (untracked files that
// .gitignore does not exclude), relative to root.
func gitFiles(root string) ([]string, error) {
	out, err := gitOutput(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	if err != nil {
		return nil, err
	}
	var files []string
	seen := map[string]bool{}
	for _, f := range strings.Split(out, "\x00") {
		if f != "" && !seen[f] {
			seen[f] = true
			files = append(files, f)
		}
	}
	return files, nil
}

func gitOutput(dir string, args ...string) (string, error) { return output(dir, "git", args...) }

func goOutput(dir string, args ...string) (string, error) { return output(dir, "go", args...) }

func output(dir, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}
