package proxytest

import (
	"io"
	"net/http"
	"net/http/httptest"
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

// Connect steers a proxy through the control API, as it would a running
// `stagger proxy --control`; the checks say what they saw.
func TestConnect(t *testing.T) {
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer svc.Close()
	ctl := faultproxy.NewControl(nil)
	defer ctl.Close()
	api := httptest.NewServer(ctl.Handler())
	defer api.Close()
	if _, err := ctl.StartProxy(faultproxy.Config{Name: "svc", Upstream: svc.URL, Window: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := Connect(api.URL, "nope"); err == nil || !strings.Contains(err.Error(), `404: no proxy called "nope"`) {
		t.Fatalf("unknown proxy: %v", err)
	}
	p, err := Connect(api.URL, "svc")
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
