// Package sim runs the simulator's scenarios from Go: retry storms in
// virtual time, driven by the shipped policy code.
//
// The lab (real HTTP, real time) tops out at thousands of callers. The
// simulator answers the same questions for millions of callers and for
// published experiments (Brooker 2015, the SRE book's retry spiral,
// Huang et al. 2022 on metastable failures, Dean & Barroso 2013 on hedging),
// in seconds and deterministically, with the very backoff, budget, limit and
// retry.Policy values a service ships: every retry decision is a call to
// (*retry.Policy).Decide on a virtual clock.
//
// [Scenarios] lists the experiments of `stagger sim list`, each with its
// parameters; [Run] runs one by name with parameters given as strings, the
// way the command takes them as flags (docs/simulator.md describes each
// scenario, its sources and its defaults). A [Result] is a table, charts and
// notes; it is written as text, JSON, CSV or a self-contained HTML report.
// The same parameters and [Options.Seed] give the same Result, byte for
// byte, however many goroutines run a sweep.
//
// Parameters are strings, not one configuration type per scenario: thirteen
// types with their fields would be most of this package and would change
// with every model, while the names and rules of the parameters are the
// command's flags, already a documented contract that [Scenario.Params]
// lists. The discrete-event engine and the server and client models are not
// exported either: their event layout is tuned to the scenarios and changes
// with them, and a model of one's own system is a new scenario rather than a
// program against the engine.
package sim
