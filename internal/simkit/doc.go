// Package simkit is the implementation of the simulator behind package sim
// and the CLI: a discrete-event simulator of retry storms in virtual
// time that runs the shipped policy code.
//
// The lab (real HTTP, real time) tops out at thousands of callers. sim
// answers the same questions for millions of callers and for published
// experiments, in seconds and deterministically, with the very
// backoff.Schedule, budget.Budget, limit.Limiter and retry.Policy values a
// service ships: every retry decision is a call to (*retry.Policy).Decide.
//
// # Engine
//
// [Engine] orders [Event] values (virtual time, kind, entity id) in a
// slice-backed 4-ary heap with branch-free sifts: no interface boxing per
// event, no allocation per event once the queue has grown, ties broken by schedule order so a
// run is a pure function of its inputs. Virtual time is an offset from
// [Epoch]; models pass Epoch+offset as the now of budgets and Decide,
// which never read the clock, so sliding windows and token buckets work
// in virtual time. Randomness comes from seeded math/rand/v2 PCG sources
// (brooker2015: Wang Yi's wyrand, the cheaper draw), one stream per
// run (and the policy's Rand), so the same seed gives the same output byte
// for byte, however many goroutines run a sweep.
//
// # How a simulated caller uses the policy
//
// Per attempt, in the order retry.Do uses: Limiter.TryAcquire (and, before
// an original, Budget.Request); the attempt; Limiter.Release and
// Budget.Result; then Policy.Decide(attempt, err, now, deadline, prev),
// which itself asks Budget.Retry. A retry is scheduled Decision.Delay
// later. Servers answer with the Retryable sentinels [ErrDown],
// [ErrConflict], [ErrFailed] and [ErrTimeout], created once.
//
// # Models
//
//   - Down-then-up server (outage, herd): down for attempts it starts to
//     serve before the outage ends. An attempt takes half the round trip
//     to arrive and half to return. Optionally the server serves attempts
//     one at a time at a fixed rate, first come first served (herd's
//     --db-rate: a database host's connection handling).
//   - One row with optimistic concurrency (brooker2015): read, then a
//     conditional write that fails if another write landed after the read;
//     four network hops of |Normal(d, sd)| per attempt. See
//     [Brooker2015Config] for the model and its closed form at sd = 0.
//   - Bernoulli failures with probability f per call (budgets).
//   - Capacity model (collapse): latency = base + per-request × attempts in
//     flight at arrival; a client timeout does not cancel the server's work.
//   - A thread pool with a FIFO queue in front, whose requests start to hang
//     when the dependency slows (the SRE book's thread pool with hanging
//     requests), or a bulkhead that answers at once when full
//     (littles-law), both on limit.Bulkhead.
//   - Stacked retry layers (layers), each with its own policy.
//   - A FIFO server whose capacity is cut for a while and which finishes
//     the work of timed-out requests (metastable), a backend that admits
//     what its token rate allows (spiral), a thread pool whose hanging
//     queries hold their threads (bimodal), and workers behind a FIFO
//     queue whose service time steps (limits).
//
// Clients are closed-loop callers (outage), serial workers with jobs in
// turn (herd), serial clients with a think time (backoff), or open-loop
// Poisson arrivals (budgets, collapse, littles-law and the rest).
//
// # Metrics
//
// [Meter] counts calls (attempts received), first tries, successes,
// give-ups by reason, amplification (calls per first try), the peak number
// of calls inside any sliding window (200 ms by default, as the lab), load
// and goodput per bucket, completion time, and the in-flight count over
// time for Little's law (L = λ·W in steady state).
//
// # Scenarios
//
// [Scenarios] lists the experiments of `stagger sim list`; docs/simulator.md
// gives each one's sources and defaults. Each is a configuration type (e.g. [HerdConfig]) whose Params are the CLI's flags
// (with the validation rules) and whose Run returns a [Result]: a table
// written as text, JSON or CSV, charts for the HTML report, and notes.
package simkit
