//go:build !race

package labkit

const raceEnabled = false
