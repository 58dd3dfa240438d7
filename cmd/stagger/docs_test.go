package main

// The examples of README.md and docs/*.md are compiled or run here, so that
// the documentation cannot drift from the code.
//
// Go blocks (```go) are fragments. Each becomes a package of a temporary
// module inside this workspace and is vetted (go vet builds it). The block
// is taken as it is when it has a package clause, as top-level declarations
// when it parses as such, and otherwise as the body of a function. An HTML
// comment right before the block (blank lines allowed) tunes that:
//
//	<!-- go: func() error
//	var ctx context.Context
//	var callPayments func(context.Context) error
//	-->
//
// The first line after "go:" is the signature of the wrapping function
// (default "func()"); the other lines are declarations the fragment uses.
// A function's fragment has ctx (context.Background()) and logger
// (slog.Default()) declared for it.
// "<!-- go: skip REASON -->" leaves an illustrative block out. Imports are
// added for the packages a block names (docImports).
//
// Command blocks (```sh, ```console, ```bash) are run against a binary built
// from this module: every line that runs stagger (`stagger …`, `$ stagger …`,
// `go run ./cmd/stagger …`) must exit 0. "<!-- cli: accepts -->" before a
// block marks commands that need a service or run until stopped: they must
// not exit 2 (bad usage); one still running after a few seconds is
// stopped. "<!-- cli: skip REASON -->" leaves a block out.
//
// A sample output (```text) marked "<!-- output: ARGS -->" is compared with
// what `stagger ARGS` prints, numbers aside (TestDocSampleOutputs).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
)

// docBlock is one fenced block of a Markdown file.
type docBlock struct {
	file   string // relative to the repository root
	line   int    // of the opening fence
	lang   string
	body   string
	marker string // the HTML comment right before it, without <!-- -->
}

var (
	fenceRE  = regexp.MustCompile("(?m)^```([a-z]*)[ \t]*\n")
	markerRE = regexp.MustCompile(`(?s)^<!--\s*(.*?)\s*-->\s*$`)
	// comments and string literals name no package
	commentRE = regexp.MustCompile("//.*|\"(?:[^\"\\\\\n]|\\\\.)*\"|`[^`]*`")
)

// docFiles are README.md and docs/*.md, relative to the repository root.
func docFiles(t *testing.T, root string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"README.md"}
	for _, f := range files {
		out = append(out, filepath.Join("docs", filepath.Base(f)))
	}
	return out
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.work")); err != nil {
		t.Fatalf("repository root: %v", err)
	}
	return root
}

// parseBlocks returns the fenced blocks of a Markdown text.
func parseBlocks(file, text string) ([]docBlock, error) {
	var blocks []docBlock
	pos := 0
	for {
		m := fenceRE.FindStringSubmatchIndex(text[pos:])
		if m == nil {
			return blocks, nil
		}
		start, bodyStart := pos+m[0], pos+m[1]
		lang := text[pos+m[2] : pos+m[3]]
		end := strings.Index(text[bodyStart:], "\n```")
		if end < 0 && strings.HasPrefix(text[bodyStart:], "```") {
			end = -1 // an empty block
		} else if end < 0 {
			return nil, fmt.Errorf("%s:%d: unclosed ``` block", file, strings.Count(text[:start], "\n")+1)
		}
		body := ""
		next := bodyStart + 3
		if end >= 0 {
			body = text[bodyStart : bodyStart+end+1]
			next = bodyStart + end + 4
		}
		b := docBlock{file: file, line: strings.Count(text[:start], "\n") + 1, lang: lang, body: body}
		if i := strings.LastIndex(text[:start], "<!--"); i < 0 {
		} else if mm := markerRE.FindStringSubmatch(text[i:start]); mm != nil {
			b.marker = mm[1]
		}
		blocks = append(blocks, b)
		pos = next
	}
}

func allBlocks(t *testing.T, root string) []docBlock {
	t.Helper()
	var all []docBlock
	for _, f := range docFiles(t, root) {
		text, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		bs, err := parseBlocks(f, string(text))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, bs...)
	}
	return all
}

