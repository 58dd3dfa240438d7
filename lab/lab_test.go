package lab

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/staggerhq/stagger/internal/labkit"
)

// Every outcome is written as its name and read back.
func TestOutcomeText(t *testing.T) {
	for o := Accepted; o <= Abandoned; o++ {
		b, err := o.MarshalText()
		var back Outcome
		if err != nil || string(b) != o.String() || back.UnmarshalText(b) != nil || back != o {
			t.Errorf("%v: MarshalText %q, %v; back %v", o, b, err, back)
		}
	}
}

func panicAbort(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }

func TestHandlerOutcomes(t *testing.T) {
	cases := []struct {
		name   string
		serve  http.HandlerFunc
		gone   bool // the client went away before the answer
		panics bool // serve panics with http.ErrAbortHandler
		want   Outcome
	}{
		{"ok", func(w http.ResponseWriter, r *http.Request) {}, false, false, Accepted},
		{"4xx is served", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(404) }, false, false, Accepted},
		{"5xx", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(503) }, false, false, Failed},
		{"panic", panicAbort, false, true, Failed},
		{"client gone", panicAbort, true, true, Abandoned},
	}
	for _, c := range cases {
		start := time.Now()
		rec := NewRecorder(start)
		wrec, err := NewWindowedRecorder(start, WindowedConfig{})
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range []http.Handler{rec.Handler(c.serve), wrec.Handler(c.serve)} {
			req := httptest.NewRequest("GET", "/", nil)
			req.Header.Set(HeaderRequestID, "order-1")
			req.Header.Set(HeaderAttempt, "2")
			if c.gone {
				ctx, cancel := context.WithCancel(req.Context())
				cancel()
				req = req.WithContext(ctx)
			}
			func() {
				defer func() {
					// A handler's panic goes on once the attempt is counted;
					// a handler that does not panic is not made to.
					var want any
					if c.panics {
						want = http.ErrAbortHandler
					}
					if v := recover(); v != want {
						t.Errorf("%s: recovered %v, want %v", c.name, v, want)
					}
					// Never recovered before: the panic's stack is still
					// the handler's own.
					if c.panics && !strings.Contains(string(debug.Stack()), "panicAbort") {
						t.Errorf("%s: the panic's stack lost the handler's frames:\n%s", c.name, debug.Stack())
					}
				}()
				h.ServeHTTP(httptest.NewRecorder(), req)
			}()
		}
		for _, s := range []Stats{rec.Stats(0), wrec.Stats(true)} {
			if s.Total != 1 || s.Requests != 1 || s.MaxAttempts != 1 || s.Unidentified != 0 {
				t.Errorf("%s: total %d, requests %d, max attempts %d, unidentified %d", c.name, s.Total, s.Requests, s.MaxAttempts, s.Unidentified)
			}
			got := map[Outcome]int{Accepted: s.Accepted, Failed: s.Failed, Abandoned: s.Abandoned, Down: s.Down, Busy: s.Busy}
			if got[c.want] != 1 {
				t.Errorf("%s: counted %v, want one %v", c.name, got, c.want)
			}
		}
	}
}

func TestRunRejectsBadOptions(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Callers: -1}, "Callers must be in [1, 10000], got -1"},
		{Options{Callers: 10001}, "Callers must be in [1, 10000]"},
		{Options{Strategies: []string{"expo-full", "sometimes"}}, `Strategies[1] "sometimes"`},
		{Options{Latency: -time.Millisecond}, "Latency must be >= 0"},
		{Options{Window: -time.Millisecond}, "Window must be > 0"},
	} {
		_, err := Run(context.Background(), c.o)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want ErrInvalid with %q", c.o, err, c.want)
		}
	}
}

// A short run of two strategies through the real gateway. The callers
// start 16, 32 and 48 ms in; the outage lasts 200 ms so that a loaded
// machine still sees attempts refused.
func TestRunAndReport(t *testing.T) {
	res, err := Run(context.Background(), Options{Callers: 3, Strategies: []string{"immediate", "expo-full+budget"},
		Outage: 200 * time.Millisecond, Latency: time.Millisecond, Window: 50 * time.Millisecond, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Strategies) != 2 || res.Strategies[1].Strategy != "expo-full+budget" {
		t.Fatalf("strategies %+v", res.Strategies)
	}
	for _, s := range res.Strategies {
		g := s.Gateway
		if s.Callers != 3 || s.Accepted != 3 || g.Accepted != 3 || g.Requests != 3 || g.Window != 50*time.Millisecond {
			t.Errorf("%s: callers %d/%d, gateway %+v", s.Strategy, s.Accepted, s.Callers, g)
		}
		if g.Down == 0 || g.Total != g.Accepted+g.Down {
			t.Errorf("%s: no attempt refused during the outage: %+v", s.Strategy, g)
		}
		if len(s.Mismatches) != 0 || len(s.GaveUp) != 0 {
			t.Errorf("%s: mismatches %v, gave up %v", s.Strategy, s.Mismatches, s.GaveUp)
		}
	}
	if err := res.Check(); err != nil {
		t.Error(err)
	}
	var b bytes.Buffer
	if err := res.WriteReport(&b, "test run"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<html", "test run", `data-title=`, "expo-full+budget"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

// Check reports a disagreement of the two sides, naming the strategy.
func TestCheckNamesTheStrategy(t *testing.T) {
	r := &Result{runs: []*labkit.Result{{Strategy: labkit.Strategy{Name: "expo"}, Mismatches: []string{"caller 1 attempt 2: not received"}}}}
	err := r.Check()
	if err == nil || !strings.Contains(err.Error(), "expo: callers and gateway disagree: caller 1 attempt 2") {
		t.Errorf("Check = %v", err)
	}
}

// The zero Options are `stagger lab` with no flags; each field changes
// only its part of the scenario.
func TestOptionsScenario(t *testing.T) {
	sc, sts, err := Options{}.scenario()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(sc, labkit.FourCallerOutage()) || len(sts) != 2 || sts[0].Name != "immediate" || sts[1].Name != "expo-full" {
		t.Errorf("zero Options: %+v, %d strategies", sc, len(sts))
	}
	sc, _, err = Options{Callers: 9, Outage: -1, Latency: 3 * time.Millisecond, Window: time.Second, Seed: 5}.scenario()
	if err != nil {
		t.Fatal(err)
	}
	if sc.Callers != 9 || len(sc.Faults.Down) != 0 || sc.Faults.Latency != 3*time.Millisecond || sc.RoundTrip != 0 ||
		sc.Window != time.Second || sc.Seed != 5 {
		t.Errorf("scenario %+v", sc)
	}
	sc, _, _ = Options{Outage: 2 * time.Second}.scenario()
	if len(sc.Faults.Down) != 1 || sc.Faults.Down[0] != (labkit.Span{From: 0, To: 2 * time.Second}) || sc.RoundTrip == 0 {
		t.Errorf("outage 2s: %+v", sc)
	}
}

// A handler under Recorder.Handler reaches the connection through
// http.ResponseController, as the Handler's doc says.
func TestHandlerHijackThroughController(t *testing.T) {
	rec := NewRecorder(time.Now())
	srv := httptest.NewServer(rec.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("Hijack: %v", err)
			return
		}
		defer conn.Close()
		buf.WriteString("HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
		buf.Flush()
	})))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Errorf("status %d, want 204 from the hijacked connection", resp.StatusCode)
	}
}
