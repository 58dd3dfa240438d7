package labkit

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestParseFault(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string
	}{
		{"status 503", "status 503"},
		{"STATUS 429 retry-after=2s p=0.25 method=get path=/api header=x-canary:1 name=slow-api", "status 429 retry-after=2s p=0.25 method=GET path=/api header=X-Canary:1 name=slow-api"},
		{`status 503 retry-after=date:1m body="try later; please"`, `status 503 retry-after=date:1m0s body="try later; please"`},
		{"delay 100ms jitter=20ms", "delay 100ms jitter=20ms"},
		{"cut 10", "cut 10"},
		{"reset p=0.1", "reset p=0.1"},
		{"latency 50ms jitter=5ms dir=up", "latency 50ms jitter=5ms dir=up"},
		{"bandwidth 64KB", "bandwidth 65536"},
		{"slow-close 1s", "slow-close 1s"},
		{"timeout 0s", "timeout 0s"},
		{"slicer 3 delay=1ms dir=both", "slicer 3 delay=1ms dir=both"},
		{"limit-data 100", "limit-data 100"},
		{"reset-peer", "reset-peer 0s"},
		{"reset-peer 2s", "reset-peer 2s"},
	} {
		f, err := ParseFault(c.in)
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		if got := f.String(); got != c.want {
			t.Errorf("%q: String %q, want %q", c.in, got, c.want)
		}
		g, err := ParseFault(f.String())
		if err != nil || g != f {
			t.Errorf("%q: does not read back: %+v %v", c.in, g, err)
		}
	}
}

func TestParseFaultErrors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", "empty"},
		{"explode", `unknown fault "explode"`},
		{"status", `want "status CODE"`},
		{"status 200", "400 to 599"},
		{"status 503 p=1.5", "p=\"1.5\": want a probability from 0 to 1"},
		{"status 503 p=NaN", "probability"},
		{"status 503 p=true", "probability"},
		{"status 503 retry-after=-1s", "must be > 0"},
		{"status 503 jitter=1s", `unknown option "jitter"`},
		{"delay -1s", "must be >= 0"},
		{"delay 1y", "want a duration with a unit"},
		{"delay 25h", "<= 24h"},
		{"latency 1s method=GET", `unknown option "method"`},
		{"latency 1s dir=sideways", "want down, up or both"},
		{"slicer 0", "want a whole number of bytes"},
		{"bandwidth -5", "want a whole number of bytes"},
		{"status 503 name=a/b", "name="},
		{"status 503 p=0.5 p=0.6", "given twice"},
		{"status 503 p=0.5 toxicity=0.6", "not both"},
		{`status 503 body="open`, "not closed"},
		{"status 503 path=api", "starting with /"},
		{"status 503 header=a:b\r\nx", "header"},
		{"status 503 body=" + strings.Repeat("x", MaxFaultBody+1), "over the limit"},
	} {
		_, err := ParseFault(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%.60q: error %v, want it to say %q", c.in, err, c.want)
		}
	}
}

func TestFaultMatchesAndWaits(t *testing.T) {
	f, err := ParseFault("status 503 method=POST path=/pay header=X-Canary:1 retry-after=date:30s")
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{"X-Canary": {"1"}}
	get := func(k string) (string, bool) { v, ok := h[k]; return strings.Join(v, ","), ok }
	if !f.Matches("POST", "/pay/1", get) || f.Matches("GET", "/pay/1", get) || f.Matches("POST", "/other", get) {
		t.Error("method or path match wrong")
	}
	h.Set("X-Canary", "2")
	if f.Matches("POST", "/pay", get) {
		t.Error("header value not checked")
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if got := f.RetryAfterValue(now); got != "Fri, 02 Jan 2026 03:04:35 GMT" {
		t.Errorf("Retry-After date %q", got)
	}
	d, _ := ParseFault("delay 100ms jitter=20ms")
	if lo, hi := d.Wait(0), d.Wait(0.999999); lo != 80*time.Millisecond || hi < 119*time.Millisecond || hi > 120*time.Millisecond {
		t.Errorf("jitter range [%v, %v], want [80ms, 120ms]", lo, hi)
	}
	s, _ := ParseFault("status 429 retry-after=1500ms p=0.3")
	if s.RetryAfterValue(now) != "2" || s.Applies(0.3) || !s.Applies(0.29) {
		t.Error("retry-after rounding or toxicity wrong")
	}
}

func FuzzParseFault(f *testing.F) {
	for _, s := range []string{"status 503 retry-after=2s p=0.5 method=GET path=/a header=X:1 name=n",
		`status 500 body="a\"b"`, "delay 1s jitter=1ms", "slicer 1KB delay=1ms dir=both", "reset-peer", "bandwidth 2MB", `x="`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fa, err := ParseFault(s)
		if err != nil {
			return
		}
		if fa.Toxicity < 0 || fa.Toxicity > 1 || fa.Delay < 0 || fa.Jitter < 0 || fa.Bytes < 0 {
			t.Fatalf("%q: out of range: %+v", s, fa)
		}
		g, err := ParseFault(fa.String())
		if err != nil || g != fa {
			t.Fatalf("%q -> %q does not read back: %+v, %v", s, fa.String(), g, err)
		}
	})
}
