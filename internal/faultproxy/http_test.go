package faultproxy

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/staggerhq/stagger/internal/labkit"
)

// upstreamBody is what the test upstream answers: 4,000 bytes, with a
// Content-Length.
var upstreamBody = strings.Repeat("0123456789", 400)

func startHTTP(t *testing.T) (*HTTPProxy, string) {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, upstreamBody)
	}))
	t.Cleanup(up.Close)
	p, err := StartHTTP(Config{Name: "api", Upstream: up.URL, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p, "http://" + p.Addr()
}

func addFault(t *testing.T, s *Set, clause string) string {
	t.Helper()
	f, err := s.Parse(clause)
	if err != nil {
		t.Fatal(err)
	}
	name, err := s.Add(f)
	if err != nil {
		t.Fatal(err)
	}
	return name
}

// client has no retries and no keep-alive: each request is one attempt on
// its own connection.
var client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}

func get(t *testing.T, method, url string, h http.Header) (*http.Response, string, error) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

func TestHTTPStatusFault(t *testing.T) {
	p, url := startHTTP(t)
	addFault(t, p.Faults(), `status 429 retry-after=2s body="slow down" name=limit`)
	resp, body, err := get(t, "GET", url+"/x", nil)
	if err != nil || resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "2" || body != "slow down" || resp.Header.Get(HeaderFault) != "limit" {
		t.Fatalf("got %v %v %q %q", err, resp, body, resp.Header)
	}
	p.Faults().Clear()
	addFault(t, p.Faults(), "status 503 retry-after=date:30s")
	before := time.Now()
	resp, _, err = get(t, "GET", url+"/x", nil)
	if err != nil || resp.StatusCode != 503 {
		t.Fatal(err, resp)
	}
	at, err := http.ParseTime(resp.Header.Get("Retry-After"))
	if err != nil || at.Before(before.Add(29*time.Second)) || at.After(time.Now().Add(31*time.Second)) {
		t.Fatalf("Retry-After %q (%v): want an HTTP date 30s ahead", resp.Header.Get("Retry-After"), err)
	}
	for _, code := range []int{500, 502, 504} {
		p.Faults().Clear()
		addFault(t, p.Faults(), fmt.Sprintf("status %d", code))
		if resp, _, err := get(t, "GET", url, nil); err != nil || resp.StatusCode != code {
			t.Fatalf("status %d: got %v %v", code, resp, err)
		}
	}
	p.Faults().Clear()
	if resp, body, err := get(t, "GET", url, nil); err != nil || resp.StatusCode != 200 || body != upstreamBody {
		t.Fatalf("without faults: %v %v", resp, err)
	}
	s := p.Stats(false)
	if s.Total != 6 || s.Down != 5 || s.Accepted != 1 {
		t.Errorf("counted total %d down %d accepted %d, want 6, 5, 1", s.Total, s.Down, s.Accepted)
	}
}

func TestHTTPMatch(t *testing.T) {
	p, url := startHTTP(t)
	addFault(t, p.Faults(), "status 503 method=POST path=/pay header=X-Canary:1 name=canary")
	canary := http.Header{"X-Canary": {"1"}}
	for _, c := range []struct {
		method, path string
		h            http.Header
		want         int
	}{
		{"POST", "/pay/42", canary, 503},
		{"GET", "/pay/42", canary, 200},
		{"POST", "/other", canary, 200},
		{"POST", "/pay/42", nil, 200},
		{"POST", "/pay/42", http.Header{"X-Canary": {"2"}}, 200},
	} {
		resp, _, err := get(t, c.method, url+c.path, c.h)
		if err != nil || resp.StatusCode != c.want {
			t.Errorf("%s %s %v: %v %v, want %d", c.method, c.path, c.h, resp, err, c.want)
		}
	}
	if got, _ := p.Faults().Get("canary"); got.Matched != 1 || got.Applied != 1 {
		t.Errorf("the fault matched %d, applied %d; want 1, 1", got.Matched, got.Applied)
	}
}

func TestHTTPDelay(t *testing.T) {
	p, url := startHTTP(t)
	addFault(t, p.Faults(), "delay 200ms jitter=50ms")
	for range 3 {
		start := time.Now()
		resp, body, err := get(t, "GET", url, nil)
		if took := time.Since(start); err != nil || resp.StatusCode != 200 || body != upstreamBody || took < 150*time.Millisecond {
			t.Fatalf("%v %v after %v; want 200 after at least 150ms", resp, err, took)
		}
	}
}

func TestHTTPCut(t *testing.T) {
	p, url := startHTTP(t)
	addFault(t, p.Faults(), "cut 100")
	_, body, err := get(t, "GET", url, nil)
	if !errors.Is(err, io.ErrUnexpectedEOF) || body != upstreamBody[:100] {
		t.Fatalf("read %d bytes, %v; want the first 100 and an unexpected EOF", len(body), err)
	}
	waitFor(t, func() bool { return p.Stats(false).Dropped == 1 }, "the cut attempt counted as dropped")
}

func TestHTTPReset(t *testing.T) {
	p, url := startHTTP(t)
	addFault(t, p.Faults(), "reset")
	_, _, err := get(t, "GET", url, nil)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("got %v; want a connection reset", err)
	}
	if s := p.Stats(false); s.Dropped != 1 || s.Total != 1 {
		t.Errorf("counted %+v; want 1 dropped", s)
	}
}

