// Package check puts a user's own retry policy through an outage and says
// what the dependency would receive, in virtual time (the simulator,
// deterministic for a seed, fast) and in real time (a loopback HTTP
// gateway, real goroutines, the real policy or transport), and turns the
// measures into go test assertions and CI gates.
//
// An [Experiment] is the policies under test ([Retry], [Hedged],
// [Transport]; several side by side, each named), the [Callers] (closed or
// open loop), the [Dependency] (latency, capacity, how it refuses) and a
// fault timeline in the clauses of `stagger proxy --fault` ("down 2s at
// 1s", "drop 500ms at 3s", "slow 1s at 0s for 4s", "flap 100ms/200ms at 1s
// for 2s", "cap 50", "retry-after 1s", "latency 20ms"), or a recorded
// outage ([ReadRecording], Experiment.Replay) whose arrivals and
// dependency are replayed against the policies.
//
// [Run] runs it in virtual time: a discrete-event engine drives each
// policy's own retrydriver.Step (Begin before an attempt, End after it), so the
// decision, the budget, the limiter and the hooks are the shipped code,
// not a model of it. [RunReal] runs the same experiment on a loopback
// gateway with retry.Do, Hedge.Do or the http.RoundTripper. Both count
// from the receiving side in the same way (attempts per window, the peak
// in any window, amplification, goodput, recovery, give-ups by reason,
// caller latency), so their results can be compared; the package's
// agreement tests do that over many seeds.
//
// [Result.Check] applies thresholds ([MaxAmplification],
// [MaxPeakPerWindow], [RecoversWithin], [NotMetastable], [AtMost]) in a
// test: a failure names the measure, the limit, the value, the window, the
// seed, and writes the HTML report where a person can find it.
package check
