// Package retryconfig reads the retry parts of a gRPC service config (gRFC
// A6) into retry policies, without grpc-go's client or server: a program
// that only checks or simulates a config, such as `stagger check`, does not
// compile them. staggergrpc.ParseServiceConfig gives the same rules to a
// Client.
package retryconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/budget"
	"github.com/staggerhq/stagger/retry"
)

// MaxServiceConfig bounds the size of a service config Parse reads.
const MaxServiceConfig = 1 << 20

// ErrInvalid is wrapped by the errors of Parse; the message names the field
// and the rule. staggergrpc.ErrInvalid is the same error.
var ErrInvalid = errors.New("staggergrpc: invalid configuration")

// Method is the retry rules of some methods.
type Method struct {
	// Policy replaces Client.Policy for these methods (its Budget is
	// replaced by the target's when Client.NewBudget is set).
	Policy *retry.Policy
	// RetryCodes, if set, are the only codes retried, as in a service
	// config's retryableStatusCodes: every other code is permanent (A6).
	RetryCodes []codes.Code
}

// Config is the retry parts of a service config.
type Config struct {
	// Methods holds the rules of each name a methodConfig with a
	// retryPolicy lists, keyed by full method ("/pkg.Service/Method"), by
	// service ("/pkg.Service/") or "" for every other method. Methods the
	// config does not name make one attempt, as grpc-go would.
	Methods map[string]Method
	// NewBudget, if the config has retryThrottling, makes a fresh
	// budget.GRPC (one per target); nil otherwise.
	NewBudget func(target string) budget.Budget
}

// maxA6Attempts is A6's cap: a larger maxAttempts is treated as 5.
const maxA6Attempts = 5

// Parse reads the retry parts of a gRPC service config (JSON):
//
//   - each methodConfig's retryPolicy becomes a Method for the names it
//     lists: maxAttempts (more than 1; above 5 counts as 5, as in A6),
//     initialBackoff, maxBackoff and backoffMultiplier become an
//     exponential schedule with full jitter (A6: the n-th retry waits
//     random(0, min(initialBackoff·multiplier^(n−1), maxBackoff))), and
//     retryableStatusCodes are the only codes retried;
//   - retryThrottling becomes a budget.GRPC per target (maxTokens in
//     (0, 1000], tokenRatio > 0).
//
// Other fields of the config (load balancing, timeouts, waitForReady) are
// left to grpc-go. Anything invalid in the retry parts is an error naming
// the field and the rule.
func Parse(js []byte) (*Config, error) {
	if len(js) > MaxServiceConfig {
		return nil, fmt.Errorf("%w: service config is %d bytes, more than %d", ErrInvalid, len(js), MaxServiceConfig)
	}
	var sc struct {
		MethodConfig []struct {
			Name []struct {
				Service string `json:"service"`
				Method  string `json:"method"`
			} `json:"name"`
			RetryPolicy json.RawMessage `json:"retryPolicy"`
		} `json:"methodConfig"`
		RetryThrottling json.RawMessage `json:"retryThrottling"`
	}
	if err := json.Unmarshal(js, &sc); err != nil {
		return nil, fmt.Errorf("%w: service config: %v", ErrInvalid, jsonErr(err))
	}
	c := &Config{}
	for i, mc := range sc.MethodConfig {
		if len(mc.RetryPolicy) == 0 || string(mc.RetryPolicy) == "null" {
			continue
		}
		field := fmt.Sprintf("methodConfig[%d].retryPolicy", i)
		m, err := parseRetryPolicy(field, mc.RetryPolicy)
		if err != nil {
			return nil, err
		}
		if len(mc.Name) == 0 {
			return nil, fmt.Errorf("%w: methodConfig[%d].name must list at least one name", ErrInvalid, i)
		}
		for j, n := range mc.Name {
			var key string
			switch {
			case n.Service == "" && n.Method != "":
				return nil, fmt.Errorf("%w: methodConfig[%d].name[%d]: a method needs its service", ErrInvalid, i, j)
			case n.Service == "":
				key = ""
			case n.Method == "":
				key = "/" + n.Service + "/"
			default:
				key = "/" + n.Service + "/" + n.Method
			}
			if c.Methods == nil {
				c.Methods = map[string]Method{}
			}
			if _, dup := c.Methods[key]; dup {
				return nil, fmt.Errorf("%w: methodConfig[%d].name[%d]: %q is named twice", ErrInvalid, i, j, key)
			}
			c.Methods[key] = m
		}
	}
	if len(sc.RetryThrottling) > 0 && string(sc.RetryThrottling) != "null" {
		var rt struct {
			MaxTokens  *float64 `json:"maxTokens"`
			TokenRatio *float64 `json:"tokenRatio"`
		}
		if err := strictUnmarshal(sc.RetryThrottling, &rt); err != nil {
			return nil, fmt.Errorf("%w: retryThrottling: %v", ErrInvalid, jsonErr(err))
		}
		switch {
		case rt.MaxTokens == nil:
			return nil, fmt.Errorf("%w: retryThrottling.maxTokens is required", ErrInvalid)
		case rt.TokenRatio == nil:
			return nil, fmt.Errorf("%w: retryThrottling.tokenRatio is required", ErrInvalid)
		}
		if _, err := budget.NewGRPC(*rt.MaxTokens, *rt.TokenRatio); err != nil {
			return nil, fmt.Errorf("%w: retryThrottling: %v", ErrInvalid, err)
		}
		maxTokens, ratio := *rt.MaxTokens, *rt.TokenRatio
		c.NewBudget = func(string) budget.Budget {
			b, _ := budget.NewGRPC(maxTokens, ratio) // checked above
			return b
		}
	}
	return c, nil
}

