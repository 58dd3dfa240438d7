package main

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/staggerhq/stagger/check"
)

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const (
	minePolicy  = `{"name": "mine", "maxAttempts": 5, "schedule": {"kind": "exponential", "base": "100ms", "cap": "2s", "jitter": "full"}, "budget": {"kind": "token-bucket"}}`
	stormPolicy = `{"name": "storm", "maxAttempts": 1000, "schedule": {"kind": "constant", "delay": "20ms"}}`
	grpcConfig  = `{"methodConfig": [{"name": [{}], "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}], "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}}`
)

// TestCheckCommand: the lab's outage by default; a threshold that holds
// exits 0, one that fails exits 1, and the JUnit file has one test case
// per policy × threshold with the failures marked.
func TestCheckCommand(t *testing.T) {
	dir := t.TempDir()
	mine := writeFile(t, dir, "mine.json", minePolicy)
	storm := writeFile(t, dir, "storm.json", stormPolicy)
	sc := writeFile(t, dir, "service-config.json", grpcConfig)

	code, out, errOut := runCLI(t, "check", "--policy", mine, "--policy", sc, "--max-amplification", "5", "--max-peak", "10")
	if code != exitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q\n%s", code, errOut, out)
	}
	for _, want := range []string{"lab outage", "virtual time", "mine", "service-config", "PASS: 4 of 4"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	junit, report := filepath.Join(dir, "junit.xml"), filepath.Join(dir, "r.html")
	code, out, _ = runCLI(t, "check", "--policy", mine, "--policy", storm, "--max-amplification", "5", "--max-peak", "10",
		"--junit", junit, "--report", report)
	if code != exitFail || !strings.Contains(out, "FAIL storm: amplification 16.000 exceeds 5") || !strings.Contains(out, "FAIL: 2 of 4") {
		t.Fatalf("a storm must fail: exit %d\n%s", code, out)
	}
	b, err := os.ReadFile(junit)
	if err != nil {
		t.Fatal(err)
	}
	var js struct {
		Suites []struct {
			Tests    int `xml:"tests,attr"`
			Failures int `xml:"failures,attr"`
			Cases    []struct {
				Class   string `xml:"classname,attr"`
				Name    string `xml:"name,attr"`
				Failure *struct {
					Message string `xml:"message,attr"`
				} `xml:"failure"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(b, &js); err != nil {
		t.Fatal(err)
	}
	s := js.Suites[0]
	if s.Tests != 4 || s.Failures != 2 || len(s.Cases) != 4 {
		t.Fatalf("junit: %d tests, %d failures, %d cases; want 4, 2, 4", s.Tests, s.Failures, len(s.Cases))
	}
	for _, c := range s.Cases {
		if (c.Failure != nil) != (c.Class == "stagger.check.storm") {
			t.Errorf("junit case %s %s: failure %v", c.Class, c.Name, c.Failure)
		}
	}
	if rb, err := os.ReadFile(report); err != nil || !strings.Contains(string(rb), "attempts received per window") {
		t.Fatalf("report: %v", err)
	}
}

func TestCheckJSON(t *testing.T) {
	dir := t.TempDir()
	mine := writeFile(t, dir, "mine.json", minePolicy)
	code, out, _ := runCLI(t, "check", "--policy", mine, "--rate", "100", "--fault", "down 2s at 2s", "--duration", "10s", "--latency", "20ms",
		"--max-amplification", "1.5", "--recover-within", "2s", "--not-metastable", "--json")
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, out)
	}
	var res struct {
		Clock    string `json:"clock"`
		OK       bool   `json:"ok"`
		Policies []struct {
			Name          string  `json:"name"`
			Requests      int64   `json:"requests"`
			Attempts      int64   `json:"attempts"`
			Amplification float64 `json:"amplification"`
			Recovered     bool    `json:"recovered"`
		} `json:"policies"`
		Verdicts []struct {
			Policy string `json:"policy"`
			OK     bool   `json:"ok"`
		} `json:"verdicts"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	p := res.Policies[0]
	if !res.OK || res.Clock != "virtual" || len(res.Verdicts) != 3 || !res.Verdicts[0].OK || res.Verdicts[0].Policy != "mine" || p.Requests < 900 || p.Attempts <= p.Requests || !p.Recovered {
		t.Fatalf("unexpected result: %+v", res)
	}
}

// TestCheckBadInput: every bad policy file, flag or threshold exits 2 with
// a message naming the field (or flag) and the rule, and writes nothing.
func TestCheckBadInput(t *testing.T) {
	dir := t.TempDir()
	mine := writeFile(t, dir, "mine.json", minePolicy)
	junit := filepath.Join(dir, "out.xml")
	for name, c := range map[string]struct {
		file string // a policy file's body; "" uses mine
		args []string
		want string
	}{
		"bool for number":  {file: `{"maxAttempts": true}`, want: "maxAttempts: want a whole number, got a boolean"},
		"fraction":         {file: `{"maxAttempts": 2.5}`, want: "maxAttempts: want a whole number"},
		"huge":             {file: `{"hedge": {"delay": "10ms", "quantile": 1e999}}`, want: "hedge.quantile"},
		"NaN string":       {file: `{"hedge": {"delay": "10ms", "quantile": "NaN"}}`, want: "hedge.quantile: want a finite number, got a string"},
		"negative":         {file: `{"maxAttempts": -1}`, want: "maxAttempts: must be >= 1"},
		"negative dur":     {file: `{"attemptTimeout": "-1s"}`, want: "attemptTimeout: must be >= 0"},
		"no unit":          {file: `{"timeout": "5"}`, want: `timeout: want a duration with a unit`},
		"unknown field":    {file: `{"maxAttempt": 3}`, want: `unknown field "maxAttempt"`},
		"unknown nested":   {file: `{"schedule": {"kind": "constant", "delay": "1s", "dealy": "1s"}}`, want: `unknown field "dealy"`},
		"bad kind":         {file: `{"budget": {"kind": "bucket"}}`, want: "budget.kind: want token-bucket, grpc or ratio"},
		"malformed":        {file: `{"maxAttempts": 3`, want: "malformed JSON"},
		"two values":       {file: `{} {}`, want: "malformed JSON"},
		"grpc bad":         {file: `{"methodConfig": [{"name": [{}], "retryPolicy": {"maxAttempts": 4}}]}`, want: "initialBackoff is required"},
		"no policy":        {args: []string{"check"}, want: "--policy FILE is required"},
		"NaN threshold":    {args: []string{"--max-amplification", "NaN"}, want: "--max-amplification: want a finite number"},
		"Inf threshold":    {args: []string{"--max-amplification", "+Inf"}, want: "want a finite number"},
		"neg peak":         {args: []string{"--max-peak", "-3"}, want: "--max-peak"},
		"neg recover":      {args: []string{"--recover-within", "-1s"}, want: "--recover-within"},
		"bad fault":        {args: []string{"--fault", "down 1s"}, want: `--fault "down 1s"`},
		"bad refusal":      {args: []string{"--refusal", "teapot"}, want: "--refusal"},
		"baseline alone":   {args: []string{"--baseline", "mine"}, want: "--baseline and --max-load"},
		"unknown baseline": {args: []string{"--baseline", "theirs", "--max-load", "1.2"}, want: `--baseline "theirs"`},
		"report dir":       {args: []string{"--report", filepath.Join(dir, "nope", "r.html")}, want: "--report"},
		"rate and callers": {args: []string{"--rate", "10", "--callers", "3"}, want: "exclude each other"},
	} {
		args := []string{"check", "--junit", junit}
		if c.file != "" {
			args = append(args, "--policy", writeFile(t, dir, "p.json", c.file))
		} else if len(c.args) == 0 || c.args[0] != "check" {
			args = append(args, "--policy", mine)
		}
		if len(c.args) > 0 && c.args[0] == "check" {
			args = []string{"check", "--junit", junit}
		} else {
			args = append(args, c.args...)
		}
		code, out, errOut := runCLI(t, args...)
		if code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("%s: exit %d, stderr %q; want exit 2 naming %q (stdout %q)", name, code, errOut, c.want, out)
		}
		if _, err := os.Stat(junit); err == nil {
			t.Fatalf("%s: a JUnit file was written for bad input", name)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Errorf("stray files in %s: %v", dir, ents)
	}
}

func TestCheckReal(t *testing.T) {
	dir := t.TempDir()
	mine := writeFile(t, dir, "mine.json", minePolicy)
	code, out, _ := runCLI(t, "check", "--policy", mine, "--real", "--max-amplification", "5")
	if code != exitOK || !strings.Contains(out, "real time") {
		t.Fatalf("exit %d\n%s", code, out)
	}
}

// FuzzParsePolicy: any policy file is parsed without a panic, and one
// that parses makes a valid retry policy (and hedge).
func FuzzParsePolicy(f *testing.F) {
	for _, s := range []string{minePolicy, stormPolicy, grpcConfig, `{}`, `{"hedge": {"delay": "10ms", "quantile": 0.9}}`,
		`{"budget": {"kind": "ratio", "ratio": 0.1, "span": "10s"}, "limiter": {"kind": "bulkhead", "size": 3}}`,
		`{"schedule": {"kind": "decorrelated", "base": "10ms", "cap": "1s"}}`, `{"maxAttempts": true}`, `[1, 2]`, `null`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := parsePolicy("fuzz", b)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("a multi-line error: %q", err)
			}
			return
		}
		if p.Name == "" || !p.Virtual() {
			t.Fatalf("a parsed policy without a name or not runnable: %+v", p)
		}
		if err := (&check.Experiment{Policies: []check.Policy{p}, Callers: check.ClosedLoop(1)}).Validate(); err != nil {
			t.Fatalf("a parsed policy makes an invalid experiment: %v", err)
		}
	})
}

