package simkit_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/staggerhq/stagger/internal/simkit"
)

// Simulate the four-caller outage in virtual time: 4 callers, starting 12 ms
// apart, against a gateway that is down for 700 ms, retrying immediately
// (20 ms) or with exponential backoff and full jitter, using the shipped
// retry.Policy and backoff schedules.
// Options.Seed fixes every random draw, so the table is the same on every run.
func ExampleOutageConfig() {
	cfg := simkit.DefaultOutage()
	cfg.Log = 0 // no per-attempt lines
	res, err := cfg.Run(context.Background(), simkit.Options{Seed: 1})
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

// List the scenarios of `stagger sim list`.
func ExampleScenarios() {
	for _, s := range simkit.Scenarios() {
		fmt.Println(s.Name)
	}
	// Output:
	// outage
	// herd
	// brooker2015
	// budgets
	// collapse
	// layers
	// littles-law
	// metastable
	// spiral
	// backoff
	// bimodal
	// limits
	// hedge
}

// Drive a model with the engine: three requests arrive 10 ms apart and
// each leaves 15 ms after it arrived. Events come out in time order, ties
// in the order they were scheduled.
func ExampleEngine() {
	const arrive, leave = 0, 1
	e := simkit.NewEngine(8)
	for i := range 3 {
		e.At(time.Duration(i)*10*time.Millisecond, arrive, int32(i))
	}
	for {
		ev, ok := e.Next()
		if !ok {
			break
		}
		switch ev.Kind {
		case arrive:
			fmt.Println(e.Now(), "arrive", ev.ID)
			e.After(15*time.Millisecond, leave, ev.ID)
		case leave:
			fmt.Println(e.Now(), "leave", ev.ID)
		}
	}
	// Output:
	// 0s arrive 0
	// 10ms arrive 1
	// 15ms leave 0
	// 20ms arrive 2
	// 25ms leave 1
	// 35ms leave 2
}