func parseRetryPolicy(field string, raw json.RawMessage) (Method, error) {
	var rp struct {
		MaxAttempts           *int64            `json:"maxAttempts"`
		InitialBackoff        *string           `json:"initialBackoff"`
		MaxBackoff            *string           `json:"maxBackoff"`
		BackoffMultiplier     *float64          `json:"backoffMultiplier"`
		RetryableStatusCodes  []json.RawMessage `json:"retryableStatusCodes"`
		PerAttemptRecvTimeout *string           `json:"perAttemptRecvTimeout"`
	}
	if err := strictUnmarshal(raw, &rp); err != nil {
		return Method{}, fmt.Errorf("%w: %s: %v", ErrInvalid, field, jsonErr(err))
	}
	switch {
	case rp.MaxAttempts == nil:
		return Method{}, fmt.Errorf("%w: %s.maxAttempts is required", ErrInvalid, field)
	case rp.InitialBackoff == nil:
		return Method{}, fmt.Errorf("%w: %s.initialBackoff is required", ErrInvalid, field)
	case rp.MaxBackoff == nil:
		return Method{}, fmt.Errorf("%w: %s.maxBackoff is required", ErrInvalid, field)
	case rp.BackoffMultiplier == nil:
		return Method{}, fmt.Errorf("%w: %s.backoffMultiplier is required", ErrInvalid, field)
	case len(rp.RetryableStatusCodes) == 0:
		return Method{}, fmt.Errorf("%w: %s.retryableStatusCodes must list at least one code", ErrInvalid, field)
	}
	n := *rp.MaxAttempts
	if n <= 1 {
		return Method{}, fmt.Errorf("%w: %s.maxAttempts must be an integer > 1, got %d", ErrInvalid, field, n)
	}
	initial, err := parseDuration(*rp.InitialBackoff)
	if err != nil {
		return Method{}, fmt.Errorf("%w: %s.initialBackoff: %v", ErrInvalid, field, err)
	}
	maxB, err := parseDuration(*rp.MaxBackoff)
	if err != nil {
		return Method{}, fmt.Errorf("%w: %s.maxBackoff: %v", ErrInvalid, field, err)
	}
	mult := *rp.BackoffMultiplier
	if math.IsNaN(mult) || math.IsInf(mult, 0) || mult <= 0 {
		return Method{}, fmt.Errorf("%w: %s.backoffMultiplier must be finite and > 0, got %v", ErrInvalid, field, mult)
	}
	if maxB < initial {
		return Method{}, fmt.Errorf("%w: %s.maxBackoff (%v) must be >= initialBackoff (%v)", ErrInvalid, field, maxB, initial)
	}
	var attemptTimeout time.Duration
	if rp.PerAttemptRecvTimeout != nil {
		if attemptTimeout, err = parseDuration(*rp.PerAttemptRecvTimeout); err != nil {
			return Method{}, fmt.Errorf("%w: %s.perAttemptRecvTimeout: %v", ErrInvalid, field, err)
		}
	}
	codeList := make([]codes.Code, 0, len(rp.RetryableStatusCodes))
	for i, rc := range rp.RetryableStatusCodes {
		code, err := parseCode(rc)
		if err != nil {
			return Method{}, fmt.Errorf("%w: %s.retryableStatusCodes[%d]: %v", ErrInvalid, field, i, err)
		}
		codeList = append(codeList, code)
	}
	sched := backoff.Exponential{Base: initial, Multiplier: mult, Cap: maxB, Jitter: backoff.Full}
	p := &retry.Policy{MaxAttempts: int(min(n, maxA6Attempts)), Schedule: sched, AttemptTimeout: attemptTimeout}
	if err := p.Validate(); err != nil {
		return Method{}, fmt.Errorf("%w: %s: %v", ErrInvalid, field, err)
	}
	return Method{Policy: p, RetryCodes: codeList}, nil
}

