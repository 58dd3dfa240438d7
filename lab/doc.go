// Package lab counts what a retry policy does to the service that receives
// the retries.
//
// Every retry library explains what the caller does. The lab stands on the
// other side, because a service that is briefly down does not care that you
// tried again, it cares how many callers tried again at the same instant.
// This package is the part of the lab a program uses:
//
//   - [Recorder] counts attempts as they arrive — by outcome, by logical
//     request and attempt number, and the peak inside any sliding window of
//     200 ms (or another width) — in a test, a staging service or a
//     consumer. [Recorder.Handler] does it for an [http.Handler], from the
//     Stagger-Request-Id and Stagger-Attempt headers that retryhttp sends.
//   - [WindowedRecorder] counts the same way in a process that runs for
//     days, with bounded memory.
//   - [Run] runs the lab's experiment from Go — callers retrying against a
//     real HTTP gateway on 127.0.0.1 that is down for a while, once per
//     strategy, every attempt counted on both sides — and
//     [Result.WriteReport] writes its HTML report.
//
// The `stagger lab` command (docs/lab.md) runs the same experiment with every
// knob as a flag: fault timelines, capacity caps, budgets, bulkheads and
// more. Those knobs, the gateway and the fault timeline are the command's,
// not this package's: they change with the command.
package lab
