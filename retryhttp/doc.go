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
// Every attempt also carries the call's ledger: [RequestIDHeader] (the
// logical request, the same on every attempt) and [TimeoutHeader] (the
// time left before its deadline). What net/http re-sends by itself on a
// new connection is counted as an attempt too, so the server receives at
// most Policy.MaxAttempts requests per call.
//
// [Guard] reads those headers on the server, counts requests per attempt
// number and repeats per logical request, sheds load with 503 +
// Retry-After + [NoRetryHeader] when the service is overloaded, puts the
// ledger in the handler's context ([retry.DeliveryFrom]) bounded by the
// caller's deadline, and tells a Transport used inside the handler that
// an upstream layer already owns retries — so three stacked layers of
// three attempts send three attempts to the bottom, not twenty-seven.
package retryhttp