// docImports are the packages a Go block may name, by the name it uses.
var docImports = map[string]string{
	"context": "context", "errors": "errors", "fmt": "fmt", "http": "net/http", "io": "io",
	"json": "encoding/json", "log": "log", "os": "os", "slog": "log/slog", "strings": "strings",
	"sync": "sync", "time": "time", "sql": "database/sql", "testing": "testing",
	"check":       "github.com/staggerhq/stagger/check",
	"proxytest":   "github.com/staggerhq/stagger/proxytest",
	"ui":          "github.com/staggerhq/stagger/ui",
	"backoff":     "github.com/staggerhq/stagger/backoff",
	"budget":      "github.com/staggerhq/stagger/budget",
	"broker":      "github.com/staggerhq/stagger/broker",
	"lab":         "github.com/staggerhq/stagger/lab",
	"limit":       "github.com/staggerhq/stagger/limit",
	"queue":       "github.com/staggerhq/stagger/queue",
	"retry":       "github.com/staggerhq/stagger/retry",
	"retryhttp":   "github.com/staggerhq/stagger/retryhttp",
	"sim":         "github.com/staggerhq/stagger/sim",
	"report":      "github.com/staggerhq/stagger/internal/report",
	"sqlite":      "github.com/staggerhq/stagger/queue/sqlite",
	"postgres":    "github.com/staggerhq/stagger/queue/postgres",
	"rabbitmq":    "github.com/staggerhq/stagger/broker/rabbitmq",
	"kafka":       "github.com/staggerhq/stagger/broker/kafka",
	"jetstream":   "github.com/staggerhq/stagger/broker/jetstream",
	"redisbudget": "github.com/staggerhq/stagger/budget/redis",
	"staggergrpc": "github.com/staggerhq/stagger/grpc",
	"staggerotel": "github.com/staggerhq/stagger/contrib/otel",
	"grpc":        "google.golang.org/grpc",
	"insecure":    "google.golang.org/grpc/credentials/insecure",
	"otel":        "go.opentelemetry.io/otel",
	"pgx":         "github.com/jackc/pgx/v5",
	"amqp":        "github.com/rabbitmq/amqp091-go",
	"nats":        "github.com/nats-io/nats.go",
	"goredis":     "github.com/redis/go-redis/v9",
	"natsjs":      "github.com/nats-io/nats.go/jetstream",
}

// docPrelude is declared for every block wrapped in a function: what most
// fragments take as given.
const docPrelude = "var ctx = context.Background()\nvar logger = slog.Default()\n"

var selectorRE = regexp.MustCompile(`\b([a-z][a-z0-9]*)\.[A-Za-z_]`)

// goSource turns a Go block into a file of package pkg.
func goSource(b docBlock, pkg string) (string, error) {
	sig, prelude := "func()", ""
	if m := strings.TrimSpace(strings.TrimPrefix(b.marker, "go:")); strings.HasPrefix(b.marker, "go:") {
		first, rest, _ := strings.Cut(m, "\n")
		if strings.HasPrefix(first, "func(") {
			sig = first
		} else {
			rest = m
		}
		prelude = rest
	}
	code := strings.TrimSpace(b.body)
	if strings.HasPrefix(code, "package ") {
		return code + "\n", nil
	}
	body := prelude + "\n"
	fset := token.NewFileSet()
	if _, err := parser.ParseFile(fset, "", "package p\n"+code, 0); err == nil {
		body += code + "\n"
	} else {
		fn, err := wrapStatements(code, sig)
		if err != nil {
			return "", fmt.Errorf("%s:%d: %v", b.file, b.line, err)
		}
		body += docPrelude + fn
	}
	var imports []string
	seen := map[string]bool{}
	for _, m := range selectorRE.FindAllStringSubmatch(commentRE.ReplaceAllString(body, ""), -1) {
		if path, ok := docImports[m[1]]; ok && !seen[m[1]] {
			seen[m[1]] = true
			imports = append(imports, fmt.Sprintf("%s %q", m[1], path))
		}
	}
	sort.Strings(imports)
	src := fmt.Sprintf("// %s:%d\n\npackage %s\n\n", b.file, b.line, pkg)
	if len(imports) > 0 {
		src += "import (\n\t" + strings.Join(imports, "\n\t") + "\n)\n\n"
	}
	return src + body, nil
}