// parseDuration reads a protobuf JSON duration: decimal seconds with at
// most 9 fractional digits and an "s" suffix ("0.1s", "2s", ".5s"), as
// grpc-go reads it, which must be > 0 and at most backoff.MaxDelay. It is
// read exactly, in integers: no exponent, hexadecimal or digit separator.
func parseDuration(s string) (time.Duration, error) {
	num, ok := strings.CutSuffix(s, "s")
	neg := strings.HasPrefix(num, "-")
	whole, frac, _ := strings.Cut(strings.TrimPrefix(num, "-"), ".")
	if !ok || whole+frac == "" || len(frac) > 9 || !isDigits(whole) || !isDigits(frac) {
		return 0, fmt.Errorf("must be a duration in seconds such as \"0.1s\" (at most 9 decimals), got %q", s)
	}
	sec, err := strconv.ParseInt("0"+whole, 10, 64)
	ns, _ := strconv.ParseInt((frac + "000000000")[:9], 10, 64)
	d := time.Duration(sec)*time.Second + time.Duration(ns)
	if neg || d == 0 || err != nil || sec > int64(backoff.MaxDelay/time.Second) || d < 0 {
		return 0, fmt.Errorf("must be > 0s and at most %v, got %q", backoff.MaxDelay, s)
	}
	return d, nil
}

// isDigits reports whether s is ASCII digits only ("" is).
func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// parseCode reads a status code as grpc-go's service config does: a name
// ("UNAVAILABLE", "CANCELLED") or a number from 0 to 16.
func parseCode(raw json.RawMessage) (codes.Code, error) {
	var c codes.Code
	if err := c.UnmarshalJSON(raw); err != nil || c > codes.Unauthenticated {
		return 0, fmt.Errorf("must be a status code name such as \"UNAVAILABLE\" or a number from 0 to 16, got %s", raw)
	}
	return c, nil
}

// strictUnmarshal decodes raw into v, refusing unknown fields (and, by
// the types of v's fields, numbers written as strings or booleans).
func strictUnmarshal(raw json.RawMessage, v any) error {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	return d.Decode(v)
}

// jsonErr names the field of a JSON type error.
func jsonErr(err error) string {
	if te, ok := err.(*json.UnmarshalTypeError); ok {
		return fmt.Sprintf("%s must be a %v, got %s", te.Field, te.Type, te.Value)
	}
	return err.Error()
}
