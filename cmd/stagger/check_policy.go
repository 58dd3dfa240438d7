package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/budget"
	"github.com/staggerhq/stagger/check"
	"github.com/staggerhq/stagger/grpc/retryconfig"
	"github.com/staggerhq/stagger/limit"
	"github.com/staggerhq/stagger/retry"
)

// maxPolicyFile bounds a policy file.
const maxPolicyFile = 1 << 20

// policyFile is a --policy file: a retry.Policy in JSON, its fields named
// as retry.Policy's (camelCase), durations as Go duration strings.
type policyFile struct {
	Name           string          `json:"name"`
	MaxAttempts    *int            `json:"maxAttempts"`
	Schedule       *scheduleJSON   `json:"schedule"`
	AttemptTimeout *string         `json:"attemptTimeout"`
	Timeout        *string         `json:"timeout"`
	MaxAfter       *string         `json:"maxAfter"`
	ClampAfter     bool            `json:"clampAfter"`
	Budget         *budgetJSON     `json:"budget"`
	Limiter        *limiterJSON    `json:"limiter"`
	Hedge          *hedgeJSON      `json:"hedge"`
	Comment        json.RawMessage `json:"comment"` // ignored: room for a note
}

type scheduleJSON struct {
	Kind       string   `json:"kind"` // constant, exponential, decorrelated
	Delay      *string  `json:"delay"`
	Base       *string  `json:"base"`
	Cap        *string  `json:"cap"`
	Multiplier *float64 `json:"multiplier"`
	Jitter     string   `json:"jitter"` // none, full, equal
}

type budgetJSON struct {
	Kind       string   `json:"kind"` // token-bucket, grpc, ratio
	Max        *int64   `json:"max"`
	PerRequest *int64   `json:"perRequest"`
	PerRetry   *int64   `json:"perRetry"`
	MaxTokens  *float64 `json:"maxTokens"`
	TokenRatio *float64 `json:"tokenRatio"`
	Ratio      *float64 `json:"ratio"`
	Span       *string  `json:"span"`
}

type limiterJSON struct {
	Kind string `json:"kind"` // bulkhead
	Size *int   `json:"size"`
}

type hedgeJSON struct {
	Delay       *string  `json:"delay"`
	Quantile    *float64 `json:"quantile"`
	MinSamples  *int     `json:"minSamples"`
	MaxInFlight *int     `json:"maxInFlight"`
}

// fieldErr is an error naming the field and the rule it broke.
func fieldErr(field, format string, a ...any) error {
	return fmt.Errorf("%s: %s", field, fmt.Sprintf(format, a...))
}

// jsonError turns encoding/json's errors into one naming the field and
// what it wants.
func jsonError(err error) error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		want := "a " + te.Type.String()
		switch te.Type.Kind().String() {
		case "int", "int64":
			want = "a whole number"
		case "float64":
			want = "a finite number"
		case "string":
			want = "a string"
		case "bool":
			want = "true or false"
		case "struct", "ptr", "map":
			want = "an object"
		}
		if te.Type.String() == "*string" {
			want = "a string"
		}
		got := te.Value
		switch {
		case got == "bool":
			got = "a boolean"
		case strings.HasPrefix(got, "number") && want == "a string":
			got = "a number (durations are strings with a unit, such as \"100ms\")"
		case strings.HasPrefix(got, "number"):
			got = "the " + got + " (out of range or not whole)"
		case got == "array" || got == "object":
			got = "an " + got
		default:
			got = "a " + got
		}
		field := te.Field
		if field == "" {
			field = "the file"
		}
		return fieldErr(field, "want %s, got %s", want, got)
	case errors.As(err, &se):
		return fmt.Errorf("malformed JSON at byte %d: %v", se.Offset, se)
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return errors.New("malformed JSON: the file ends early")
	}
	if msg := err.Error(); strings.HasPrefix(msg, "json: unknown field ") {
		return fmt.Errorf("unknown field %s (want the fields of a retry policy: name, maxAttempts, schedule, attemptTimeout, timeout, maxAfter, clampAfter, budget, limiter, hedge)", strings.TrimPrefix(msg, "json: unknown field "))
	}
	return err
}

