// Package labkit is the implementation of the lab behind package lab and
// the CLI. It measures what a retry policy does to the service that receives
// the retries.
//
// Every retry library explains what the caller does. The lab stands on the
// other side: a real HTTP [Gateway] on 127.0.0.1 with a scripted fault
// timeline ([Faults]: down from t0 to t1, response latency, a concurrency
// cap, a slow phase, flapping) counts every attempt that arrives — total,
// accepted, rejected, and the peak number of attempts inside any window of
// 200 ms (sliding; the width is configurable) — because a gateway that is
// briefly down does not care that you tried again, it cares how many callers
// tried again at the same instant.
//
// A [Scenario] starts N callers, each one logical request retried with a real
// [retry.Policy] (the shipped backoff, budget and limit code, never a copy)
// until it is accepted or the policy gives up, and records every attempt on
// both sides: once by the caller and once by the gateway. The two counts must
// agree exactly; [Result.Agree] says whether they did.
//
// The receiving-side counter is [Recorder]: it knows nothing of HTTP, so any
// component that sees attempts arrive counts them with the same code. The
// lab gateway keeps every attempt with it; the counting proxy, which runs
// for days, uses [WindowedRecorder], whose memory is bounded by windows.
//
// Strategies are named as on the command line — immediate, constant, expo,
// expo-full, expo-equal, decorrelated, each optionally followed by +budget,
// +bulkhead, +breaker, +rate and +hedge — and [ParseStrategy] turns a name
// into the real schedule, budget, circuit breaker, limiters and hedge.
package labkit
