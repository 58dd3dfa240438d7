package faultproxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/staggerhq/stagger/internal/labkit"
)

// shellWords splits a line as sh does for the docs' commands: blanks, and
// single-quoted strings.
func shellWords(line string) []string {
	var words []string
	var cur strings.Builder
	in, any := false, false
	for _, r := range line {
		switch {
		case r == '\'':
			in, any = !in, true
		case (r == ' ' || r == '\t') && !in:
			if any {
				words = append(words, cur.String())
			}
			cur.Reset()
			any = false
		default:
			cur.WriteRune(r)
			any = true
		}
	}
	if any {
		words = append(words, cur.String())
	}
	return words
}

// TestDocsExamples runs the control API's curl commands of docs/proxy.md,
// in order, against a control API (each must succeed), and parses every
// run-time clause its commands give to --fault.
func TestDocsExamples(t *testing.T) {
	b, err := os.ReadFile("../../docs/proxy.md")
	if err != nil {
		t.Fatal(err)
	}
	p, url := startHTTP(t)
	c := NewControl(nil)
	defer c.Close()
	c.Add(p)
	api := httptest.NewServer(c.Handler())
	defer api.Close()
	req, _ := http.NewRequest("GET", url+"/", nil)
	req.Header.Set(labkit.HeaderRequestID, "order-1")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
	curls, clauses := 0, 0
	for i, part := range strings.Split(string(b), "```") {
		lang, body, _ := strings.Cut(part, "\n")
		if i%2 == 0 || lang != "sh" {
			continue
		}
		body = strings.ReplaceAll(body, "\\\n", " ")
		for _, line := range strings.Split(body, "\n") {
			w := shellWords(line)
			for j := 0; j+1 < len(w); j++ {
				if w[j] != "--fault" {
					continue
				}
				for _, clause := range strings.Split(w[j+1], ";") {
					word, _, _ := strings.Cut(strings.TrimSpace(clause), " ")
					if labkit.IsRuntimeFault(word) && word != "latency" || word == "latency" && strings.Contains(line, "tcp://") {
						clauses++
						if _, err := labkit.ParseFault(clause); err != nil {
							t.Errorf("docs: --fault %q: %v", clause, err)
						}
					}
				}
			}
			if len(w) == 0 || w[0] != "curl" {
				continue
			}
			method, target, data := "GET", "", ""
			for j := 1; j < len(w); j++ {
				switch {
				case w[j] == "-X":
					method, j = w[j+1], j+1
				case w[j] == "-d":
					data, j = w[j+1], j+1
					if method == "GET" {
						method = "POST"
					}
				case strings.HasPrefix(w[j], "http://127.0.0.1:8474"):
					target = strings.TrimPrefix(w[j], "http://127.0.0.1:8474")
				}
			}
			if target == "" {
				continue // the proxy's own /_stagger/stats
			}
			data = strings.ReplaceAll(data, "127.0.0.1:16379", "127.0.0.1:0")
			curls++
			r, _ := http.NewRequest(method, api.URL+target, strings.NewReader(data))
			resp, err := http.DefaultClient.Do(r)
			if err != nil {
				t.Fatal(err)
			}
			out, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode >= 400 {
				t.Errorf("docs: %s: %d %s", line, resp.StatusCode, out)
			}
		}
	}
	if curls < 14 || clauses < 5 {
		t.Errorf("ran %d curl commands and parsed %d clauses from docs/proxy.md; the docs have more", curls, clauses)
	}
}