func duration(field string, s *string, positive bool) (time.Duration, error) {
	if s == nil {
		return 0, nil
	}
	d, err := time.ParseDuration(*s)
	switch {
	case err != nil:
		return 0, fieldErr(field, "want a duration with a unit such as \"100ms\", got %q", *s)
	case d < 0:
		return 0, fieldErr(field, "must be >= 0, got %v", d)
	case positive && d == 0:
		return 0, fieldErr(field, "must be > 0, got %v", d)
	}
	return d, nil
}

func finiteIn(field string, f *float64, lo, hi float64, open bool) error {
	if f == nil {
		return nil
	}
	if math.IsNaN(*f) || math.IsInf(*f, 0) || *f < lo || *f > hi || open && *f == lo {
		return fieldErr(field, "must be a finite number in %s%v, %v], got %v", map[bool]string{true: "(", false: "["}[open], lo, hi, *f)
	}
	return nil
}

// loadPolicy reads a --policy file: a policy file, or a gRPC service
// config (a JSON object with methodConfig or retryThrottling), translated
// by retryconfig.Parse's rules. The check.Policy it returns
// makes a fresh budget, limiter and hedge for every run.
func loadPolicy(path string) (check.Policy, error) {
	f, err := os.Open(path)
	if err != nil {
		return check.Policy{}, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxPolicyFile+1))
	if err != nil {
		return check.Policy{}, err
	}
	if len(b) > maxPolicyFile {
		return check.Policy{}, fmt.Errorf("the file is larger than %d bytes", maxPolicyFile)
	}
	return parsePolicy(strings.TrimSuffix(filepath.Base(path), filepath.Ext(path)), b)
}

