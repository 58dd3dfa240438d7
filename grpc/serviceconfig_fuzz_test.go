package staggergrpc_test

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/staggerhq/stagger/backoff"
	staggergrpc "github.com/staggerhq/stagger/grpc"
)

// FuzzParseServiceConfig: any bytes are refused with an ErrInvalid error
// naming the service config or its field, or give a Client whose methods
// make 2 to 5 attempts (A6) on a valid schedule with positive backoffs and
// listed codes in 0..16.
func FuzzParseServiceConfig(f *testing.F) {
	f.Add([]byte(serviceConfig))
	for _, s := range []string{"", "null", "{}", "[]", `{"methodConfig":null}`, `{"methodConfig":[{}]}`,
		`{"methodConfig":[{"name":[{}],"retryPolicy":{"maxAttempts":2,"initialBackoff":"1s","maxBackoff":"1s","backoffMultiplier":1,"retryableStatusCodes":[14]}}]}`,
		`{"methodConfig":[{"name":[{"service":"s"}],"retryPolicy":{"maxAttempts":9223372036854775807,"initialBackoff":"0.000000001s","maxBackoff":"9223372036s","backoffMultiplier":1e308,"retryableStatusCodes":["UNAVAILABLE"]}}]}`,
		`{"methodConfig":[{"name":[{"service":"s"}],"retryPolicy":{"maxAttempts":2.5,"initialBackoff":"1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":[17]}}]}`,
		`{"methodConfig":[{"name":[{"service":"s"}],"retryPolicy":{"maxAttempts":"3","initialBackoff":"-1s","maxBackoff":"NaNs","backoffMultiplier":-0,"retryableStatusCodes":[]}}]}`,
		`{"methodConfig":[{"name":[{"method":"m"}],"retryPolicy":{"maxAttempts":2,"initialBackoff":"0x1p-2s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":[14]}}]}`,
		`{"retryThrottling":{"maxTokens":1001,"tokenRatio":0}}`, `{"retryThrottling":{"maxTokens":true,"tokenRatio":"0.1"}}`,
		`{"retryThrottling":{"maxTokens":1e309,"tokenRatio":0.1}}`, "{\"methodConfig\":[{\"name\":[{\"service\":\"\xff\"}]}]}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, js []byte) {
		c, err := staggergrpc.ParseServiceConfig(js)
		if err != nil {
			msg := err.Error()
			if c != nil || !errors.Is(err, staggergrpc.ErrInvalid) ||
				!(strings.Contains(msg, "service config") || strings.Contains(msg, "methodConfig[") || strings.Contains(msg, "retryThrottling")) {
				t.Fatalf("ParseServiceConfig(%q) = %v, %q: want no client and ErrInvalid naming the field", js, c, msg)
			}
			return
		}
		if c.Policy == nil || c.Policy.MaxAttempts != 1 {
			t.Fatalf("ParseServiceConfig(%q): default policy %+v, want one attempt", js, c.Policy)
		}
		for name, m := range c.Methods {
			p := m.Policy
			e, ok := p.Schedule.(backoff.Exponential)
			switch {
			case p.MaxAttempts < 2 || p.MaxAttempts > 5:
				t.Fatalf("ParseServiceConfig(%q): %q makes %d attempts, want 2 to 5", js, name, p.MaxAttempts)
			case !ok || e.Base <= 0 || e.Cap < e.Base || e.Cap > backoff.MaxDelay || !(e.Multiplier > 0) || math.IsInf(e.Multiplier, 0):
				t.Fatalf("ParseServiceConfig(%q): %q schedule %+v", js, name, p.Schedule)
			case p.Validate() != nil:
				t.Fatalf("ParseServiceConfig(%q): %q policy does not validate: %v", js, name, p.Validate())
			case len(m.RetryCodes) == 0:
				t.Fatalf("ParseServiceConfig(%q): %q retries no code", js, name)
			}
			for _, code := range m.RetryCodes {
				if code > codes.Unauthenticated {
					t.Fatalf("ParseServiceConfig(%q): %q retries code %d", js, name, code)
				}
			}
		}
	})
}

