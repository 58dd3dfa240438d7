package proxytest

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/staggerhq/stagger/internal/faultproxy"
)

func send(t *testing.T, url, id string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if id != "" {
		req.Header.Set("Stagger-Request-Id", id)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// controlled starts a service and a control API with a proxy called svc
// in front of it; it returns the service's and the API's URLs.
func controlled(t *testing.T) (svcURL, apiURL string) {
	t.Helper()
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(svc.Close)
	ctl := faultproxy.NewControl(nil)
	t.Cleanup(ctl.Close)
	api := httptest.NewServer(ctl.Handler())
	t.Cleanup(api.Close)
	if _, err := ctl.StartProxy(faultproxy.Config{Name: "svc", Upstream: svc.URL, Window: time.Hour}); err != nil {
		t.Fatal(err)
	}
	return svc.URL, api.URL
}

// Connect steers a proxy through the control API, as it would a running
// `stagger proxy --control`; the checks say what they saw.
func TestConnect(t *testing.T) {
	_, apiURL := controlled(t)
	if _, err := Connect(apiURL, "nope"); err == nil || !strings.Contains(err.Error(), `404: no proxy called "nope"`) {
		t.Fatalf("unknown proxy: %v", err)
	}
	p, err := Connect(apiURL, "svc")
	if err != nil {
		t.Fatal(err)
	}
	s, _ := p.Stats()
	base := "http://" + s.Listen
	name, err := p.AddFault("status 429 name=limit")
	if err != nil || name != "limit" {
		t.Fatal(name, err)
	}
	if _, err := p.AddFault("status 200"); err == nil || !strings.Contains(err.Error(), "400: clause: status: code") {
		t.Errorf("bad clause: %v", err)
	}
	for range 3 {
		if code := send(t, base+"/", "a"); code != 429 {
			t.Fatalf("with the fault: %d", code)
		}
	}
	if f, err := p.Fault("limit"); err != nil || f.Applied != 3 {
		t.Errorf("fault: %+v %v", f, err)
	}
	if err := p.SetFault("limit", "status 503 p=0"); err != nil {
		t.Fatal(err)
	}
	if code := send(t, base+"/", "b"); code != 200 {
		t.Errorf("p=0: %d", code)
	}
	if err := p.CheckAttempts("a", 3); err != nil {
		t.Error(err)
	}
	if n, err := p.Attempts("never"); n != 0 || err != nil {
		t.Errorf("an ID never seen: %d %v", n, err)
	}
	if err := p.CheckAmplification(1.5); err == nil || !strings.Contains(err.Error(), "2 attempts per request, over 1.5: 4 attempts for 2 requests, the most 3 by one") {
		t.Errorf("amplification: %v", err)
	}
	if err := p.CheckPeak(3); err == nil || !strings.Contains(err.Error(), "peak of 4 attempts in one 3600000ms window") {
		t.Errorf("peak: %v", err)
	}
	if err := p.RemoveFault("limit"); err != nil {
		t.Fatal(err)
	}
	if err := p.RemoveFault("limit"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("removed twice: %v", err)
	}
	if err := p.Reset(); err != nil {
		t.Fatal(err)
	}
	if s, _ := p.Stats(); s.Total != 0 {
		t.Errorf("after Reset: %d attempts", s.Total)
	}
}

func TestStartRefusesBadUpstream(t *testing.T) {
	if _, err := New("ftp://x"); err == nil || !strings.Contains(err.Error(), "upstream") {
		t.Errorf("got %v", err)
	}
	if _, err := New("tcp://nohost"); err == nil || !strings.Contains(err.Error(), "host:port") {
		t.Errorf("got %v", err)
	}
}

// A TCP proxy in process, in front of a real Redis: a latency fault holds
// the answer, and the connections are counted.
func TestStartTCP(t *testing.T) {
	addr := os.Getenv("STAGGER_REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	if c, err := net.DialTimeout("tcp", addr, 2*time.Second); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skipf("Redis at %s is unreachable (set STAGGER_REDIS_ADDR): %v", addr, err)
	} else {
		c.Close()
	}
	p := Start(t, "tcp://"+addr, WithWindow(time.Hour))
	if _, err := p.AddFault("latency 80ms dir=up"); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.URL)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	io.WriteString(c, "PING\r\n")
	b := make([]byte, 7)
	if _, err := io.ReadFull(c, b); err != nil || string(b) != "+PONG\r\n" || time.Since(start) < 80*time.Millisecond {
		t.Fatalf("%q %v after %v", b, err, time.Since(start))
	}
	c.Close()
	if err := p.CheckPeak(0); err == nil || !strings.Contains(err.Error(), "peak of 1 attempts") {
		t.Errorf("CheckPeak: %v", err)
	}
}

// The fault schedule changes at run time, in process and through the
// control API alike.
func TestSchedule(t *testing.T) {
	svcURL, apiURL := controlled(t)
	remote, err := Connect(apiURL, "svc")
	if err != nil {
		t.Fatal(err)
	}
	s, _ := remote.Stats()
	for _, c := range []struct {
		name string
		p    *Proxy
		url  string
	}{{"in process", Start(t, svcURL), ""}, {"connected", remote, "http://" + s.Listen}} {
		p, base := c.p, c.url
		if base == "" {
			base = p.URL
		}
		name, err := p.AddSchedule("", "down 1h at 0s")
		if err != nil || name != "down" {
			t.Fatalf("%s: AddSchedule: %q %v", c.name, name, err)
		}
		if code := send(t, base+"/", "a"); code != 503 {
			t.Errorf("%s: down: %d", c.name, code)
		}
		if err := p.SetSchedule("down", "down 1h at 2h"); err != nil {
			t.Fatal(err)
		}
		if code := send(t, base+"/", "a"); code != 200 {
			t.Errorf("%s: the outage moved on: %d", c.name, code)
		}
		if _, err := p.AddSchedule("", "cap 0"); err == nil || !strings.Contains(err.Error(), "cap") {
			t.Errorf("%s: cap 0: %v", c.name, err)
		}
		if got, err := p.Schedule(); err != nil || len(got) != 1 || got[0].Clause != "down 1h at 2h" {
			t.Errorf("%s: Schedule: %v %v", c.name, got, err)
		}
		if err := p.RemoveSchedule("down"); err != nil {
			t.Error(err)
		}
		if err := p.RemoveSchedule("down"); err == nil || !strings.Contains(err.Error(), "no such schedule clause") {
			t.Errorf("%s: removed twice: %v", c.name, err)
		}
		if err := p.CheckAttempts("a", 2); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	tcp := Start(t, "tcp://127.0.0.1:1")
	if _, err := tcp.AddSchedule("", "down 1s at 0s"); err == nil || !strings.Contains(err.Error(), "no fault schedule") {
		t.Errorf("TCP: %v", err)
	}
}
