package simkit

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
)

// hedgeRows runs c and returns its rows by strategy and load.
func hedgeRows(t *testing.T, c HedgeConfig) map[string]map[float64][]any {
	t.Helper()
	res, err := c.Run(context.Background(), Options{Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]map[float64][]any{}
	for _, r := range res.Table.Rows {
		s, load := r[0].(string), r[1].(float64)
		if rows[s] == nil {
			rows[s] = map[float64][]any{}
		}
		rows[s][load] = r
	}
	return rows
}

// Columns of the hedge table.
const (
	hcRequests    = 2
	hcHedged      = 3
	hcAttempts    = 5
	hcUtilization = 6
	hcP99         = 8
)

func cell(r []any, i int) float64 { return r[i].(float64) }

// TestHedgeTail checks the scenario against what hedging must do: at low
// load the share hedged is the share of attempts slower than the delay,
// e^(−Delay/Service)·(1−Tail) + Tail, and the p99 falls below half of
// the unhedged one; the receiver's load is at most (1 + hedge rate) × the
// unhedged load; past saturation a fixed delay without a budget more than
// raises its own load and the p99, while the budget keeps
// hedges under one request in ten.
func TestHedgeTail(t *testing.T) {
	c := DefaultHedge()
	c.Loads = []float64{0.2, 0.5, 0.95}
	c.Warmup, c.Duration = 2e9, 30e9
	rows := hedgeRows(t, c)
	none := rows["none"]
	mean := c.Service.Seconds() + c.Tail*c.Hiccup.Seconds()
	span := float64(c.Workers) * (c.Duration - c.Warmup).Seconds()
	want := math.Exp(-float64(c.Delay)/float64(c.Service))*(1-c.Tail) + c.Tail
	if got := cell(rows["hedge"][0.2], hcHedged); math.Abs(got-want) > 0.01 {
		t.Errorf("hedged at load 0.2: %.4f, want e^(−delay/service)·(1−tail)+tail = %.4f", got, want)
	}
	for _, s := range []string{"hedge", "hedge+budget", "hedge-q"} {
		for _, load := range []float64{0.2, 0.5} {
			r := rows[s][load]
			if p, base := cell(r, hcP99), cell(none[load], hcP99); p > base/2 {
				t.Errorf("%s at %g: p99 %.1f ms, want < half of %.1f ms unhedged", s, load, p, base)
			}
			// Cancellations reach only the queue: a hedge costs at most a
			// whole attempt of worker time, so the receiver is busy at most
			// (1 + hedged) × what the requests alone need.
			base := float64(r[hcRequests].(int64)) * mean / span
			if u := cell(r, hcUtilization); u > cell(r, hcAttempts)*base*1.03 || u < base*0.97 {
				t.Errorf("%s at %g: receiver busy %.3f, want in [%.3f, (1 + hedged %.3f) × %.3f]", s, load, u, base, cell(r, hcHedged), base)
			}
		}
	}
	for load, r := range rows["hedge+budget"] {
		if h := cell(r, hcHedged); h > 0.11 {
			t.Errorf("budget at %g: %.3f hedged per request, want <= 0.1 (+ the initial reserve)", load, h)
		}
	}
	over, budgeted := rows["hedge"][0.95], rows["hedge+budget"][0.95]
	if cell(over, hcAttempts) < 1.5 || cell(over, hcP99) < 2*cell(none[0.95], hcP99) {
		t.Errorf("fixed delay at 0.95: %.2f attempts/request, p99 %.0f ms (unhedged %.0f): want the hedges to feed on the queueing",
			cell(over, hcAttempts), cell(over, hcP99), cell(none[0.95], hcP99))
	}
	if cell(budgeted, hcP99) >= cell(over, hcP99)/2 {
		t.Errorf("budget at 0.95: p99 %.0f ms, want well under the unbudgeted %.0f ms", cell(budgeted, hcP99), cell(over, hcP99))
	}

	// Cancellations that free the worker save the hiccups' time: less
	// work than no hedging at all.
	c.Cancel, c.Loads, c.Strategies = "all", []float64{0.5}, []string{"none", "hedge"}
	rows = hedgeRows(t, c)
	if u, base := cell(rows["hedge"][0.5], hcUtilization), cell(rows["none"][0.5], hcUtilization); u >= base {
		t.Errorf("cancel all: receiver busy %.3f hedged, %.3f not: want less", u, base)
	}
}

func TestHedgeConfigValidate(t *testing.T) {
	for _, c := range []struct {
		set  func(*HedgeConfig)
		want string
	}{
		{func(c *HedgeConfig) { c.Warmup = c.Duration }, "warmup"},
		{func(c *HedgeConfig) { c.Tail = 1.5 }, "tail"},
		{func(c *HedgeConfig) { c.Quantile = 1 }, "quantile"},
		{func(c *HedgeConfig) { c.Cancel = "some" }, "cancel"},
		{func(c *HedgeConfig) { c.Loads = []float64{math.NaN()} }, "load"},
		{func(c *HedgeConfig) { c.Workers = 0 }, "workers"},
		{func(c *HedgeConfig) { c.Duration = 24 * 3600e9; c.Workers = 100_000 }, "duration"},
	} {
		cfg := DefaultHedge()
		c.set(&cfg)
		if _, err := cfg.Run(context.Background(), Options{}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "parameter: "+c.want+":") {
			t.Errorf("%s: %v", c.want, err)
		}
	}
}
