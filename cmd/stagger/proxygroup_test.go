package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/staggerhq/stagger/internal/labkit"
	"github.com/staggerhq/stagger/internal/report"
	"github.com/staggerhq/stagger/internal/report/browser"
	"github.com/staggerhq/stagger/retryhttp"
)

func TestParseGrouping(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"idempotency-key", "header Idempotency-Key"},
		{"header:x-request-id", "header X-Request-Id"},
		{"method+path+client", "method+path+client"},
	} {
		g, err := parseGrouping(c.in)
		if err != nil || g.String() != c.want {
			t.Errorf("parseGrouping(%q) = %v, %v; want %s", c.in, g, err, c.want)
		}
	}
	for _, in := range []string{"", "header:", "header:a b", "header:a:b", "path", "Idempotency-Key"} {
		if _, err := parseGrouping(in); err == nil || !strings.Contains(err.Error(), "--group-by") {
			t.Errorf("parseGrouping(%q): error %v, want one naming --group-by", in, err)
		}
	}
	var out, errb strings.Builder
	if cfg, code := parseProxy([]string{"--upstream", "http://x", "--group-by", "idempotency-key", "--id-header", "X-Id"}, &out, &errb); cfg != nil || code != exitUsage ||
		!strings.Contains(errb.String(), "give one") {
		t.Errorf("--group-by with --id-header: exit %d, %q", code, errb.String())
	}
}

