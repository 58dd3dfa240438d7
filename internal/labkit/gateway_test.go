package labkit

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func TestFaultsDecide(t *testing.T) {
	f := Faults{
		Down:     []Span{{100 * ms, 300 * ms}},
		Latency:  10 * ms,
		Capacity: 3,
		Slow:     []Slow{{Span{400 * ms, 600 * ms}, 100 * ms}},
		Flap:     []Flap{{Span{1000 * ms, 1100 * ms}, 20 * ms, 30 * ms}},
	}
	if err := f.Validate(); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		t        time.Duration
		inFlight int
		o        Outcome
		lat      time.Duration
	}{
		{0, 0, Accepted, 10 * ms},
		{99 * ms, 2, Accepted, 10 * ms},
		{100 * ms, 0, Down, 10 * ms},
		{299 * ms, 0, Down, 10 * ms},
		{300 * ms, 0, Accepted, 10 * ms},
		{200 * ms, 3, Busy, 0}, // full beats down, and answers at once
		{50 * ms, 5, Busy, 0},
		{400 * ms, 0, Accepted, 10 * ms},
		{500 * ms, 0, Accepted, 60 * ms}, // half-way through the slow phase
		{599 * ms, 0, Accepted, 109500 * time.Microsecond},
		{600 * ms, 0, Accepted, 10 * ms},
		{1000 * ms, 0, Down, 10 * ms},
		{1019 * ms, 0, Down, 10 * ms},
		{1020 * ms, 0, Accepted, 10 * ms},
		{1049 * ms, 0, Accepted, 10 * ms},
		{1050 * ms, 0, Down, 10 * ms},
		{1100 * ms, 0, Accepted, 10 * ms},
	}
	for _, c := range cases {
		o, lat := f.Decide(c.t, c.inFlight)
		if o != c.o || lat != c.lat {
			t.Errorf("Decide(%v, %d) = %v, %v; want %v, %v", c.t, c.inFlight, o, lat, c.o, c.lat)
		}
	}
	if f.End() != 1100*ms {
		t.Errorf("End = %v", f.End())
	}
	o := Outage(700*ms, 5*ms)
	if len(o.Down) != 1 || o.Down[0] != (Span{0, 700 * ms}) || o.Latency != 5*ms {
		t.Errorf("Outage = %+v", o)
	}
	if len(Outage(0, 0).Down) != 0 {
		t.Error("Outage(0) has a down span")
	}
}

func TestFaultsValidate(t *testing.T) {
	bad := []struct {
		f    Faults
		want string
	}{
		{Faults{Down: []Span{{-1, 10}}}, "Faults.Down[0].From"},
		{Faults{Down: []Span{{0, 10}, {10, 10}}}, "Faults.Down[1].To"},
		{Faults{Latency: -1}, "Faults.Latency"},
		{Faults{Capacity: -1}, "Faults.Capacity"},
		{Faults{RetryAfter: -1}, "Faults.RetryAfter"},
		{Faults{Slow: []Slow{{Span{5, 1}, 1}}}, "Faults.Slow[0].To"},
		{Faults{Slow: []Slow{{Span{0, 1}, -1}}}, "Faults.Slow[0].Extra"},
		{Faults{Flap: []Flap{{Span{0, 10}, 0, 1}}}, "Faults.Flap[0].Down"},
	}
	for _, c := range bad {
		err := c.f.Validate()
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", c.f, err, c.want)
		}
		if _, err := NewGateway(c.f, time.Now()); err == nil {
			t.Errorf("NewGateway accepted %+v", c.f)
		}
	}
}