// TestCheckExperimentFile: an --experiment file sets flags by name, each
// through its own rule; the command line wins; a policy path is relative
// to the file.
func TestCheckExperimentFile(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "mine.json", minePolicy)
	exp := writeFile(t, dir, "exp.json", `{"policy": ["mine.json"], "rate": 100, "fault": "down 2s at 2s", "duration": "10s",
		"latency": "20ms", "max-amplification": 1.5, "not-metastable": true, "seed": 3}`)
	code, out, errOut := runCLI(t, "check", "--experiment", exp)
	if code != exitOK || !strings.Contains(out, "faults: down 2s at 2s") || !strings.Contains(out, "PASS: 2 of 2") || !strings.Contains(out, "seed 3") {
		t.Fatalf("exit %d, stderr %q\n%s", code, errOut, out)
	}
	code, out, _ = runCLI(t, "check", "--experiment", exp, "--max-amplification", "1")
	if code != exitFail || !strings.Contains(out, "exceeds 1 ") {
		t.Fatalf("the command line's threshold must win: exit %d\n%s", code, out)
	}
	for name, c := range map[string]struct{ body, want string }{
		"bool for number": {`{"rate": true}`, "rate: want a number, got a boolean"},
		"number for bool": {`{"real": 1}`, "real: want true or false, got a number"},
		"string number":   {`{"max-peak": "80"}`, "max-peak: want a number, got a string"},
		"NaN-ish":         {`{"max-amplification": 1e999}`, "max-amplification: want a finite number"},
		"negative":        {`{"max-peak": -1}`, "max-peak: must be between 1"},
		"unknown":         {`{"rates": 100}`, `unknown field "rates"`},
		"bad fault":       {`{"fault": ["down 1s"]}`, `--fault "down 1s"`},
		"not an object":   {`[1]`, "want an object"},
	} {
		p := writeFile(t, dir, "bad.json", c.body)
		code, _, errOut := runCLI(t, "check", "--experiment", p, "--policy", filepath.Join(dir, "mine.json"))
		if code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("%s: exit %d, stderr %q; want 2 naming %q", name, code, errOut, c.want)
		}
	}
}

