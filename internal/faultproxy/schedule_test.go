package faultproxy

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/staggerhq/stagger/internal/labkit"
)

func TestSchedule(t *testing.T) {
	s := newSchedule()
	for _, c := range []struct{ name, clause, want string }{
		{"", "down 1s at 2s", "down"},
		{"", "down  2s at 5s", "down-2"},
		{"slowly", "slow 100ms at 1s for 2s", "slowly"},
		{"", "cap 4", "cap"},
	} {
		if got, err := s.Add(c.name, c.clause); err != nil || got != c.want {
			t.Fatalf("Add(%q, %q) = %q, %v; want %q", c.name, c.clause, got, err, c.want)
		}
	}
	if got := s.Clauses(); strings.Join(got, "; ") != "down 1s at 2s; down 2s at 5s; slow 100ms at 1s for 2s; cap 4" {
		t.Errorf("clauses %q", got)
	}
	sc := s.load()
	if o, _ := sc.Decide(2500*time.Millisecond, 0); o != labkit.Down || len(sc.Down) != 2 || sc.Capacity != 4 {
		t.Errorf("compiled %+v", sc.FaultClauses)
	}
	for _, c := range []struct {
		name, clause string
		err          error
		has          string
	}{
		{"", "cap 8", ErrBadRequest, "cap is already set"},
		{"down", "down 1s at 9s", ErrClauseExists, `"down"`},
		{"", "down 1s at 2s; cap 3", ErrBadRequest, "one clause, without ';'"},
		{"", "  ", ErrBadRequest, "clause: required"},
		{"", "status 503", ErrBadRequest, "unknown fault"},
		{"", "down " + strings.Repeat("0", MaxScheduleClause) + "1s at 0s", ErrBadRequest, "over the limit of 256"},
		{"a/b", "latency 1s", ErrBadRequest, "name"},
	} {
		if _, err := s.Add(c.name, c.clause); !errors.Is(err, c.err) || !strings.Contains(err.Error(), c.has) {
			t.Errorf("Add(%q, %q): %v; want %v with %q", c.name, c.clause, err, c.err, c.has)
		}
	}
	if added, err := s.Put("cap", "cap 8"); added || err != nil || s.load().Capacity != 8 {
		t.Errorf("Put cap 8: %v %v, capacity %d", added, err, s.load().Capacity)
	}
	if err := s.Remove("down"); err != nil || len(s.load().Down) != 1 {
		t.Errorf("Remove(down): %v, %d downs", err, len(s.load().Down))
	}
	if err := s.Remove("down"); !errors.Is(err, ErrNoClause) {
		t.Errorf("Remove(down) twice: %v", err)
	}
	if _, err := s.Get("nope"); !errors.Is(err, ErrNoClause) {
		t.Errorf("Get(nope): %v", err)
	}
}

