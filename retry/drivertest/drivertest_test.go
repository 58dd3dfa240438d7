package drivertest_test

import (
	"testing"

	"github.com/staggerhq/stagger/retry/drivertest"
)

func TestDo(t *testing.T) { drivertest.Run(t, drivertest.Do) }