// TestHTTPProbability sends 20,000 attempts through faults of p = 0.3 and
// p = 0.05 (a path) in process: each applies within 5 standard deviations of
// its binomial mean, and the proxy's counts agree with what clients saw.
func TestHTTPProbability(t *testing.T) {
	p := mustHTTP(t, Config{Name: "p", Upstream: "http://127.0.0.1:1", Window: time.Hour})
	p.next = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) })
	addFault(t, p.Faults(), "status 503 p=0.3 name=p30")
	addFault(t, p.Faults(), "status 500 p=0.05 path=/b name=p5")
	const n = 20_000
	codes := map[int]int{}
	for i := range n {
		path := "/a"
		if i%2 == 1 {
			path = "/b"
		}
		w := httptest.NewRecorder()
		p.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		codes[w.Code]++
	}
	within := func(name string, got, trials int, prob float64) {
		mean, sd := float64(trials)*prob, math.Sqrt(float64(trials)*prob*(1-prob))
		if math.Abs(float64(got)-mean) > 5*sd {
			t.Errorf("%s: applied %d of %d, want %.0f ± %.0f (5 sd of Binomial(%d, %v))", name, got, trials, mean, 5*sd, trials, prob)
		}
	}
	p30, _ := p.Faults().Get("p30")
	p5, _ := p.Faults().Get("p5")
	within("p=0.3", int(p30.Applied), n, 0.3)
	// p5 sees the /b attempts p30 did not answer.
	within("p=0.05", int(p5.Applied), int(p5.Matched), 0.05)
	if p30.Matched != n || codes[503] != int(p30.Applied) || codes[500] != int(p5.Applied) || codes[200] != n-codes[503]-codes[500] {
		t.Errorf("counts disagree: p30 %+v, p5 %+v, answers %v", p30, p5, codes)
	}
	if s := p.Stats(false); s.Total != n || s.Down != codes[503]+codes[500] || s.Accepted != codes[200] {
		t.Errorf("the proxy counted total %d down %d accepted %d; answers %v", s.Total, s.Down, s.Accepted, codes)
	}
}

// TestChangeUnderTraffic replaces, removes and adds a fault while eight
// clients send attempts: every attempt is counted once, and the fault's
// count (kept across changes of its name) equals the 503s clients saw.
func TestChangeUnderTraffic(t *testing.T) {
	p, url, ctl, cl := startControlled(t)
	const clients, each = 8, 150
	var mu sync.Mutex
	codes := map[int]int{}
	stop := make(chan struct{})
	changes := 0
	changer := make(chan struct{})
	go func() {
		defer close(changer)
		clauses := []string{"status 503 p=0.5", "status 503", "status 503 p=0.1"}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			var req *http.Request
			switch i % 4 {
			case 3:
				req, _ = http.NewRequest("DELETE", ctl.URL+"/faults/flip", nil)
			default:
				req, _ = http.NewRequest("PUT", ctl.URL+"/faults/flip", strings.NewReader(clauses[i%4]))
			}
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				resp.Body.Close()
				mu.Lock()
				changes++
				mu.Unlock()
			}
		}
	}()
	traffic(t, cl, url+"/x", clients, each, func(resp *http.Response) {
		mu.Lock()
		codes[resp.StatusCode]++
		mu.Unlock()
	})
	close(stop)
	<-changer
	s := p.Stats(false)
	f := p.Faults()
	var applied int64
	if got, err := f.Get("flip"); err == nil {
		applied = got.Applied
	} else {
		f.mu.Lock()
		applied = f.kept["flip"].applied.Load()
		f.mu.Unlock()
	}
	t.Logf("%d changes during %d attempts; answers %v", changes, clients*each, codes)
	if s.Total != clients*each || s.Down != codes[503] || s.Accepted != codes[200] || int(applied) != codes[503] || changes < 10 {
		t.Errorf("counted total %d, down %d, accepted %d, fault applied %d; clients saw %v", s.Total, s.Down, s.Accepted, applied, codes)
	}
}

// startControlled starts an HTTP proxy with a control API in front of it
// and a keep-alive client for the proxy.
func startControlled(t *testing.T) (p *HTTPProxy, url string, ctl *httptest.Server, cl *http.Client) {
	t.Helper()
	p, url = startHTTP(t)
	c := NewControl(nil)
	c.Add(p)
	ctl = httptest.NewServer(c.Handler())
	t.Cleanup(ctl.Close)
	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	t.Cleanup(tr.CloseIdleConnections)
	return p, url, ctl, &http.Client{Transport: tr}
}

// traffic sends each GETs of url from each of clients goroutines and
// hands every answer to see; it returns when all are answered.
func traffic(t *testing.T, cl *http.Client, url string, clients, each int, see func(*http.Response)) {
	t.Helper()
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				resp, err := cl.Get(url)
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				see(resp)
			}
		}()
	}
	wg.Wait()
}

func mustHTTP(tb testing.TB, cfg Config) *HTTPProxy {
	tb.Helper()
	p, err := NewHTTP(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

func waitFor(t *testing.T, ok func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: not %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var _ = labkit.Down

func TestIDCountsBounded(t *testing.T) {
	c := NewIDCounts()
	for i := range MaxTrackedIDs + 10 {
		c.Add(fmt.Sprint("id-", i))
	}
	c.Add("id-0")
	if n, ok := c.Get("id-0"); n != 2 || !ok {
		t.Errorf("id-0: %d %v, want 2 attempts", n, ok)
	}
	if _, ok := c.Get(fmt.Sprint("id-", MaxTrackedIDs)); ok {
		t.Errorf("an ID past the bound of %d was tracked", MaxTrackedIDs)
	}
	kept := 0
	for i := range c.shards {
		kept += len(c.shards[i].n)
	}
	if kept != MaxTrackedIDs || c.tracked.Load() != MaxTrackedIDs {
		t.Errorf("tracked %d IDs (counter %d)", kept, c.tracked.Load())
	}
}