func TestControlSchedule(t *testing.T) {
	p, _ := startHTTP(t)
	c := NewControl(nil)
	defer c.Close()
	c.Add(p)
	srv := httptest.NewServer(c.Handler())
	defer srv.Close()
	checkSteps(t, srv.URL, []apiStep{
		{"GET", "/schedule", "", 200, "[]"},
		{"POST", "/schedule", "down 10s at 1h", 201, `"name": "down"`},
		{"POST", "/schedule", `{"name": "later", "clause": "down  2s  at 2h"}`, 201, `"clause": "down 2s at 2h"`},
		{"POST", "/schedule", "retry-after 2s", 201, `"name": "retry-after"`},
		{"GET", "/schedule/later", "", 200, `"clause": "down 2s at 2h"`},
		{"PUT", "/schedule/later", "drop 1s at 3h", 200, `"clause": "drop 1s at 3h"`},
		{"PUT", "/schedule/new", `{"clause": "cap 3"}`, 201, `"name": "new"`},
		{"GET", "/schedule", "", 200, `"name": "new"`},
		{"GET", "/stats", "", 200, `"cap 3"`},
		{"POST", "/schedule", "cap 5", 400, "cap is already set"},
		{"POST", "/schedule", `{"name": "down", "clause": "down 1s at 0s"}`, 409, "exists"},
		{"POST", "/schedule", "down 1s at 0s; cap 2", 400, "without ';'"},
		{"POST", "/schedule", "down 1s", 400, `want \"down D at T\"`},
		{"POST", "/schedule", "down 25h at 0s", 400, "must be <="},
		{"POST", "/schedule", "", 400, "clause: required"},
		{"POST", "/schedule", `{"clause": 1}`, 400, `field \"clause\"`},
		{"POST", "/schedule", `{"clause": "cap 1", "p": 1}`, 400, `unknown field \"p\"`},
		{"POST", "/schedule", `{"clause": "cap 1"`, 400, "malformed JSON"},
		{"POST", "/schedule", `{"name": "x y", "clause": "cap 1"}`, 400, "name"},
		{"PUT", "/schedule/x", `{"name": "y", "clause": "cap 1"}`, 400, "another clause"},
		{"POST", "/schedule", strings.Repeat("x", MaxControlBody+1), 413, "over the limit"},
		{"GET", "/schedule/nope", "", 404, `no such schedule clause: \"nope\"`},
		{"DELETE", "/schedule/nope", "", 404, "no such schedule clause"},
		{"DELETE", "/schedule/later", "", 204, ""},
		{"GET", "/schedule/later", "", 404, "no such schedule clause"},
		{"GET", "/proxies/nope/schedule", "", 404, "no proxy called"},
		{"PATCH", "/schedule/new", "", 405, "want GET, PUT, DELETE"},
		{"POST", "/proxies", `{"name":"redis","listen":"127.0.0.1:0","upstream":"127.0.0.1:1","kind":"tcp"}`, 201, `"kind": "tcp"`},
		{"POST", "/proxies/redis/schedule", "down 1s at 0s", 400, "has no fault schedule"},
		{"GET", "/schedule?proxy=redis", "", 400, "has no fault schedule"},
	})
}

// TestScheduleChangeUnderTraffic changes the schedule (an outage, a cap)
// and a run-time fault through the control API while eight clients send
// attempts: every attempt is counted once, and each count equals what the
// clients saw — 503 down from the schedule, 503 busy from the cap, 500
// from the fault, 200 through.
func TestScheduleChangeUnderTraffic(t *testing.T) {
	p, url, ctl, cl := startControlled(t)
	const clients, each = 8, 200
	steps := []struct{ method, path, body string }{
		{"PUT", "/schedule/out", "down 1h at 0s"},
		{"PUT", "/faults/flip", "status 500 p=0.5"},
		{"DELETE", "/schedule/out", ""},
		{"PUT", "/schedule/out", "cap 1"},
		{"DELETE", "/faults/flip", ""},
		{"PUT", "/schedule/out", "retry-after 1s"},
		{"POST", "/schedule", "down 1h at 0s"},
		{"DELETE", "/schedule/down", ""},
	}
	var mu sync.Mutex
	seen := map[string]int{}
	stop, changer := make(chan struct{}), make(chan int)
	go func() {
		n := 0
		defer func() { changer <- n }()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			s := steps[i%len(steps)]
			if code, body := call(t, s.method, ctl.URL+s.path, s.body); code >= 300 {
				t.Errorf("%s %s: %d %s", s.method, s.path, code, body)
				return
			}
			n++
		}
	}()
	traffic(t, cl, url+"/x", clients, each, func(resp *http.Response) {
		kind := resp.Status
		if f := resp.Header.Get(HeaderFault); f != "" {
			kind = "fault " + f
		} else if o := resp.Header.Get(labkit.HeaderOutcome); o != "" {
			kind = o
		}
		mu.Lock()
		seen[kind]++
		mu.Unlock()
	})
	close(stop)
	changes := <-changer
	s := p.Stats(false)
	var applied int64
	p.faults.mu.Lock()
	if k := p.faults.kept["flip"]; k != nil {
		applied = k.applied.Load()
	}
	p.faults.mu.Unlock()
	t.Logf("%d changes during %d attempts; clients saw %v", changes, clients*each, seen)
	if s.Total != clients*each || s.Accepted != seen["200 OK"] || s.Busy != seen["busy"] ||
		s.Down != seen["down"]+seen["fault flip"] || int(applied) != seen["fault flip"] || s.Total != s.Accepted+s.Rejected+s.Abandoned {
		t.Errorf("counted total %d, accepted %d, busy %d, down %d, fault applied %d; clients saw %v", s.Total, s.Accepted, s.Busy, s.Down, applied, seen)
	}
	if changes < len(steps) {
		t.Errorf("only %d changes while the traffic ran", changes)
	}
}
