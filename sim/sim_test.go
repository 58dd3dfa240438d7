package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/staggerhq/stagger/internal/simkit"
)

// The public result types mirror the implementation's field for field;
// fromKit and kit would lose a field added on one side only.
func TestTypesMirrorTheImplementation(t *testing.T) {
	for _, p := range []struct{ pub, kit any }{
		{Result{}, simkit.Result{}}, {Setting{}, simkit.Setting{}}, {Table{}, simkit.Table{}},
		{Column{}, simkit.Column{}}, {Chart{}, simkit.Chart{}}, {Series{}, simkit.Series{}},
		{Point{}, simkit.Point{}}, {Shade{}, simkit.Shade{}}, {Options{}, simkit.Options{}},
	} {
		pt, kt := reflect.TypeOf(p.pub), reflect.TypeOf(p.kit)
		var pub, kit []string
		for i := range pt.NumField() {
			pub = append(pub, pt.Field(i).Name)
		}
		for i := range kt.NumField() {
			if n := kt.Field(i).Name; n != "Events" { // engine events: the implementation's business
				kit = append(kit, n)
			}
		}
		if !slices.Equal(pub, kit) {
			t.Errorf("%v has %v, %v %v", pt, pub, kt, kit)
		}
	}
}

// A result survives the round trip to the implementation's types and back,
// charts included, so every writer sees what Run returned.
// fill sets every exported field under v to a value of its own (n counts
// up), one element in every slice, so that a conversion that drops a
// field shows.
func fill(t *testing.T, v reflect.Value, n *int) {
	*n++
	switch v.Kind() {
	case reflect.String:
		v.SetString(fmt.Sprint("s", *n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(int64(*n))
	case reflect.Uint64:
		v.SetUint(uint64(*n))
	case reflect.Float64:
		v.SetFloat(float64(*n) + 0.5)
	case reflect.Interface:
		v.Set(reflect.ValueOf(*n))
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(t, v.Index(0), n)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(t, v.Field(i), n)
			}
		}
	default:
		t.Fatalf("fill: kind %v (%v) not covered", v.Kind(), v.Type())
	}
}

// Every field of the implementation's result, at every depth, survives
// the conversion to the public result and back (Events is the
// implementation's own).
func TestResultConversionCopiesEveryField(t *testing.T) {
	var k simkit.Result
	n := 0
	fill(t, reflect.ValueOf(&k).Elem(), &n)
	k.Events = 0
	if back := fromKit(&k).kit(); !reflect.DeepEqual(back, &k) {
		t.Errorf("a field is lost on the way:\n got %+v\nwant %+v", back, &k)
	}
}

func TestResultRoundTrip(t *testing.T) {
	res, err := Run(context.Background(), "herd", map[string]string{"workers": "50", "outage": "2s"}, Options{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Charts) == 0 || len(res.Charts[0].Series) == 0 || len(res.Charts[0].Series[0].Points) == 0 {
		t.Fatalf("herd has no chart points: %+v", res.Charts)
	}
	if back := fromKit(res.kit()); !reflect.DeepEqual(back, res) {
		t.Errorf("round trip changed the result:\n%+v\n%+v", back, res)
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
