package sim

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestResultRoundTrip(t *testing.T) {
	res, err := Run(context.Background(), "herd", map[string]string{"workers": "50", "outage": "2s"}, Options{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Charts) == 0 || len(res.Charts[0].Series) == 0 || len(res.Charts[0].Series[0].Points) == 0 {
		t.Fatalf("herd has no chart points: %+v", res.Charts)
	}
	var settings []string
	for _, s := range res.Settings {
		settings = append(settings, s.Name+"="+s.Value)
	}
	if got := strings.Join(settings, " "); !strings.Contains(got, "workers=50") || !strings.Contains(got, "outage=2s") {
		t.Errorf("settings %q lack the parameters given", got)
	}
	var text, js, csv, html bytes.Buffer
	for _, w := range []error{res.WriteText(&text), res.WriteJSON(&js), res.WriteCSV(&csv), res.WriteReport(&html, "sub")} {
		if w != nil {
			t.Fatal(w)
		}
	}
	if !strings.HasPrefix(text.String(), "herd — ") || !strings.HasPrefix(js.String(), `{"scenario":"herd"`) ||
		!strings.HasPrefix(csv.String(), res.Table.Columns[0].Key+",") || !strings.Contains(html.String(), "<svg") {
		t.Errorf("writers:\n%s\n%s\n%s", text.String(), js.String(), csv.String())
	}
}

func TestRunRejects(t *testing.T) {
	for _, c := range []struct {
		name   string
		params map[string]string
		want   string
	}{
		{"nope", nil, `unknown scenario "nope" (one of outage, herd,`},
		{"herd", map[string]string{"wrokers": "5"}, `herd has no parameter "wrokers" (it has `},
		{"herd", map[string]string{"workers": "many"}, "workers: must be a whole number"},
		{"herd", map[string]string{"workers": "0"}, "workers: must be in ["},
		{"outage", map[string]string{"strategy": "sometimes"}, `strategy: unknown name "sometimes"`},
	} {
		_, err := Run(context.Background(), c.name, c.params, Options{})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %v: %v, want ErrInvalid with %q", c.name, c.params, err, c.want)
		}
	}
}

// Every parameter's Default is a value Run takes, and running with every
// default given explicitly changes nothing.
func TestDefaultsRoundTrip(t *testing.T) {
	for _, s := range Scenarios() {
		if len(s.Params) == 0 || s.Summary == "" {
			t.Errorf("%s: no parameters or summary", s.Name)
		}
		if s.Name != "outage" && s.Name != "layers" {
			continue // the others take seconds each
		}
		given := map[string]string{}
		for _, p := range s.Params {
			given[p.Name] = p.Default
		}
		a, err := Run(context.Background(), s.Name, nil, Options{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		b, err := Run(context.Background(), s.Name, given, Options{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: defaults given explicitly changed the result", s.Name)
		}
	}
}

func TestRunStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, "budgets", nil, Options{}); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled run: %v", err)
	}
}