// FuzzServiceConfigAgreesWithGRPC: a retry policy ParseServiceConfig
// accepts, grpc-go accepts too (as a default service config), so a team
// moving a config over never gets from stagger a policy grpc-go would have
// refused; and the durations are read as protobuf's JSON duration
// (decimal seconds, at most 9 fractional digits).
func FuzzServiceConfigAgreesWithGRPC(f *testing.F) {
	f.Add(int64(4), "0.001s", "0.004s", 2.0, "UNAVAILABLE", 10.0, 0.1)
	f.Add(int64(2), "1s", "1s", 1.0, "14", 0.0, 0.0)
	f.Add(int64(9), ".5s", "5.s", 1e-300, "RESOURCE_EXHAUSTED", 1000.0, 1e-9)
	f.Add(int64(2), "0x1p-2s", "1s", 2.0, "UNAVAILABLE", 0.0, 0.0)
	f.Add(int64(2), "1.0000000001s", "2s", 2.0, "UNAVAILABLE", 0.0, 0.0)
	f.Add(int64(2), "0x_1p0s", "1_0s", 2.0, "UNAVAILABLE", 0.0, 0.0)
	f.Add(int64(2), "0.000000001s", "9223372036.854775807s", 2.0, "UNAVAILABLE", 0.0, 0.0)
	f.Add(int64(2), "1s", "315576000001s", 2.0, "UNAVAILABLE", 0.0, 0.0)
	f.Add(int64(1), "-1s", "Infs", -1.0, "17", 1001.0, -1.0)
	f.Fuzz(func(t *testing.T, maxAttempts int64, initial, maxB string, mult float64, code string, maxTokens, ratio float64) {
		if math.IsNaN(mult) || math.IsInf(mult, 0) || math.IsNaN(maxTokens) || math.IsInf(maxTokens, 0) || math.IsNaN(ratio) || math.IsInf(ratio, 0) {
			return // not JSON
		}
		rc := json.RawMessage(code)
		if !json.Valid(rc) {
			rc, _ = json.Marshal(code)
		}
		sc := map[string]any{"methodConfig": []any{map[string]any{
			"name": []any{map[string]string{"service": "s", "method": "m"}},
			"retryPolicy": map[string]any{"maxAttempts": maxAttempts, "initialBackoff": initial, "maxBackoff": maxB,
				"backoffMultiplier": mult, "retryableStatusCodes": []json.RawMessage{rc}},
		}}}
		if maxTokens != 0 || ratio != 0 {
			sc["retryThrottling"] = map[string]float64{"maxTokens": maxTokens, "tokenRatio": ratio}
		}
		js, err := json.Marshal(sc)
		if err != nil {
			return
		}
		c, err := staggergrpc.ParseServiceConfig(js)
		if err != nil {
			return
		}
		cc, gerr := grpc.NewClient("passthrough:///fuzz", grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultServiceConfig(string(js)))
		if gerr != nil {
			t.Fatalf("ParseServiceConfig(%s) accepts what grpc-go refuses: %v", js, gerr)
		}
		cc.Close()
		e := c.Methods["/s/m"].Policy.Schedule.(backoff.Exponential)
		for _, d := range []struct {
			s   string
			got time.Duration
		}{{initial, e.Base}, {maxB, e.Cap}} {
			if want, ok := protoDuration(d.s); !ok || d.got != want {
				t.Fatalf("ParseServiceConfig(%s): %q read as %v, want %v (%v)", js, d.s, d.got, want, ok)
			}
		}
	})
}

// protoDuration reads a protobuf JSON duration ("-?digits[.digits]s", at
// most 9 fractional digits), independently of the code under test.
func protoDuration(s string) (time.Duration, bool) {
	num, ok := strings.CutSuffix(s, "s")
	if !ok {
		return 0, false
	}
	whole, frac, _ := strings.Cut(num, ".")
	if whole+frac == "" || len(frac) > 9 {
		return 0, false
	}
	var d time.Duration
	for _, c := range whole {
		if c < '0' || c > '9' || d > math.MaxInt64/10/time.Second {
			return 0, false
		}
		d = d*10 + time.Duration(c-'0')
	}
	if d > math.MaxInt64/time.Second {
		return 0, false
	}
	d *= time.Second
	ns := time.Duration(0)
	for i := 0; i < 9; i++ {
		ns *= 10
		if i < len(frac) {
			c := frac[i]
			if c < '0' || c > '9' {
				return 0, false
			}
			ns += time.Duration(c - '0')
		}
	}
	if d > math.MaxInt64-ns {
		return 0, false
	}
	return d + ns, true
}
