package limit_test

import (
	"errors"
	"fmt"

	"github.com/staggerhq/stagger/limit"
)

// A bulkhead per dependency: a full one answers at once instead of queueing.
func ExampleBulkhead() {
	payments, _ := limit.NewBulkhead(2)
	payments.TryAcquire()
	payments.TryAcquire()
	err := limit.Do(payments, func() error { return nil })
	fmt.Println(errors.Is(err, limit.ErrLimited), payments.InFlight())
	// Output: true 2
}