// TestCheckDocs runs the command lines of docs/check.md and the README
// with docs/check.md's policy file, as written.
func TestCheckDocs(t *testing.T) {
	doc, err := os.ReadFile("../../docs/check.md")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	block := func(src, lang string) string {
		i := strings.Index(src, "```"+lang+"\n")
		if i < 0 {
			t.Fatalf("no %s block", lang)
		}
		rest := src[i+len(lang)+4:]
		return rest[:strings.Index(rest, "```")]
	}
	dir := t.TempDir()
	writeFile(t, dir, "retry.json", block(string(doc), "json"))
	// the recording the replay example reads: 40 requests a second for
	// 5 s, every attempt refused in seconds 1 and 2
	var rec strings.Builder
	rec.WriteString(`{"stagger_timeline":1,"window_ms":1000}` + "\n")
	for s := range 5 {
		if s == 1 || s == 2 {
			fmt.Fprintf(&rec, `{"start_ms":%d,"arrivals":40,"originals":40,"refusals":40}`+"\n", s*1000)
		} else {
			fmt.Fprintf(&rec, `{"start_ms":%d,"arrivals":40,"originals":40,"status":{"200":40},"p50_ms":20,"p99_ms":80}`+"\n", s*1000)
		}
	}
	rec.WriteString(`{"end":{"windows":5,"arrivals":200}}` + "\n")
	writeFile(t, dir, "last-outage.jsonl", rec.String())
	t.Chdir(dir)
	var cmds []string
	for rest := string(doc); strings.Contains(rest, "```sh\n"); {
		i := strings.Index(rest, "```sh\n") + len("```sh\n")
		j := strings.Index(rest[i:], "```")
		cmds = append(cmds, strings.ReplaceAll(rest[i:i+j], "\\\n", " "))
		rest = rest[i+j+3:]
	}
	rm := regexp.MustCompile("`(stagger check [^`]*)`").FindStringSubmatch(string(readme))
	if rm == nil || len(cmds) != 2 {
		t.Fatalf("the README shows no stagger check command, or docs/check.md not 2 (%d)", len(cmds))
	}
	for _, cmd := range append(cmds, rm[1]) {
		args, err := shellWords(strings.TrimSpace(cmd))
		if err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
		if args[0] != "stagger" {
			t.Fatalf("not a stagger command: %q", cmd)
		}
		os.Remove("check.xml")
		code, out, errOut := runCLI(t, args[1:]...)
		if code != exitOK || !strings.Contains(out, "PASS") {
			t.Errorf("%s: exit %d, stderr %q\n%s", cmd, code, errOut, out)
		}
		if _, err := os.Stat("check.xml"); err != nil {
			t.Errorf("%s wrote no JUnit file: %v", cmd, err)
		}
	}
}

