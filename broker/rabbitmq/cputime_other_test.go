//go:build !unix

package rabbitmq

import (
	"testing"
	"time"
)

// cpuTime is 0 where getrusage is missing: the CPU metrics read 0.
func cpuTime(*testing.B) time.Duration { return 0 }