// wrapStatements makes statements the body of a function with signature
// sig, using every variable they declare at the top level (a fragment shows
// what it declares for the reader's next line).
func wrapStatements(code, sig string) (string, error) {
	src := "package p\n" + sig[:len("func")] + " _" + sig[len("func"):] + " {\n" + code + "\n}\n"
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "", src, 0)
	if err != nil {
		return "", fmt.Errorf("neither declarations nor statements: %v", err)
	}
	fd := f.Decls[0].(*ast.FuncDecl)
	var names []string
	declared := map[string]bool{}
	add := func(id *ast.Ident) {
		if id.Name != "_" && !declared[id.Name] {
			declared[id.Name] = true
			names = append(names, id.Name)
		}
	}
	for _, st := range fd.Body.List {
		switch s := st.(type) {
		case *ast.AssignStmt:
			if s.Tok == token.DEFINE {
				for _, e := range s.Lhs {
					if id, ok := e.(*ast.Ident); ok {
						add(id)
					}
				}
			}
		case *ast.DeclStmt:
			if g, ok := s.Decl.(*ast.GenDecl); ok && g.Tok == token.VAR {
				for _, sp := range g.Specs {
					for _, id := range sp.(*ast.ValueSpec).Names {
						add(id)
					}
				}
			}
		}
	}
	out := sig[:len("func")] + " _" + sig[len("func"):] + " {\n" + code + "\n"
	for _, n := range names {
		out += "\t_ = " + n + "\n"
	}
	last := fd.Body.List[len(fd.Body.List)-1]
	if _, ret := last.(*ast.ReturnStmt); !ret && fd.Type.Results != nil {
		out += "\tpanic(\"not reached\")\n"
	}
	return out + "}\n", nil
}

