package timeline

import (
	"os"
	"strings"
	"testing"
)

// TestDocsExamples reads the timeline and the CSV shown in docs/proxy.md.
func TestDocsExamples(t *testing.T) {
	b, err := os.ReadFile("../../docs/proxy.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := map[string]int{}
	for _, part := range strings.Split(string(b), "```")[1:] {
		lang, body, _ := strings.Cut(part, "\n")
		switch lang {
		case "jsonl":
			if _, err := Read(strings.NewReader(body)); err != nil {
				t.Errorf("the jsonl example: %v", err)
			}
		case "csv":
			if _, err := ReadCSV(strings.NewReader(body), 0); err != nil {
				t.Errorf("the csv example: %v", err)
			}
		default:
			continue
		}
		blocks[lang]++
	}
	if blocks["jsonl"] != 1 || blocks["csv"] != 1 {
		t.Errorf("found %v examples in docs/proxy.md, want one jsonl and one csv", blocks)
	}
}
