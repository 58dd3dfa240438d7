package staggergrpc

import (
	"github.com/staggerhq/stagger/grpc/retryconfig"
	"github.com/staggerhq/stagger/retry"
)

// MaxServiceConfig bounds the size of a service config ParseServiceConfig
// reads.
const MaxServiceConfig = retryconfig.MaxServiceConfig

// ParseServiceConfig reads the retry parts of a gRPC service config (JSON)
// into a Client, so a team moves an existing config over unchanged:
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
// the field and the rule. Methods the config does not name make one
// attempt, as grpc-go would; set the Client's Policy to retry them too.
// The package retryconfig reads the same rules without this package's
// grpc-go dependency.
func ParseServiceConfig(js []byte) (*Client, error) {
	c, err := retryconfig.Parse(js)
	if err != nil {
		return nil, err
	}
	return &Client{Policy: &retry.Policy{MaxAttempts: 1}, Methods: c.Methods, NewBudget: c.NewBudget}, nil
}