// rawStats returns /_stagger/stats as decoded JSON values.
func rawStats(t *testing.T, base string) map[string]any {
	t.Helper()
	resp, err := http.Get(base + statsPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

// retryable is a go-retryablehttp client that retries a 503 three times.
func retryable() *retryablehttp.Client {
	c := retryablehttp.NewClient()
	c.RetryMax = 3
	c.RetryWaitMin, c.RetryWaitMax = time.Millisecond, 5*time.Millisecond
	c.Logger = nil
	return c
}

// A client that sends no stagger header: without a key the per-request
// numbers are n/a — null in the stats, "n/a" in the summary and the report —
// never zeros that read as measurements.
func TestProxyWithoutKeyIsNotAvailable(t *testing.T) {
	up := newUpstream(t, nil)
	p, base := startProxy(t, up, "down 1h at 0s")
	req, _ := retryablehttp.NewRequest("GET", base+"/orders", nil)
	retryable().Do(req)
	m := rawStats(t, base)
	for _, k := range []string{"requests", "requests_accepted", "max_attempts", "attempts_per_request", "by_attempt"} {
		if v, ok := m[k]; !ok || v != nil {
			t.Errorf("%s = %v (present %v), want null", k, v, ok)
		}
	}
	if m["total"] != 4.0 || m["unidentified"] != 4.0 || m["unnumbered"] != 4.0 || m["group_by"] != "header Stagger-Request-Id" {
		t.Errorf("stats %v", m)
	}
	s := p.Recorder().Stats(true)
	if line := p.summaryLine(s); !strings.Contains(line, "requests n/a (no attempt carried header Stagger-Request-Id)") {
		t.Errorf("summary line %q", line)
	}
	page := p.reportPage("", s)
	sum := page.Sections[0].Table
	if got := strings.Join(sum.Rows[0][8:], " "); got != "n/a n/a 4 n/a n/a" {
		t.Errorf("summary row %v", sum.Rows[0])
	}
	if page.Sections[1].Table != nil || !strings.Contains(strings.Join(page.Sections[1].Notes, " "), "n/a: none of the 4 attempts carried Stagger-Attempt") {
		t.Errorf("attempt section %+v", page.Sections[1])
	}
	if err := report.Write(&strings.Builder{}, page); err != nil {
		t.Errorf("the report does not render: %v", err)
	}
}

// Each grouping, driven by go-retryablehttp (RetryMax 3: 4 attempts per
// request against an upstream that is down).
func TestProxyGroupBy(t *testing.T) {
	for _, c := range []struct {
		name  string
		flags []string
		set   func(r *retryablehttp.Request, i int)
		// want: logical requests counted, most attempts by one
		requests, most int
	}{
		{"idempotency-key", []string{"--group-by", "idempotency-key"},
			func(r *retryablehttp.Request, i int) {
				r.Header.Set(retryhttp.IdempotencyKeyHeader, fmt.Sprintf("k%d", i))
			}, 3, 4},
		{"header", []string{"--group-by", "header:x-correlation-id"},
			func(r *retryablehttp.Request, i int) { r.Header.Set("X-Correlation-Id", fmt.Sprintf("c%d", i%2)) }, 2, 8},
		{"id-header", []string{"--id-header", "X-Op"},
			func(r *retryablehttp.Request, i int) { r.Header.Set("X-Op", "same") }, 1, 12},
		// Three requests to three paths from one client: three requests.
		{"method+path+client", []string{"--group-by", "method+path+client"},
			func(r *retryablehttp.Request, i int) { r.URL.Path = fmt.Sprintf("/orders/%d", i) }, 3, 4},
		// The same path three times is one request by this key: it is for a
		// client that sends each request once.
		{"method+path+client, one path", []string{"--group-by", "method+path+client"},
			func(*retryablehttp.Request, int) {}, 1, 12},
	} {
		t.Run(c.name, func(t *testing.T) {
			up := newUpstream(t, nil)
			_, base := startProxyFlags(t, up, append(c.flags, "--fault", "down 1h at 0s")...)
			for i := range 3 {
				req, _ := retryablehttp.NewRequest("POST", base+"/orders", strings.NewReader("{}"))
				c.set(req, i)
				retryable().Do(req)
			}
			s := getStats(t, base)
			if s.Total != 12 || deref(s.Requests) != c.requests || deref(s.MaxAttempts) != c.most || s.Unidentified != 0 {
				t.Errorf("%d attempts, %d requests, at most %d by one, %d ungrouped; want 12, %d, %d, 0",
					s.Total, deref(s.Requests), deref(s.MaxAttempts), s.Unidentified, c.requests, c.most)
			}
		})
	}
}

// method+path+client keys a long request target by its hash, so it is
// still grouped, and tells clients apart by IP, not by port.
func TestGroupingKey(t *testing.T) {
	g := grouping{}
	r := httptest.NewRequest("GET", "/a?"+strings.Repeat("q", 400), nil)
	r.RemoteAddr = "10.1.2.3:5555"
	k := g.proxy().Key(r)
	r2 := httptest.NewRequest("GET", r.RequestURI, nil)
	r2.RemoteAddr = "10.1.2.3:6666"
	if len(k) > 256 || k == "" || g.proxy().Key(r2) != k {
		t.Errorf("long target: key %q (%d bytes), another port gives %q", k, len(k), g.proxy().Key(r2))
	}
	r2.RemoteAddr = "10.1.2.4:5555"
	if g.proxy().Key(r2) == k {
		t.Error("two clients share a key")
	}
}

// curl sends no header of its own: by method+path+client its retries are
// one request.
func TestCurlGroupedByMethodPathClient(t *testing.T) {
	if testing.Short() {
		t.Skip("curl waits a whole second between retries")
	}
	curl := requireCurl(t)
	up := newUpstream(t, nil)
	_, base := startProxyFlags(t, up, "--group-by", "method+path+client", "--fault", "down 1h at 0s")
	body := filepath.Join(t.TempDir(), "body")
	exec.Command(curl, "-s", "-o", body, "--retry", "1", "--retry-delay", "1", "--max-time", "20", base+"/x").Run()
	if s := getStats(t, base); s.Total != 2 || deref(s.Requests) != 1 || deref(s.MaxAttempts) != 2 || deref(s.AttemptsPerRequest) != 2 {
		t.Errorf("stats %+v: want 2 attempts of 1 request", s)
	}
}

// TestProxyReportInBrowser: the proxy's report, as Chromium builds it, has
// one full-width chart with a series per kind of outcome that occurred,
// each in its own colour, the faults shaded and the peak marked.
func TestProxyReportInBrowser(t *testing.T) {
	chromium := browser.Require(t)
	up := newUpstream(t, nil)
	p, _ := startProxy(t, up, "down 1s at 1s; drop 1s at 3s")
	ms := time.Millisecond
	for i := range 200 {
		at := time.Duration(i*25) * ms
		o := labkit.Accepted
		switch {
		case at >= time.Second && at < 2*time.Second:
			o = labkit.Down
		case at >= 3*time.Second && at < 4*time.Second:
			o = labkit.Dropped
		case i%9 == 0:
			o = labkit.Busy
		case i%13 == 0:
			o = labkit.Abandoned
		}
		p.Recorder().Record(p.StartTime().Add(at), fmt.Sprint("r", i/2), 0, o)
	}
	path := filepath.Join(t.TempDir(), "proxy.html")
	if err := report.WriteFile(path, p.reportPage("browser test", p.Recorder().Stats(true))); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dom, err := browser.DumpDOM(ctx, chromium, path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(dom, `<figure class="figure wide">`) || !strings.Contains(dom, `<svg class="chart wide"`) {
		t.Error("the chart is not full width")
	}
	fills := map[string]string{}
	for _, m := range regexp.MustCompile(`<g class="series" data-name="([^"]*)" data-points="\d+" fill="(#[0-9A-Fa-f]{6})"`).FindAllStringSubmatch(dom, -1) {
		fills[m[1]] = m[2]
	}
	want := []string{"accepted", "down", "busy", "dropped", "abandoned"}
	seen := map[string]string{}
	for _, name := range want {
		c, ok := fills[name]
		if !ok {
			t.Errorf("no %s series (series %v)", name, fills)
			continue
		}
		if o, dup := seen[c]; dup {
			t.Errorf("%s and %s share colour %s", name, o, c)
		}
		seen[c] = name
	}
	if _, ok := fills["failed"]; ok || len(fills) != len(want) {
		t.Errorf("series %v: want exactly the outcomes that occurred", fills)
	}
	for _, hook := range []string{`class="shade" data-label="down"`, `class="shade" data-label="dropping connections"`, `<g class="mark" data-label="peak `} {
		if !strings.Contains(dom, hook) {
			t.Errorf("the page lacks %s", hook)
		}
	}
}