// parsePolicy parses a policy file's contents; name is the policy's name
// unless the file gives one.
func parsePolicy(name string, b []byte) (check.Policy, error) {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(b, &probe); err != nil {
		return check.Policy{}, jsonError(err)
	}
	if _, ok := probe["methodConfig"]; ok {
		return serviceConfigPolicy(name, b)
	}
	if _, ok := probe["retryThrottling"]; ok {
		return serviceConfigPolicy(name, b)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var pf policyFile
	if err := dec.Decode(&pf); err != nil {
		return check.Policy{}, jsonError(err)
	}
	if dec.More() {
		return check.Policy{}, errors.New("malformed JSON: more than one value in the file")
	}
	if pf.Name != "" {
		name = pf.Name
	}
	mk, err := pf.build()
	if err != nil {
		return check.Policy{}, err
	}
	if pf.Hedge != nil {
		return check.HedgedFunc(name, func() (*retry.Hedge, *retry.Policy) {
			p, h, _ := mk()
			return h, p
		}), nil
	}
	return check.RetryFunc(name, func() *retry.Policy {
		p, _, _ := mk()
		return p
	}), nil
}

// build checks every field and returns a maker of the policy (fresh
// budget, limiter and hedge on every call).
func (pf *policyFile) build() (func() (*retry.Policy, *retry.Hedge, error), error) {
	var p retry.Policy
	if pf.MaxAttempts != nil {
		if *pf.MaxAttempts < 1 {
			return nil, fieldErr("maxAttempts", "must be >= 1 (1 never retries), got %d", *pf.MaxAttempts)
		}
		p.MaxAttempts = *pf.MaxAttempts
	}
	var err error
	if p.AttemptTimeout, err = duration("attemptTimeout", pf.AttemptTimeout, false); err != nil {
		return nil, err
	}
	if p.Timeout, err = duration("timeout", pf.Timeout, false); err != nil {
		return nil, err
	}
	if p.MaxAfter, err = duration("maxAfter", pf.MaxAfter, false); err != nil {
		return nil, err
	}
	p.ClampAfter = pf.ClampAfter
	if s := pf.Schedule; s != nil {
		if p.Schedule, err = s.build(); err != nil {
			return nil, err
		}
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	newBudget, err := pf.Budget.build()
	if err != nil {
		return nil, err
	}
	newLimiter, err := pf.Limiter.build()
	if err != nil {
		return nil, err
	}
	var h retry.Hedge
	if pf.Hedge != nil {
		hj := pf.Hedge
		if hj.Delay == nil {
			return nil, fieldErr("hedge.delay", "is required (the wait before a hedge, such as \"30ms\")")
		}
		if h.Delay, err = duration("hedge.delay", hj.Delay, true); err != nil {
			return nil, err
		}
		if err := finiteIn("hedge.quantile", hj.Quantile, 0, 0.999, false); err != nil {
			return nil, err
		}
		if hj.Quantile != nil {
			h.Quantile = *hj.Quantile
		}
		if hj.MinSamples != nil {
			h.MinSamples = *hj.MinSamples
		}
		if hj.MaxInFlight != nil {
			h.MaxInFlight = *hj.MaxInFlight
		}
		if err := h.Validate(); err != nil {
			return nil, fmt.Errorf("hedge: %w", err)
		}
	}
	return func() (*retry.Policy, *retry.Hedge, error) {
		q := p
		q.Budget, q.Limiter = newBudget(), newLimiter()
		if pf.Hedge == nil {
			return &q, nil, nil
		}
		hh := retry.Hedge{Delay: h.Delay, Quantile: h.Quantile, MinSamples: h.MinSamples, MaxInFlight: h.MaxInFlight}
		return &q, &hh, nil
	}, nil
}

func (s *scheduleJSON) build() (backoff.Schedule, error) {
	var jit backoff.Jitter
	switch s.Jitter {
	case "", "none":
	case "full":
		jit = backoff.Full
	case "equal":
		jit = backoff.Equal
	default:
		return nil, fieldErr("schedule.jitter", "want none, full or equal, got %q", s.Jitter)
	}
	var sc backoff.Schedule
	switch s.Kind {
	case "constant":
		if s.Delay == nil {
			return nil, fieldErr("schedule.delay", "is required for a constant schedule")
		}
		d, err := duration("schedule.delay", s.Delay, false)
		if err != nil {
			return nil, err
		}
		sc = backoff.Constant(d)
	case "exponential", "":
		if s.Base == nil {
			return nil, fieldErr("schedule.base", "is required for an exponential schedule")
		}
		base, err := duration("schedule.base", s.Base, true)
		if err != nil {
			return nil, err
		}
		capd, err := duration("schedule.cap", s.Cap, false)
		if err != nil {
			return nil, err
		}
		if err := finiteIn("schedule.multiplier", s.Multiplier, 1, 1000, false); err != nil {
			return nil, err
		}
		e := backoff.Exponential{Base: base, Cap: capd, Jitter: jit}
		if s.Multiplier != nil {
			e.Multiplier = *s.Multiplier
		}
		sc = e
	case "decorrelated":
		base, err := duration("schedule.base", s.Base, true)
		if err != nil {
			return nil, err
		}
		if s.Base == nil {
			return nil, fieldErr("schedule.base", "is required for a decorrelated schedule")
		}
		capd, err := duration("schedule.cap", s.Cap, false)
		if err != nil {
			return nil, err
		}
		sc = backoff.Decorrelated{Base: base, Cap: capd}
	default:
		return nil, fieldErr("schedule.kind", "want constant, exponential or decorrelated, got %q", s.Kind)
	}
	if v, ok := sc.(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			return nil, fmt.Errorf("schedule: %w", err)
		}
	}
	return sc, nil
}

func (b *budgetJSON) build() (func() budget.Budget, error) {
	none := func() budget.Budget { return nil }
	if b == nil {
		return none, nil
	}
	positive := func(field string, v *int64) (int64, error) {
		if v == nil {
			return 0, nil
		}
		if *v < 1 {
			return 0, fieldErr(field, "must be >= 1, got %d", *v)
		}
		return *v, nil
	}
	switch b.Kind {
	case "token-bucket":
		mx, err := positive("budget.max", b.Max)
		if err != nil {
			return nil, err
		}
		pr, err := positive("budget.perRequest", b.PerRequest)
		if err != nil {
			return nil, err
		}
		pt, err := positive("budget.perRetry", b.PerRetry)
		if err != nil {
			return nil, err
		}
		tb := budget.TokenBucket{Max: mx, PerRequest: pr, PerRetry: pt}
		if err := tb.Validate(); err != nil {
			return nil, fmt.Errorf("budget: %w", err)
		}
		return func() budget.Budget { return &budget.TokenBucket{Max: mx, PerRequest: pr, PerRetry: pt} }, nil
	case "grpc":
		if b.MaxTokens == nil || b.TokenRatio == nil {
			return nil, fieldErr("budget", "a grpc budget needs maxTokens and tokenRatio")
		}
		if err := finiteIn("budget.maxTokens", b.MaxTokens, 0, 1000, true); err != nil {
			return nil, err
		}
		if err := finiteIn("budget.tokenRatio", b.TokenRatio, 0, 1000, true); err != nil {
			return nil, err
		}
		mt, tr := *b.MaxTokens, *b.TokenRatio
		if _, err := budget.NewGRPC(mt, tr); err != nil {
			return nil, fmt.Errorf("budget: %w", err)
		}
		return func() budget.Budget { g, _ := budget.NewGRPC(mt, tr); return g }, nil
	case "ratio":
		if b.Ratio == nil {
			return nil, fieldErr("budget.ratio", "is required for a ratio budget")
		}
		if err := finiteIn("budget.ratio", b.Ratio, 0, 1000, true); err != nil {
			return nil, err
		}
		span, err := duration("budget.span", b.Span, true)
		if err != nil {
			return nil, err
		}
		if span == 0 {
			span = 10 * time.Second
		}
		r := *b.Ratio
		if _, err := budget.NewRatio(r, span); err != nil {
			return nil, fmt.Errorf("budget: %w", err)
		}
		return func() budget.Budget { x, _ := budget.NewRatio(r, span); return x }, nil
	}
	return nil, fieldErr("budget.kind", "want token-bucket, grpc or ratio, got %q", b.Kind)
}

func (l *limiterJSON) build() (func() limit.Limiter, error) {
	if l == nil {
		return func() limit.Limiter { return nil }, nil
	}
	if l.Kind != "bulkhead" {
		return nil, fieldErr("limiter.kind", "want bulkhead, got %q", l.Kind)
	}
	if l.Size == nil || *l.Size < 1 {
		return nil, fieldErr("limiter.size", "must be >= 1 (the attempts in flight at once)")
	}
	n := *l.Size
	if _, err := limit.NewBulkhead(n); err != nil {
		return nil, fmt.Errorf("limiter: %w", err)
	}
	return func() limit.Limiter { b, _ := limit.NewBulkhead(n); return b }, nil
}

// serviceConfigPolicy translates a gRPC service config with
// retryconfig.Parse's rules: the retry policy of the
// config's default method ("name": [{}]), or of its only method, or else
// of the first service/method in sorted order; retryThrottling becomes a
// fresh budget.GRPC per run. The dependency's refusals stand for
// UNAVAILABLE: a policy whose retryableStatusCodes leave it out makes one
// attempt.
func serviceConfigPolicy(name string, b []byte) (check.Policy, error) {
	c, err := retryconfig.Parse(b)
	if err != nil {
		return check.Policy{}, err
	}
	var m retryconfig.Method
	if d, ok := c.Methods[""]; ok {
		m = d
	} else if len(c.Methods) > 0 {
		keys := make([]string, 0, len(c.Methods))
		for k := range c.Methods {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		m = c.Methods[keys[0]]
		name += " " + keys[0]
	}
	base := retry.Policy{MaxAttempts: 1}
	if m.Policy != nil {
		base = *m.Policy
	}
	if len(m.RetryCodes) > 0 && !slices.Contains(m.RetryCodes, codes.Unavailable) {
		base.MaxAttempts = 1
	}
	newBudget := c.NewBudget
	return check.RetryFunc(name, func() *retry.Policy {
		p := base
		if newBudget != nil {
			p.Budget = newBudget("check")
		}
		return &p
	}), nil
}
