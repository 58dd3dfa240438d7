package staggergrpc_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/budget"
	staggergrpc "github.com/staggerhq/stagger/grpc"
)

const serviceConfig = `{
  "loadBalancingConfig": [{"round_robin": {}}],
  "methodConfig": [{
    "name": [{"service": "grpc.health.v1.Health", "method": "Check"}],
    "timeout": "1s",
    "retryPolicy": {
      "maxAttempts": 4,
      "initialBackoff": "0.001s",
      "maxBackoff": "0.004s",
      "backoffMultiplier": 2,
      "retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"]
    }
  }],
  "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}
}`

func TestParseServiceConfig(t *testing.T) {
	c, err := staggergrpc.ParseServiceConfig([]byte(serviceConfig))
	if err != nil {
		t.Fatal(err)
	}
	m, ok := c.Methods["/grpc.health.v1.Health/Check"]
	if !ok {
		t.Fatalf("methods %v", c.Methods)
	}
	want := backoff.Exponential{Base: time.Millisecond, Multiplier: 2, Cap: 4 * time.Millisecond, Jitter: backoff.Full}
	if m.Policy.MaxAttempts != 4 || m.Policy.Schedule != want || len(m.RetryCodes) != 2 || m.RetryCodes[1] != codes.ResourceExhausted {
		t.Errorf("method %+v %+v", m, m.Policy)
	}
	if _, ok := c.NewBudget("x").(*budget.GRPC); !ok {
		t.Error("retryThrottling must become budget.GRPC")
	}

	// Against a real server: RESOURCE_EXHAUSTED (listed) is retried up to
	// 4 attempts; NOT_FOUND (not listed) is not.
	for _, cse := range []struct {
		code codes.Code
		want int64
	}{{codes.ResourceExhausted, 4}, {codes.Unavailable, 4}, {codes.Aborted, 1}} {
		c, _ := staggergrpc.ParseServiceConfig([]byte(serviceConfig))
		h := &health{answer: always(cse.code)}
		dial(t, serve(t, h, nil), c).Check(context.Background(), &healthpb.HealthCheckRequest{})
		if h.calls.Load() != cse.want {
			t.Errorf("%v: %d attempts, want %d", cse.code, h.calls.Load(), cse.want)
		}
	}
	// A method the config does not name makes one attempt.
	c, _ = staggergrpc.ParseServiceConfig([]byte(strings.Replace(serviceConfig, `"method": "Check"`, `"method": "Other"`, 1)))
	h := &health{answer: always(codes.Unavailable)}
	_, err = dial(t, serve(t, h, nil), c).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.Unavailable || h.calls.Load() != 1 {
		t.Errorf("unnamed method: %v after %d attempts", err, h.calls.Load())
	}

	// maxAttempts above 5 counts as 5 (A6).
	c, _ = staggergrpc.ParseServiceConfig([]byte(strings.Replace(serviceConfig, `"maxAttempts": 4`, `"maxAttempts": 9`, 1)))
	if n := c.Methods["/grpc.health.v1.Health/Check"].Policy.MaxAttempts; n != 5 {
		t.Errorf("maxAttempts 9 → %d, want 5", n)
	}
}

func TestParseServiceConfigErrors(t *testing.T) {
	retryPolicy := func(body string) string {
		return `{"methodConfig":[{"name":[{"service":"s"}],"retryPolicy":{` + body + `}}]}`
	}
	ok := `"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]`
	for _, c := range []struct{ js, field string }{
		{`{`, "service config"},
		{`[]`, "service config"},
		{retryPolicy(`"maxAttempts":1,` + ok), "maxAttempts"},
		{retryPolicy(`"maxAttempts":2.5,` + ok), "maxAttempts"},
		{retryPolicy(`"maxAttempts":true,` + ok), "maxAttempts"},
		{retryPolicy(`"maxAttempts":"3",` + ok), "maxAttempts"},
		{retryPolicy(ok), "maxAttempts"},
		{retryPolicy(`"maxAttempts":3,"initialBackoff":"-1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]`), "initialBackoff"},
		{retryPolicy(`"maxAttempts":3,"initialBackoff":"100ms","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]`), "initialBackoff"},
		{retryPolicy(`"maxAttempts":3,"initialBackoff":"NaNs","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]`), "initialBackoff"},
		{retryPolicy(`"maxAttempts":3,"initialBackoff":"2s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]`), "maxBackoff"},
		{retryPolicy(`"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":0,"retryableStatusCodes":["UNAVAILABLE"]`), "backoffMultiplier"},
		{retryPolicy(`"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":[]`), "retryableStatusCodes"},
		{retryPolicy(`"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["SOMETIMES"]`), "retryableStatusCodes[0]"},
		{retryPolicy(`"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":[99]`), "retryableStatusCodes[0]"},
		{retryPolicy(`"maxAttempts":3,"bogus":1,` + ok), "bogus"},
		{`{"methodConfig":[{"name":[],"retryPolicy":{"maxAttempts":3,` + ok + `}}]}`, "name"},
		{`{"methodConfig":[{"name":[{"method":"m"}],"retryPolicy":{"maxAttempts":3,` + ok + `}}]}`, "name[0]"},
		{`{"retryThrottling":{"maxTokens":0,"tokenRatio":0.1}}`, "maxTokens"},
		{`{"retryThrottling":{"maxTokens":2000,"tokenRatio":0.1}}`, "maxTokens"},
		{`{"retryThrottling":{"maxTokens":10}}`, "tokenRatio"},
		{`{"retryThrottling":{"maxTokens":10,"tokenRatio":-1}}`, "tokenRatio"},
		{`{"retryThrottling":{"maxTokens":"10","tokenRatio":0.1}}`, "maxTokens"},
		{strings.Repeat(" ", staggergrpc.MaxServiceConfig+1), "bytes"},
	} {
		_, err := staggergrpc.ParseServiceConfig([]byte(c.js))
		if err == nil || !errors.Is(err, staggergrpc.ErrInvalid) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%.80s: error %v, want one naming %q", c.js, err, c.field)
		}
	}
}
