package faultproxy

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func call(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestControlRoutes(t *testing.T) {
	p, _ := startHTTP(t)
	c := NewControl(nil)
	defer c.Close()
	if err := c.Add(p); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c.Handler())
	defer srv.Close()
	u := srv.URL
	steps := []apiStep{
		{"GET", "/faults", "", 200, "[]"},
		{"POST", "/faults", `{"name":"flaky","clause":"status 503 p=0.5"}`, 201, `"clause": "status 503 p=0.5 name=flaky"`},
		{"POST", "/faults", "delay 10ms jitter=1ms", 201, `"name": "delay"`},
		{"POST", "/faults", "delay 20ms", 201, `"name": "delay-2"`},
		{"GET", "/faults/flaky", "", 200, `"applied": 0`},
		{"PUT", "/faults/flaky", "status 429 retry-after=1s", 200, `"clause": "status 429 retry-after=1s name=flaky"`},
		{"PUT", "/faults/new", "reset p=0.1", 201, `"name": "new"`},
		{"POST", "/faults", `{"name":"flaky","clause":"reset"}`, 409, "exists"},
		{"DELETE", "/faults/new", "", 204, ""},
		{"DELETE", "/faults/new", "", 404, `no such fault: \"new\"`},
		{"GET", "/faults/nope", "", 404, "no such fault"},
		{"GET", "/proxies/nope", "", 404, `no proxy called \"nope\"`},
		{"GET", "/faults?proxy=nope", "", 404, "no proxy called"},
		{"GET", "/proxies/nope/stats", "", 404, "no proxy called"},
		{"DELETE", "/proxies/nope", "", 404, "no proxy called"},
		{"POST", "/faults", `{"clause": 5}`, 400, `field \"clause\": want a string, got a JSON number`},
		{"POST", "/faults", `{"clause": "reset", "extra": 1}`, 400, `unknown field \"extra\"`},
		{"POST", "/faults", `{"clause": "reset"`, 400, "malformed JSON"},
		{"POST", "/faults", `{"clause": "reset"} {}`, 400, "one JSON object"},
		{"POST", "/faults", ``, 400, "clause: required"},
		{"POST", "/faults", `status 200`, 400, "400 to 599"},
		{"POST", "/faults", `latency 1s`, 400, "not a fault of an HTTP proxy"},
		{"POST", "/faults", `{"name":"a/b","clause":"reset"}`, 400, "name"},
		{"PUT", "/faults/x", `reset name=y`, 400, "another fault"},
		{"POST", "/faults", strings.Repeat("x", MaxControlBody+1), 413, "over the limit of 131072 bytes"},
		{"GET", "/nowhere", "", 404, "no route"},
		{"PATCH", "/faults", "", 405, "want GET, POST"},
		{"GET", "/stats", "", 200, `"name": "api"`},
		{"POST", "/stats/reset", "", 204, ""},
		{"POST", "/proxies", `{"name":"redis","listen":"127.0.0.1:0","upstream":"127.0.0.1:1","kind":"tcp"}`, 201, `"kind": "tcp"`},
		{"POST", "/proxies", `{"name":"redis","listen":"127.0.0.1:0","upstream":"127.0.0.1:1","kind":"tcp"}`, 409, "exists"},
		{"POST", "/proxies", `{"name":"x","upstream":"127.0.0.1:1","kind":"udp"}`, 400, `kind \"udp\"`},
		{"POST", "/proxies", `{"name":"x","upstream":"ftp://a"}`, 400, "upstream"},
		{"POST", "/proxies", `{"name":"x","listen":"nope","upstream":"http://127.0.0.1:1"}`, 400, "listen"},
		{"POST", "/proxies/redis/faults", "latency 5ms", 201, `"name": "latency"`},
		{"POST", "/proxies/redis/faults", "status 503", 400, "not a fault of a TCP proxy"},
		{"GET", "/proxies", "", 200, `"name": "redis"`},
		{"GET", "/proxies/redis/stats", "", 200, `"kind": "tcp"`},
		{"DELETE", "/proxies/redis", "", 204, ""},
		{"GET", "/proxies/redis", "", 404, "no proxy"},
	}
	checkSteps(t, u, steps)
}

// apiStep is a call to the control API and what it must answer: the code
// and a piece of the body.
type apiStep struct {
	method, path, body string
	code               int
	has                string
}

// checkSteps makes each call in turn; every error answer must be
// {"error": "..."}.
func checkSteps(t *testing.T, base string, steps []apiStep) {
	t.Helper()
	for _, s := range steps {
		code, body := call(t, s.method, base+s.path, s.body)
		if code != s.code || !strings.Contains(body, s.has) {
			t.Errorf("%s %s %.40q: %d %s; want %d with %q", s.method, s.path, s.body, code, body, s.code, s.has)
		}
		if code >= 400 {
			var e struct{ Error string }
			if json.Unmarshal([]byte(body), &e) != nil || e.Error == "" {
				t.Errorf("%s %s: error body %q is not {\"error\": ...}", s.method, s.path, body)
			}
		}
	}
}

func TestControlNoProxy(t *testing.T) {
	srv := httptest.NewServer(NewControl(nil).Handler())
	defer srv.Close()
	if code, body := call(t, "GET", srv.URL+"/stats", ""); code != 404 || !strings.Contains(body, "POST /proxies") {
		t.Errorf("%d %s", code, body)
	}
}

// FuzzControl sends any body to the routes that read one: the answer is
// never a 5xx and always JSON.
func FuzzControl(f *testing.F) {
	for _, s := range []string{`{"clause":"status 503"}`, "delay 1s", `{"name":"a","listen":"127.0.0.1:0","upstream":"http://127.0.0.1:1"}`, `{"clause":`, "\x00"} {
		f.Add(s)
	}
	p := mustHTTP(f, Config{Name: "api", Upstream: "http://127.0.0.1:1"})
	c := NewControl(func(Config) (Proxy, error) { return nil, errorf("no proxies in this test") })
	c.Add(p)
	h := c.Handler()
	f.Fuzz(func(t *testing.T, body string) {
		for _, route := range []string{"POST /faults", "PUT /faults/x", "POST /proxies", "POST /schedule", "PUT /schedule/x"} {
			method, path, _ := strings.Cut(route, " ")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(method, path, strings.NewReader(body)))
			if w.Code >= 500 || !json.Valid(w.Body.Bytes()) {
				t.Fatalf("%s %q: %d %s", route, body, w.Code, w.Body)
			}
		}
		p.Faults().Clear()
		for _, c := range p.Schedule().List() {
			p.Schedule().Remove(c.Name)
		}
	})
}
