package sim_test

import (
	"context"
	"fmt"
	"os"

	"github.com/staggerhq/stagger/sim"
)

// Simulate seed 000 in virtual time: 4 callers against a gateway that is
// down for 700 ms, retrying immediately (20 ms) or with exponential backoff
// and full jitter, using the shipped retry.Policy and backoff schedules.
// The seed fixes every random draw, so the table is the same on every run.
func ExampleSeed000Config() {
	cfg := sim.DefaultSeed000()
	cfg.Log = 0 // no per-attempt lines
	res, err := cfg.Run(context.Background(), sim.Options{Seed: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	res.Settings = nil
	res.WriteText(os.Stdout)
	// Output:
	// seed000 — 4 callers, gateway down 700ms, each retries until accepted
	//
	// strategy   callers  attempts  accepted  peak/200ms  distinct waits  last accept ms  attempts/request
	// immediate        4        64         4          20               1             716             16.00
	// expo-full        4        22         4          12              18            1008              5.50
}

// List the scenarios of `stagger sim list`.
func ExampleScenarios() {
	for _, s := range sim.Scenarios() {
		fmt.Println(s.Name)
	}
	// Output:
	// seed000
	// herd
	// brooker2015
	// budgets
	// collapse
	// layers
	// littles-law
}
