// Package queue is stagger's durable retry queue: jobs with
// attempts, max_attempts, available_at and a deadline that is never
// extended, claimed one attempt at a time, with the retry decision shared
// with every other stagger driver (retry.Policy.Decide).
//
// The package is split the way the work is:
//
//   - Store is the durable part: a few atomic state transitions (insert,
//     claim = attempts+1 and a lease in one committed transaction, record an
//     outcome only while the lease is held, extend, bury, requeue, stats).
//     Stores hold no rules. They live in their own modules (queue/sqlite,
//     queue/postgres) and prove themselves against queue/queuetest;
//     MemoryStore is the in-process one.
//   - Queue owns the rules: validation, Enqueue (idempotent by ID), RunOnce
//     (claim, run the handler outside any transaction, decide, record), the
//     clock (absolute Unix milliseconds, read before and after the handler),
//     operator actions (Dead, Requeue) and Stats.
//   - Worker runs handlers continuously, on one queue (NewWorker) or
//     several of one store, each with its own handler, Policy, Limits and
//     concurrency (NewMultiWorker): claims sized to idle handlers (and, for
//     short handlers, to those they start within a commit),
//     outcomes committed with the next claim, wake-ups, jittered polling,
//     lease heartbeats, per-attempt timeouts, a sweep, graceful shutdown.
//   - Inbox is the receiver's side: the effect of a message ID applied once
//     even when a lease expiry delivers it twice.
//
// Handlers are retry.Handler values — the same ones retry.Handler.Run and the
// broker adapters run — and answer in the retry vocabulary: nil, Retryable
// or After (retry later), Permanent (dead), anything else (unknown: back to
// the caller, the job stays leased until its lease expires).
package queue
