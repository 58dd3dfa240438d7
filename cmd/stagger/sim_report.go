package main

import (
	"errors"

	"github.com/staggerhq/stagger/sim"
)

// writeSimReport writes res as an HTML report to path.
func writeSimReport(path string, res *sim.Result, cmdline string) error {
	return errors.New("not yet available")
}
