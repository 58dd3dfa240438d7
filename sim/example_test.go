package sim_test

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/staggerhq/stagger/sim"
)

// Simulate the four-caller outage in virtual time: 4 callers, starting
// 12 ms apart, against a gateway that is down for 700 ms, retrying immediately (20 ms) or with
// exponential backoff and full jitter, using the shipped retry.Policy and
// backoff schedules. The seed fixes every random draw, so the table is the
// same on every run.
func ExampleRun() {
	res, err := sim.Run(context.Background(), "outage", map[string]string{"log": "0"}, sim.Options{Seed: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	res.Settings = nil
	res.WriteText(os.Stdout)
	// Output:
	// outage — 4 callers, gateway down 700ms, each retries until accepted
	//
	// strategy   callers  attempts  accepted  peak/200ms  distinct waits  last accept ms  attempts/request
	// immediate        4        64         4          18               1             741             16.00
	// expo-full        4        23         4          11              19            1311              5.75
}

// Write a result's rows as CSV (WriteJSON and WriteReport work alike).
func ExampleResult_WriteCSV() {
	res, err := sim.Run(context.Background(), "outage",
		map[string]string{"log": "0", "strategy": "expo-full", "callers": "8"}, sim.Options{Seed: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := res.WriteCSV(os.Stdout); err != nil {
		fmt.Println(err)
	}
	// Output:
	// strategy,callers,attempts,accepted,peak,distinct_waits,last_accept_ms,attempts_per_request
	// expo-full,8,47,8,22,37,1590,5.88
}

// List the scenarios of `stagger sim list` and the parameters of one.
func ExampleScenarios() {
	var names []string
	for _, s := range sim.Scenarios() {
		names = append(names, s.Name)
	}
	fmt.Println(strings.Join(names, " "))
	for _, p := range sim.Scenarios()[0].Params {
		fmt.Printf("--%s %s\n", p.Name, p.Default)
	}
	// Output:
	// outage herd brooker2015 budgets collapse layers littles-law metastable spiral backoff bimodal limits hedge
	// --callers 4
	// --outage 700ms
	// --rtt 26.2ms
	// --ramp 48ms
	// --window 200ms
	// --wait 20ms
	// --base 60ms
	// --strategy immediate,expo-full
	// --log 1
}
