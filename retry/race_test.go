//go:build race

package retry

// raceEnabled: the race detector makes sync.Pool drop some of what it is given.
const raceEnabled = true
