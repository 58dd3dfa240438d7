package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// checkRecord checks --record: a file name in an existing directory, and a
// --window of whole milliseconds (the file's unit).
func checkRecord(path string, window time.Duration) error {
	if path == "" {
		return nil
	}
	if strings.ContainsRune(path, 0) {
		return errors.New("--record: the file name contains a NUL byte")
	}
	if err := checkReportPath(path); err != nil {
		return fmt.Errorf("--record: %w", err)
	}
	if window%time.Millisecond != 0 {
		return fmt.Errorf("--record needs a --window of whole milliseconds, got %v", window)
	}
	return nil
}

// startRecord opens the --record file, if any, with the proxy's start as
// its origin (faultproxy.HTTPProxy.StartRecord).
func (p *proxy) startRecord() error {
	if p.cfg.record == "" {
		return nil
	}
	return p.StartRecord(p.cfg.record)
}

// stopRecord writes the rest of the --record file and puts it in place.
func (p *proxy) stopRecord(stdout io.Writer) error {
	if p.cfg.record == "" {
		return nil
	}
	if err := p.StopRecord(); err != nil {
		return err
	}
	if !p.cfg.quiet {
		fmt.Fprintf(stdout, "timeline: %s\n", p.cfg.record)
	}
	return nil
}
