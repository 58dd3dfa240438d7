// Package stagger is a toolkit, and a lab, for retries that do not stampede.
//
// Short outages become long ones when many callers retry at the same
// instant. stagger gives Go services the pieces to retry safely and the
// instruments to see what a retry policy does to the service that receives
// it. This root package holds no code; the toolkit is its sub-packages:
//
//   - backoff: how long to wait (constant, exponential, jitter, RetryDelay);
//   - budget: may we retry at all (token bucket, gRPC A6, retry ratio,
//     adaptive throttling, retry breaker);
//   - limit: may an attempt start now (bulkheads, AIMD);
//   - retry: the error vocabulary, the one retry decision, Do and DoValue.
//
// The root module imports only the standard library; adapters that need
// third-party modules live in modules of their own under this repository.
package stagger