// TestGatewayHTTP drives the gateway over an in-memory network in virtual
// time, so the latencies it adds are measured exactly.
func TestGatewayHTTP(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		g, err := NewGateway(Faults{
			Down:       []Span{{0, 100 * ms}},
			Latency:    10 * ms,
			Slow:       []Slow{{Span{200 * ms, 400 * ms}, 200 * ms}},
			RetryAfter: 1500 * ms,
		}, start)
		if err != nil {
			t.Fatal(err)
		}
		pn := newPipeNet()
		url := g.Serve(pn)
		if g.URL() != url || !strings.HasPrefix(url, "http://") {
			t.Fatalf("URL %q vs %q", g.URL(), url)
		}
		tr := &http.Transport{DialContext: pn.Dial}
		defer tr.CloseIdleConnections()
		client := &http.Client{Transport: tr}
		do := func(id, attempt string) (*http.Response, time.Duration) {
			t.Helper()
			req, _ := http.NewRequest(http.MethodGet, url+"/", nil)
			if id != "" {
				req.Header.Set(HeaderRequestID, id)
			}
			if attempt != "" {
				req.Header.Set(HeaderAttempt, attempt)
			}
			t0 := time.Now()
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp, time.Since(t0)
		}

		resp, took := do("a", "1")
		if resp.StatusCode != 503 || resp.Header.Get(HeaderOutcome) != "down" || resp.Header.Get("Retry-After") != "2" || took != 10*ms {
			t.Errorf("during the outage: %d %q Retry-After %q after %v", resp.StatusCode, resp.Header.Get(HeaderOutcome), resp.Header.Get("Retry-After"), took)
		}
		time.Sleep(300*ms - time.Since(start)) // half-way through the slow phase
		resp, took = do("a", "2")
		if resp.StatusCode != 200 || resp.Header.Get(HeaderOutcome) != "accepted" || took != 110*ms {
			t.Errorf("slow phase: %d %q after %v; want 200 accepted after 110ms", resp.StatusCode, resp.Header.Get(HeaderOutcome), took)
		}
		do("", "")         // unidentified
		do("b", "zero")    // malformed attempt → 0
		do("b", "-3")      // negative attempt → 0
		do("b", "1048576") // fine: the largest attempt number from the wire

		if err := g.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		s := g.Recorder().Stats(0)
		if s.Total != 6 || s.Down != 1 || s.Accepted != 5 || s.Unidentified != 1 || s.Requests != 2 || s.MaxAttempts != 3 {
			t.Errorf("stats %+v", s)
		}
		arr := g.Recorder().Arrivals()
		if arr[0].At != 0 || arr[1].At != 300*ms || arr[1].ID != "a" || arr[1].Attempt != 2 {
			t.Errorf("arrivals %+v", arr[:2])
		}
		var atts []int
		for _, a := range arr[3:] {
			atts = append(atts, a.Attempt)
		}
		if len(atts) != 3 || atts[0] != 0 || atts[1] != 0 || atts[2] != 1048576 {
			t.Errorf("attempt numbers %v, want [0 0 1048576]", atts)
		}
		if err := g.Close(context.Background()); err != nil {
			t.Errorf("second Close: %v", err)
		}
	})
}

// TestGatewayClientGoneDuringLatency: an attempt whose sender hangs up while
// the gateway waits out its latency is still counted, and the handler ends.
func TestGatewayClientGoneDuringLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, _ := NewGateway(Faults{Latency: time.Hour}, time.Now())
		pn := newPipeNet()
		url := g.Serve(pn)
		tr := &http.Transport{DialContext: pn.Dial}
		ctx, cancel := context.WithTimeout(t.Context(), 50*ms)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if _, err := (&http.Client{Transport: tr}).Do(req); err == nil {
			t.Fatal("request outlived its context")
		}
		if err := g.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n := g.Recorder().Total(); n != 1 {
			t.Errorf("counted %d attempts, want 1", n)
		}
		if g.inFlight.Load() != 0 {
			t.Errorf("in flight after close: %d", g.inFlight.Load())
		}
	})
}

// TestGatewayCapacity: with 5 attempts in flight against a capacity of 2,
// exactly 2 are accepted and 3 refused at once.
func TestGatewayCapacity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		g, _ := NewGateway(Faults{Capacity: 2, Latency: 100 * ms}, start)
		pn := newPipeNet()
		url := g.Serve(pn)
		tr := &http.Transport{DialContext: pn.Dial, MaxIdleConnsPerHost: 5}
		defer tr.CloseIdleConnections()
		client := &http.Client{Transport: tr}
		var wg sync.WaitGroup
		var mu sync.Mutex
		took := map[int][]time.Duration{}
		for range 5 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := client.Get(url)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				mu.Lock()
				took[resp.StatusCode] = append(took[resp.StatusCode], time.Since(start))
				mu.Unlock()
			}()
		}
		wg.Wait()
		if len(took[200]) != 2 || len(took[503]) != 3 {
			t.Fatalf("statuses %v", took)
		}
		for _, d := range took[503] {
			if d != 0 {
				t.Errorf("busy answer after %v, want at once", d)
			}
		}
		for _, d := range took[200] {
			if d != 100*ms {
				t.Errorf("accepted answer after %v, want 100ms", d)
			}
		}
		g.Close(context.Background())
		if s := g.Recorder().Stats(0); s.Busy != 3 || s.Accepted != 2 {
			t.Errorf("stats %+v", s)
		}
	})
}

func TestGatewayServeTwicePanics(t *testing.T) {
	g, _ := NewGateway(Faults{}, time.Now())
	if _, err := g.Listen(); err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	defer func() {
		if recover() == nil {
			t.Error("second Serve did not panic")
		}
	}()
	g.Serve(newPipeNet())
}
