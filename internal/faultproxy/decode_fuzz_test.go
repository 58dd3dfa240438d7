package faultproxy

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/staggerhq/stagger/internal/labkit"
)

// FuzzDecodeJSON: a control request body decodeJSON accepts is exactly one
// JSON object encoding/json reads to the same value; any other gets an
// error, never a panic.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{
		`{"name":"a","clause":"status 503 p=0.5"}`, `{"clause":1}`, `{"nope":1}`,
		`{"clause":"x"}{}`, `{`, ``, `null`, `[]`, `{"name":"\u0000"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var got FaultRequest
		if err := decodeJSON(b, &got); err != nil {
			if err.Error() == "" {
				t.Fatalf("decodeJSON(%q): an empty error", b)
			}
			return
		}
		var want FaultRequest
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("decodeJSON(%q) accepted what encoding/json refuses: %v", b, err)
		}
		if got != want {
			t.Fatalf("decodeJSON(%q) = %+v, encoding/json %+v", b, got, want)
		}
	})
}

// FuzzScheduleRequest: a body of POST /schedule or PUT /schedule/{name}
// is refused with a bad-request error that says what is wrong, or read to
// a valid name (or none) and one clause in normal form, which reads back
// to itself and compiles alone.
func FuzzScheduleRequest(f *testing.F) {
	for _, s := range []string{
		"down 700ms at 2s", `{"name":"out","clause":"drop 1s at 5s"}`, "cap 8", "flap 100ms/200ms at 1s for 3s",
		"down 1s at 0s; cap 2", `{"clause":"retry-after 1s","name":"a b"}`, "down 25h at 0s", "  ", `{"clause":1}`,
		"slow 1s at 0s for 1ns", "latency 9223372036s", "\x00", "DOWN 1S AT 2S",
	} {
		f.Add([]byte(s), "")
		f.Add([]byte(s), "out")
	}
	f.Fuzz(func(t *testing.T, body []byte, pathName string) {
		req, err := ParseScheduleRequest(body, pathName)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) || err.Error() == ErrBadRequest.Error()+": " {
				t.Fatalf("ParseScheduleRequest(%q, %q): error %v", body, pathName, err)
			}
			return
		}
		if req.Name != "" && !labkit.ValidFaultName(req.Name) {
			t.Fatalf("ParseScheduleRequest(%q): name %q accepted", body, req.Name)
		}
		again, err := ParseScheduleClause(req.Clause)
		if err != nil || again != req.Clause {
			t.Fatalf("ParseScheduleRequest(%q) = clause %q, which reads back as %q, %v", body, req.Clause, again, err)
		}
		if _, err := compileSchedule([]ScheduleClause{{Name: "x", Clause: req.Clause}}); err != nil {
			t.Fatalf("clause %q does not compile: %v", req.Clause, err)
		}
	})
}
