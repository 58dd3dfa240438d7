package queue

import (
	"fmt"
	"testing"
	"time"
)

// A handler's nil error, every successful attempt's, is not looked into
// for a Snooze, and costs no allocation; a wrapped Snooze is found.
func TestSnoozedNilAllocatesNothing(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() {
		if _, ok := snoozed(nil); ok {
			t.Fatal("nil is a snooze")
		}
	}); n != 0 {
		t.Errorf("snoozed(nil): %v allocations, want 0", n)
	}
	if d, ok := snoozed(fmt.Errorf("later: %w", Snooze(time.Minute))); !ok || d != time.Minute {
		t.Errorf("a wrapped Snooze: %v %v", d, ok)
	}
}