// TestCheckReplay: --replay runs the policies against a recorded outage,
// from the proxy's JSON lines or a CSV export; a file cut short or out of
// order exits 2.
func TestCheckReplay(t *testing.T) {
	dir := t.TempDir()
	storm := writeFile(t, dir, "storm.json", `{"name": "storm", "maxAttempts": 10, "schedule": {"kind": "constant", "delay": "50ms"}}`)
	var b strings.Builder
	b.WriteString(`{"stagger_timeline":1,"window_ms":1000}` + "\n")
	var csv strings.Builder
	csv.WriteString("window_start_ms,arrivals,status_200,refusals\n")
	for s := range 5 {
		if s == 1 || s == 2 {
			b.WriteString(`{"start_ms":` + strconv.Itoa(s*1000) + `,"arrivals":40,"originals":40,"refusals":40}` + "\n")
			csv.WriteString(strconv.Itoa(s*1000) + ",40,0,40\n")
		} else {
			b.WriteString(`{"start_ms":` + strconv.Itoa(s*1000) + `,"arrivals":40,"originals":40,"status":{"200":40},"p50_ms":20,"p99_ms":80}` + "\n")
			csv.WriteString(strconv.Itoa(s*1000) + ",40,40,0\n")
		}
	}
	b.WriteString(`{"end":{"windows":5,"arrivals":200}}` + "\n")
	for _, rec := range []string{writeFile(t, dir, "outage.jsonl", b.String()), writeFile(t, dir, "outage.csv", csv.String())} {
		code, out, errOut := runCLI(t, "check", "--policy", storm, "--replay", rec, "--max-amplification", "2")
		if code != exitFail || !strings.Contains(out, "replay of outage") || !strings.Contains(out, "FAIL storm: amplification") {
			t.Errorf("%s: exit %d, stderr %q\n%s", rec, code, errOut, out)
		}
	}
	cut := writeFile(t, dir, "cut.jsonl", strings.Split(b.String(), "{\"end\"")[0])
	if code, _, errOut := runCLI(t, "check", "--policy", storm, "--replay", cut); code != exitUsage || !strings.Contains(errOut, "--replay") {
		t.Errorf("a recording cut short: exit %d, %q", code, errOut)
	}
	hedged := writeFile(t, dir, "hedged.json", `{"hedge": {"delay": "10ms"}}`)
	if code, _, errOut := runCLI(t, "check", "--policy", hedged, "--replay", filepath.Join(dir, "outage.jsonl")); code != exitUsage || !strings.Contains(errOut, "no policy can run here: hedged: a hedge is not replayed") {
		t.Errorf("a hedge alone in a replay: exit %d, %q", code, errOut)
	}
	if code, _, errOut := runCLI(t, "check", "--policy", storm, "--replay", cut, "--rate", "5"); code != exitUsage || !strings.Contains(errOut, "--replay excludes") {
		t.Errorf("--replay with --rate: exit %d, %q", code, errOut)
	}
	// In real time a hedge replays too: half a second of a short recording.
	var short strings.Builder
	short.WriteString(`{"stagger_timeline":1,"window_ms":100}` + "\n")
	for w := range 5 {
		if w == 2 {
			short.WriteString(`{"start_ms":200,"arrivals":4,"originals":4,"refusals":4}` + "\n")
		} else {
			short.WriteString(`{"start_ms":` + strconv.Itoa(w*100) + `,"arrivals":4,"originals":4,"status":{"200":4},"p50_ms":2,"p99_ms":5}` + "\n")
		}
	}
	short.WriteString(`{"end":{"windows":5,"arrivals":20}}` + "\n")
	rec := writeFile(t, dir, "short.jsonl", short.String())
	if code, out, errOut := runCLI(t, "check", "--policy", hedged, "--replay", rec, "--real"); code != exitOK || !strings.Contains(out, "hedged") {
		t.Errorf("a hedge replayed in real time: exit %d, stderr %q\n%s", code, errOut, out)
	}
}
