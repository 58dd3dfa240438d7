package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
)

// ProxyStats is what the proxy page shows of one proxy: the fields of the
// control API's GET /stats it reads (docs/proxy.md).
type ProxyStats struct {
	Name               string   `json:"name"`
	Kind               string   `json:"kind"`
	Listen             string   `json:"listen"`
	Upstream           string   `json:"upstream"`
	Faults             []string `json:"faults"`
	UptimeMS           int64    `json:"uptime_ms"`
	Total              int      `json:"total"`
	Accepted           int      `json:"accepted"`
	Rejected           int      `json:"rejected"`
	Down               int      `json:"down"`
	Busy               int      `json:"busy"`
	Dropped            int      `json:"dropped"`
	Failed             int      `json:"failed"`
	Peak               int      `json:"peak"`
	InFlight           int64    `json:"in_flight"`
	Requests           *int     `json:"requests"`
	AttemptsPerRequest *float64 `json:"attempts_per_request"`
}

// Bounds of what the proxy page reads from the control API.
const (
	maxProxyBody = 1 << 20
	maxProxies   = 64
)

// Proxies reads every proxy's counts from the control API at
// Config.Proxy: GET /proxies, then GET /proxies/{name}/stats for each.
func (d *Dashboard) Proxies(ctx context.Context) ([]ProxyStats, error) {
	var list []struct {
		Name string `json:"name"`
	}
	if err := d.getJSON(ctx, "/proxies", &list); err != nil {
		return nil, err
	}
	if len(list) > maxProxies {
		list = list[:maxProxies]
	}
	out := make([]ProxyStats, 0, len(list))
	for _, p := range list {
		var s ProxyStats
		if err := d.getJSON(ctx, "/proxies/"+url.PathEscape(p.Name)+"/stats", &s); err != nil {
			return out, err
		}
		out = append(out, s)
	}
	return out, nil
}

// proxyHost is the control API's scheme and host, what errors name (never
// user information a URL may hold).
func (d *Dashboard) proxyHost() string {
	u, err := url.Parse(d.cfg.Proxy)
	if err != nil {
		return "the proxy"
	}
	return u.Scheme + "://" + u.Host
}

func (d *Dashboard) getJSON(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.cfg.Proxy+path, nil)
	if err != nil {
		return fmt.Errorf("proxy control API at %s: bad URL", d.proxyHost())
	}
	resp, err := d.proxy.Do(req)
	if err != nil {
		return fmt.Errorf("proxy control API at %s is unreachable", d.proxyHost())
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("proxy control API at %s answered GET %s with %s", d.proxyHost(), path, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxProxyBody+1))
	if err != nil {
		return fmt.Errorf("proxy control API at %s: reading GET %s: %v", d.proxyHost(), path, err)
	}
	if len(body) > maxProxyBody {
		return fmt.Errorf("proxy control API at %s: GET %s is larger than %d bytes", d.proxyHost(), path, maxProxyBody)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("proxy control API at %s: GET %s is not the JSON expected (is it a stagger proxy --control address?)", d.proxyHost(), path)
	}
	return nil
}

func (d *Dashboard) proxyPage(w http.ResponseWriter, r *http.Request) {
	p := d.newPage(w, r, "proxy", "proxy")
	p.Scripts = []string{"live.js"}
	ctx, cancel := context.WithTimeout(r.Context(), opTimeout)
	defer cancel()
	ps, err := d.Proxies(ctx)
	if err != nil {
		p.Err = err.Error()
	}
	p.Data = struct {
		Host    string
		Proxies []ProxyStats
	}{d.proxyHost(), ps}
	d.render(w, http.StatusOK, "proxy", p)
}

func (d *Dashboard) proxyJSON(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), opTimeout)
	defer cancel()
	ps, err := d.Proxies(ctx)
	out := struct {
		Proxies []ProxyStats `json:"proxies"`
		Error   string       `json:"error,omitempty"`
	}{ps, ""}
	if out.Proxies == nil {
		out.Proxies = []ProxyStats{}
	}
	if err != nil {
		out.Error = err.Error()
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(out)
}
