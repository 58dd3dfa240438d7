// Package retryhttp retries HTTP requests without multiplying load: a
// drop-in http.RoundTripper driven by the stagger retry decision, and a
// server middleware that makes one layer the owner of retries.
//
//	client := &http.Client{Transport: retryhttp.New(nil, &retry.Policy{
//		MaxAttempts:    3,
//		Timeout:        2 * time.Second,        // one deadline for the whole call
//		AttemptTimeout: 800 * time.Millisecond, // each attempt: min(this, time left)
//	})}
//
// [Transport] retries only what is safe (idempotent methods, or an
// Idempotency-Key), replays bodies with GetBody, classifies each outcome per
// endpoint into the core vocabulary ([retry.Retryable], [retry.After] for
// Retry-After, [retry.Permanent]), honours Retry-After within limits
// ([AfterMode]), keeps a retry budget and a bulkhead per host, and sends
// [AttemptHeader] on every attempt.
//
// [Guard] reads that header on the server, counts requests per attempt
// number, sheds load with 503 + Retry-After + [NoRetryHeader] when the
// service is overloaded, and tells a Transport used inside the handler that
// an upstream layer already owns retries — so three stacked layers of three
// attempts send three attempts to the bottom, not twenty-seven.
package retryhttp
