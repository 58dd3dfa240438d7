//go:build !race

package simkit

// raceEnabled: the tests run under the race detector.
const raceEnabled = false