// workspaceFor writes a go.work in dir that uses every module of the
// repository's go.work (with its replacements) and the module in dir.
func workspaceFor(t *testing.T, root, dir string) {
	t.Helper()
	cmd := exec.Command("go", "work", "edit", "-json")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go work edit -json: %v", err)
	}
	var w struct {
		Go      string
		Use     []struct{ DiskPath string }
		Replace []struct {
			Old struct{ Path, Version string }
			New struct{ Path string }
		}
	}
	if err := json.Unmarshal(out, &w); err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "go %s\n\nuse (\n\t.\n", w.Go)
	for _, u := range w.Use {
		fmt.Fprintf(&sb, "\t%s\n", filepath.Join(root, u.DiskPath))
	}
	sb.WriteString(")\n\nreplace (\n")
	for _, r := range w.Replace {
		fmt.Fprintf(&sb, "\t%s %s => %s\n", r.Old.Path, r.Old.Version, filepath.Join(root, r.New.Path))
	}
	sb.WriteString(")\n")
	if err := os.WriteFile(filepath.Join(dir, "go.work"), []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	gomod := "module github.com/staggerhq/stagger/docsnippet\n\ngo " + w.Go + "\n"
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Every Go block of README.md and docs/*.md compiles and passes go vet.
func TestDocGoSnippets(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every Go block of the docs")
	}
	root := repoRoot(t)
	dir := t.TempDir()
	workspaceFor(t, root, dir)
	where := map[string]docBlock{}
	n := 0
	for _, b := range allBlocks(t, root) {
		if b.lang != "go" {
			continue
		}
		if strings.HasPrefix(b.marker, "go: skip") {
			continue
		}
		n++
		pkg := fmt.Sprintf("s%02d", n)
		src, err := goSource(b, pkg)
		if err != nil {
			t.Error(err)
			continue
		}
		if err := os.MkdirAll(filepath.Join(dir, pkg), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, pkg, "snippet.go"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		where[pkg] = b
	}
	if n == 0 {
		t.Fatal("no Go block found in the docs")
	}
	cmd := exec.Command("go", "vet", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK="+filepath.Join(dir, "go.work"), "GOFLAGS=-mod=readonly")
	out, err := cmd.CombinedOutput()
	if err != nil {
		// Name the doc and line of each failing block.
		msg := string(out)
		for pkg, b := range where {
			msg = strings.ReplaceAll(msg, "./"+pkg+"/snippet.go", fmt.Sprintf("%s (block at line %d) snippet.go", b.file, b.line))
			msg = strings.ReplaceAll(msg, "docsnippet/"+pkg, b.file+":"+fmt.Sprint(b.line))
		}
		t.Fatalf("the docs' Go blocks do not build (go vet in %s): %v\n%s", dir, err, msg)
	}
	t.Logf("%d Go blocks built and vetted", n)
}

// docCommand is one stagger command line of a command block.
type docCommand struct {
	block   docBlock
	args    []string
	accepts bool // only "not bad usage"
}

// docCommands are the stagger command lines of the docs' command blocks.
func docCommands(t *testing.T, root string) []docCommand {
	t.Helper()
	var cmds []docCommand
	for _, b := range allBlocks(t, root) {
		switch b.lang {
		case "sh", "console", "bash", "shell":
		default:
			continue
		}
		if strings.HasPrefix(b.marker, "cli: skip") {
			continue
		}
		accepts := strings.HasPrefix(b.marker, "cli: accepts")
		var lines []string
		cont := ""
		for _, l := range strings.Split(b.body, "\n") {
			if strings.HasSuffix(strings.TrimSpace(l), "\\") {
				cont += strings.TrimSuffix(strings.TrimSpace(l), "\\") + " "
				continue
			}
			lines = append(lines, cont+l)
			cont = ""
		}
		for _, l := range lines {
			l = strings.TrimSpace(l)
			l = strings.TrimPrefix(l, "$ ")
			if i := strings.Index(l, " #"); i >= 0 {
				l = strings.TrimSpace(l[:i])
			}
			var rest string
			switch {
			case strings.HasPrefix(l, "stagger "), l == "stagger":
				rest = strings.TrimPrefix(l, "stagger")
			case strings.HasPrefix(l, "go run ./cmd/stagger"):
				rest = strings.TrimPrefix(l, "go run ./cmd/stagger")
			default:
				continue
			}
			args, err := shellWords(rest)
			if err != nil {
				t.Fatalf("%s:%d: %q: %v", b.file, b.line, l, err)
			}
			cmds = append(cmds, docCommand{block: b, args: args, accepts: accepts})
		}
	}
	return cmds
}

// shellWords splits a command line as sh would, for the quoting the docs
// use: single and double quotes, no expansions.
func shellWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	in, quote := false, byte(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
			cur.WriteByte(c)
		case c == '\'' || c == '"':
			quote, in = c, true
		case c == ' ' || c == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		case strings.ContainsRune("|&;<>$`*", rune(c)):
			return nil, fmt.Errorf("shell syntax %q: mark the block <!-- cli: skip REASON -->", c)
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if quote != 0 {
		return nil, errors.New("unclosed quote")
	}
	if in {
		words = append(words, cur.String())
	}
	return words, nil
}

// Every stagger command line of the docs runs: to exit 0, or, marked
// "accepts", to anything but bad usage (2).
func TestDocCommands(t *testing.T) {
	bin := buildStagger(t)
	root := repoRoot(t)
	cmds := docCommands(t, root)
	if len(cmds) == 0 {
		t.Fatal("no stagger command found in the docs")
	}
	for _, c := range cmds {
		t.Run(fmt.Sprintf("%s:%d %s", c.block.file, c.block.line, strings.Join(c.args, " ")), func(t *testing.T) {
			limit := 3 * time.Minute
			if c.accepts {
				limit = 5 * time.Second
			}
			ctx, cancel := context.WithTimeout(context.Background(), limit)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, c.args...)
			cmd.Dir = t.TempDir() // reports and databases land here
			cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
			cmd.WaitDelay = 30 * time.Second
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			code := cmd.ProcessState.ExitCode()
			switch {
			case c.accepts && ctx.Err() != nil:
				// Still running after its first seconds: it accepted its flags.
			case c.accepts && code == exitUsage && strings.Contains(out.String(), "address already in use"):
				// The documented port is taken on this machine: the flags
				// parsed, the bind failed.
				t.Logf("the documented port is in use here: %s", out.String())
			case c.accepts && code == exitUsage:
				t.Fatalf("exit 2 (bad usage): %s", out.String())
			case c.accepts:
			case err != nil:
				t.Fatalf("%v: %s", err, out.String())
			}
		})
	}
}

// docs/cli.md names every command and subcommand `stagger help` lists, and
// its exit-code table has exactly the codes the binary uses.
func TestCLIDocMatchesHelp(t *testing.T) {
	root := repoRoot(t)
	text, err := os.ReadFile(filepath.Join(root, "docs", "cli.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(text)
	cmdTable := doc[strings.Index(doc, "| command |"):]
	cmdTable = cmdTable[:strings.Index(cmdTable, "\n\n")]
	var help bytes.Buffer
	usage(&help)
	for name := range commands {
		if !strings.Contains(help.String(), "  "+name+" ") {
			t.Errorf("stagger help does not list %q", name)
		}
		if !strings.Contains(cmdTable, "`stagger "+name) {
			t.Errorf("docs/cli.md's command table does not list stagger %s", name)
		}
	}
	// The queue subcommands: stagger-store's TestCLIDocListsQueueCommands.
	if !strings.Contains(cmdTable, "`stagger broker redrive`") {
		t.Error("docs/cli.md's command table does not list stagger broker redrive")
	}
	if !strings.Contains(cmdTable, "`stagger help`") {
		t.Error("docs/cli.md's command table does not list stagger help")
	}
	exitTable := doc[strings.Index(doc, "| code | meaning |"):]
	exitTable = exitTable[:strings.Index(exitTable, "\n\n")]
	var codes []string
	for _, m := range regexp.MustCompile(`(?m)^\| (\d+) \|`).FindAllStringSubmatch(exitTable, -1) {
		codes = append(codes, m[1])
	}
	want := fmt.Sprint([]int{exitOK, exitFail, exitUsage, exitInterrupted, exitTerminated})
	if got := "[" + strings.Join(codes, " ") + "]"; got != want {
		t.Errorf("docs/cli.md's exit codes %s, the binary's %s", got, want)
	}
	for _, c := range []int{exitFail, exitUsage, exitInterrupted, exitTerminated} {
		if !strings.Contains(help.String(), fmt.Sprintf("%d ", c)) {
			t.Errorf("stagger help does not explain exit %d", c)
		}
	}
}

var numberRE = regexp.MustCompile(`\d+(\.\d+)?`)

// shape is a line with every number replaced by #: what a run must
// reproduce of a sample output whose counts vary from run to run.
func shape(line string) string {
	return strings.Join(strings.Fields(numberRE.ReplaceAllString(line, "#")), " ")
}

// A sample output in the docs (a ```text block after "<!-- output: ARGS -->")
// is what `stagger ARGS` prints: every line of the sample, but for "…"
// elisions, has a line of the same shape (numbers aside) in the real
// output, in the same order.
func TestDocSampleOutputs(t *testing.T) {
	bin := buildStagger(t)
	root := repoRoot(t)
	n := 0
	for _, b := range allBlocks(t, root) {
		args, ok := strings.CutPrefix(b.marker, "output:")
		if !ok {
			continue
		}
		n++
		words, err := shellWords(strings.TrimSpace(args))
		if err != nil {
			t.Fatalf("%s:%d: %v", b.file, b.line, err)
		}
		cmd := exec.Command(bin, words...)
		cmd.Dir = t.TempDir()
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s:%d: stagger %s: %v", b.file, b.line, args, err)
		}
		got := strings.Split(string(out), "\n")
		at := 0
		for _, want := range strings.Split(strings.TrimRight(b.body, "\n"), "\n") {
			if strings.HasPrefix(strings.TrimSpace(want), "…") {
				continue
			}
			ws := shape(want)
			for at < len(got) && shape(got[at]) != ws {
				at++
			}
			if at == len(got) {
				t.Errorf("%s:%d: the sample's line %q has no line of its shape (in order) in the output of stagger %s:\n%s",
					b.file, b.line, want, strings.TrimSpace(args), out)
				break
			}
			at++
		}
	}
	if n == 0 {
		t.Fatal("no sample output marked in the docs")
	}
}
